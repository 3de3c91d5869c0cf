"""The fake Lark with Lark's rate limits and monthly quota on (tests/fakes/limits.py), each
refusal seen through HTTP as a client sees it, on a clock the test moves: what is Lark's own
(headers, per message, per card, the month's quota, the records); the published per-API and
per-chat figures are kept on every platform (tests/conformance/test_fake_limits.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.lark import APP_SECRET, FakeLark
from tests.fakes.limits import LarkLimits
from tests.support.clock import FakeClock
from tests.support.lark import APP_ID, message_event

CARD = {
    "schema": "2.0",
    "config": {"update_multi": True},
    "header": {"title": {"tag": "plain_text", "content": "Working on it…"}},
    "body": {"elements": [{"tag": "markdown", "element_id": "answer", "content": "…"}]},
}


class Client:
    """Plain HTTP to the fake, with a tenant token."""

    def __init__(self, fake: FakeLark, http: aiohttp.ClientSession) -> None:
        self.fake, self.http, self.token = fake, http, ""

    async def call(
        self, method: str, path: str, body: Any = None, **query: str
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        headers = {"Authorization": f"Bearer {self.token}"}
        url = self.fake.base_url + path
        async with self.http.request(method, url, json=body, params=query, headers=headers) as resp:
            return resp.status, await resp.json(), dict(resp.headers)

    async def login(self) -> None:
        body = {"app_id": APP_ID, "app_secret": APP_SECRET}
        _, data, _ = await self.call(
            "POST", "/open-apis/auth/v3/tenant_access_token/internal", body
        )
        self.token = data["tenant_access_token"]

    async def bot(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        return await self.call("GET", "/open-apis/bot/v3/info")

    async def send(self, chat: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"receive_id": chat, "msg_type": "interactive", "content": json.dumps(CARD)}
        return await self.call("POST", "/open-apis/im/v1/messages", body, receive_id_type="chat_id")

    async def reply(self, parent: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"msg_type": "text", "content": json.dumps({"text": "hi"})}
        return await self.call("POST", f"/open-apis/im/v1/messages/{parent}/reply", body)

    async def patch(self, mid: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"content": json.dumps(CARD)}
        return await self.call("PATCH", f"/open-apis/im/v1/messages/{mid}", body)

    async def card(self, *, streaming: bool) -> str:
        card = {**CARD, "config": {"update_multi": True, "streaming_mode": streaming}}
        body = {"type": "card_json", "data": json.dumps(card)}
        _, data, _ = await self.call("POST", "/open-apis/cardkit/v1/cards", body)
        return str(data["data"]["card_id"])

    async def card_update(self, cid: str, seq: int) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"card": {"type": "card_json", "data": json.dumps(CARD)}, "sequence": seq}
        return await self.call("PUT", f"/open-apis/cardkit/v1/cards/{cid}", body)

    async def stream(self, cid: str, seq: int) -> tuple[int, dict[str, Any], dict[str, str]]:
        body = {"content": f"text {seq}", "sequence": seq}
        return await self.call(
            "PUT", f"/open-apis/cardkit/v1/cards/{cid}/elements/answer/content", body
        )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=1_000_000)


async def started(limits: LarkLimits | None) -> AsyncIterator[Client]:
    fake = FakeLark(limits=limits)
    await fake.start()
    async with aiohttp.ClientSession() as http:
        client = Client(fake, http)
        await client.login()
        yield client
    await fake.stop()


@pytest.fixture
async def lark(clock: FakeClock) -> AsyncIterator[Client]:
    async for client in started(LarkLimits(clock)):
        yield client


@pytest.fixture
async def plain() -> AsyncIterator[Client]:
    async for client in started(None):
        yield client


def limits(client: Client) -> LarkLimits:
    assert client.fake.limits is not None
    return client.fake.limits


async def test_a_429_names_the_limit_and_the_reset_in_its_headers(
    lark: Client, clock: FakeClock
) -> None:
    """The per-API figure itself, on every platform: tests/conformance/test_fake_limits.py."""
    answers = [await lark.bot() for _ in range(50)]
    assert {status for status, _, _ in answers} == {200}
    clock.advance(400)
    status, body, headers = await lark.bot()
    assert (status, body["code"]) == (429, 99991400)
    assert headers["x-ogw-ratelimit-limit"] == "50"
    assert headers["x-ogw-ratelimit-reset"] == "1"  # 0.6 s, rounded up
    refusals = [(r.api, r.rule, r.code) for r in limits(lark).refusals]
    assert refusals == [("GET /open-apis/bot/v3/info", "api_second", 99991400)]


async def test_ids_do_not_make_another_api(lark: Client) -> None:
    """Per API is per method and route: PATCH of 50 messages is one API."""
    mids = [(await lark.send(f"oc_{i}"))[1]["data"]["message_id"] for i in range(11)]
    statuses = [(await lark.patch(mid))[0] for mid in mids for _ in range(5)][:51]
    assert statuses[:50] == [200] * 50 and statuses[50] == 429


async def test_each_api_takes_a_number_a_minute_then_429_with_the_seconds_left(
    clock: FakeClock,
) -> None:
    async for lark in started(LarkLimits(clock, per_minute=30)):
        for _ in range(3):
            assert {(await lark.bot())[0] for _ in range(10)} == {200}
            clock.advance(1000)
        clock.advance(500)  # 3.5 s after the first call
        status, body, headers = await lark.bot()
        assert (status, body["code"]) == (429, 99991400)
        assert headers["x-ogw-ratelimit-limit"] == "30"
        assert headers["x-ogw-ratelimit-reset"] == "57"  # 60 s after the first call
        clock.advance(56_500)
        assert (await lark.bot())[0] == 200
        assert [r.rule for r in limits(lark).refusals] == ["api_minute"]


@pytest.mark.parametrize(("count_refused", "after"), [(False, [200, 200]), (True, [200, 429])])
async def test_a_refused_call_counts_only_when_asked(
    clock: FakeClock, count_refused: bool, after: list[int]
) -> None:
    async for lark in started(LarkLimits(clock, per_second=2, count_refused=count_refused)):
        assert [(await lark.bot())[0] for _ in range(2)] == [200, 200]
        clock.advance(500)
        assert (await lark.bot())[0] == 429  # counted, it stays in the window until 1.5 s
        clock.advance(500)
        assert [(await lark.bot())[0] for _ in range(2)] == after


def test_the_defaults_are_larks_published_figures() -> None:
    limits = LarkLimits()
    figures = [(r.limit, r.window_ms) for r in (limits.api_second, limits.api_minute)]
    assert figures == [(50, 1000), (1000, 60_000)]
    assert [limits.chat.limit, limits.message.limit, limits.card.limit] == [5, 5, 10]
    assert limits.calls_per_month is None


async def test_one_chat_takes_5_sends_and_replies_a_second_then_400_230020(
    lark: Client, clock: FakeClock
) -> None:
    event = message_event(chat_id="oc_team", chat_type="group")
    lark.fake.receive(event)
    parent = event["event"]["message"]["message_id"]
    answers = [await lark.reply(parent) for _ in range(3)]
    answers += [await lark.send("oc_team") for _ in range(2)]  # replies and sends share it
    assert [status for status, _, _ in answers] == [200] * 5
    status, body, headers = await lark.reply(parent)
    assert (status, body["code"]) == (400, 230020)
    assert "x-ogw-ratelimit-reset" not in headers
    assert (await lark.send("oc_team"))[1]["code"] == 230020
    assert (await lark.send("oc_elsewhere"))[0] == 200
    clock.advance(1000)
    assert (await lark.reply(parent))[0] == 200
    assert {(r.rule, r.key) for r in limits(lark).refusals} == {("chat", "chat_id:oc_team")}


async def test_one_message_takes_5_patches_a_second_then_400_230020(
    lark: Client, clock: FakeClock
) -> None:
    mid = (await lark.send("oc_a"))[1]["data"]["message_id"]
    other = (await lark.send("oc_b"))[1]["data"]["message_id"]
    assert [(await lark.patch(mid))[0] for _ in range(5)] == [200] * 5
    status, body, _ = await lark.patch(mid)
    assert (status, body["code"]) == (400, 230020)
    assert (await lark.patch(other))[0] == 200
    clock.advance(1000)  # the limits' clock, not the wall clock
    assert (await lark.patch(mid))[0] == 200
    assert lark.fake.messages[mid]["patches"] == 6


async def test_one_card_takes_10_operations_a_second_unless_it_is_streaming(
    lark: Client, clock: FakeClock
) -> None:
    still = await lark.card(streaming=False)
    assert [(await lark.card_update(still, seq))[0] for seq in range(1, 11)] == [200] * 10
    status, body, headers = await lark.card_update(still, 11)
    assert (status, body["code"], headers["x-ogw-ratelimit-limit"]) == (429, 99991400, "10")
    streaming = await lark.card(streaming=True)
    assert [(await lark.stream(streaming, seq))[0] for seq in range(1, 16)] == [200] * 15
    clock.advance(1000)
    assert (await lark.card_update(still, 12))[0] == 200
    assert [r.rule for r in limits(lark).refusals] == ["card"]


async def test_the_monthly_quota_refuses_429_99991403_and_counts_only_successes(
    clock: FakeClock,
) -> None:
    async for lark in started(LarkLimits(clock, calls_per_month=3)):
        assert (await lark.reply("om_unknown"))[0] == 400  # a failed call is not counted
        assert [(await lark.bot())[0] for _ in range(3)] == [200] * 3
        status, body, _ = await lark.bot()
        assert (status, body["code"]) == (429, 99991403)
        assert (await lark.send("oc_x"))[1]["code"] == 99991403
        await lark.login()  # auth is not counted: it still answers
        assert lark.token
        uid = "ou_alice"
        lark.fake.users[uid] = {"open_id": uid, "name": "Alice"}
        path = f"/open-apis/contact/v3/users/{uid}"
        assert (await lark.call("GET", path, user_id_type="open_id"))[0] == 200  # contacts free
        assert limits(lark).month_calls == 3
        assert [r.rule for r in limits(lark).refusals] == ["quota", "quota"]


async def test_every_answer_is_recorded_by_api_and_code(lark: Client) -> None:
    for _ in range(51):
        await lark.bot()
    counts = limits(lark).by_api()
    assert counts["GET /open-apis/bot/v3/info"] == {"0": 50, "99991400": 1}
    assert counts["POST /open-apis/auth/v3/tenant_access_token/internal"] == {"0": 1}
    assert len(limits(lark).throttled()) == 1


async def test_recording_only_refuses_nothing(clock: FakeClock) -> None:
    async for lark in started(LarkLimits(clock, enforce=False)):
        assert {(await lark.bot())[0] for _ in range(60)} == {200}
        assert limits(lark).refusals == []
        assert len(limits(lark).answers) == 61  # the token and 60 calls


async def test_the_fake_without_limits_answers_as_before(plain: Client) -> None:
    assert plain.fake.limits is None
    assert {(await plain.bot())[0] for _ in range(60)} == {200}
    assert {(await plain.send("oc_team"))[0] for _ in range(8)} == {200}
    card = await plain.card(streaming=False)
    assert {(await plain.card_update(card, seq))[0] for seq in range(1, 13)} == {200}
