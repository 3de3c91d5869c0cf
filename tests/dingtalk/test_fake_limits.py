"""The fake DingTalk with DingTalk's per-app QPS limit and monthly quota on (tests/fakes/
limits.py), seen through HTTP on a clock the test moves: what is DingTalk's own (the refusal's
shape, the records, the month's quota); the published per-API figure is kept on every platform
(tests/conformance/test_fake_limits.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.dingtalk import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.fakes.limits import DingTalkLimits
from tests.support.clock import FakeClock

SEND = "/v1.0/robot/groupMessages/send"
MESSAGE = {
    "robotCode": CLIENT_ID,
    "msgKey": "sampleText",
    "msgParam": json.dumps({"content": "hi"}),
    "openConversationId": "cid_team",
}


class Client:
    def __init__(self, fake: FakeDingTalk, http: aiohttp.ClientSession) -> None:
        self.fake, self.http, self.token = fake, http, ""

    async def call(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        headers = {"x-acs-dingtalk-access-token": self.token}
        async with self.http.request(
            method, self.fake.base + path, json=body, headers=headers
        ) as resp:
            return resp.status, await resp.json()

    async def login(self) -> None:
        body = {"appKey": CLIENT_ID, "appSecret": CLIENT_SECRET}
        _, answer = await self.call("POST", "/v1.0/oauth2/accessToken", body)
        self.token = answer["accessToken"]

    async def send(self) -> tuple[int, dict[str, Any]]:
        return await self.call("POST", SEND, MESSAGE)


async def started(limits: DingTalkLimits | None) -> AsyncIterator[Client]:
    fake = FakeDingTalk(limits=limits)
    await fake.start()
    try:
        async with aiohttp.ClientSession() as http:
            client = Client(fake, http)
            await client.login()
            yield client
    finally:
        await fake.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=5_000_000)


def limits(client: Client) -> DingTalkLimits:
    assert client.fake.limits is not None
    return client.fake.limits


async def test_a_qps_refusal_is_403_with_a_request_id_and_recorded_by_api(
    clock: FakeClock,
) -> None:
    """The per-API figure itself, on every platform: tests/conformance/test_fake_limits.py."""
    async for dt in started(DingTalkLimits(clock, per_second=1)):
        assert (await dt.send())[0] == 200
        status, body = await dt.send()
        assert (status, body["code"]) == (403, "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi")
        assert body["requestid"]
        other = await dt.call("PUT", "/v1.0/card/streaming", {"outTrackId": "nope"})
        assert other[0] == 400  # another API: refused for its body, not throttled
        assert [(r.api, r.rule) for r in limits(dt).refusals] == [(f"POST {SEND}", "api_second")]
        assert limits(dt).by_api()[f"POST {SEND}"] == {
            "ok": 1,
            "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi": 1,
        }


async def test_the_monthly_quota_counts_successes_then_refuses(clock: FakeClock) -> None:
    async for dt in started(DingTalkLimits(clock, calls_per_month=2)):
        assert (await dt.call("POST", SEND, {**MESSAGE, "msgKey": "bad"}))[0] == 400
        assert [(await dt.send())[0] for _ in range(2)] == [200, 200]
        status, body = await dt.send()
        assert (status, body["code"]) == (403, "Forbidden.AccessDenied.ApiCountLimitForOrg")
        await dt.login()  # the token call is not counted
        assert limits(dt).month_calls == 2
