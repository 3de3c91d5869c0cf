"""DingTalk HTTP mode against forged bodies (issue 25): the sign covers only the timestamp, so a
body signed with an observed (timestamp, sign) pair is taken for what DingTalk sent. What such
a body can do is bounded: replies go only to DingTalk's origin (here, the fake at ``apiBase``),
never to a URL the body names, and no redirect is followed; the window is
``signWindowSeconds``."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from adapters.dingtalk.crypto import robot_sign
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.dingtalk import SECRET, DingTalkHarness, robot_message, start_harness
from tests.support.helpers import free_port
from tests.support.waits import eventually


class Internal:
    """A service on the gateway's host that nobody outside should reach (an admin API)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.hits: list[str] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._any)
        self.runner = web.AppRunner(self.app)

    async def _any(self, request: web.Request) -> web.Response:
        self.hits.append(f"{request.method} {request.path_qs}")
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/internal/admin"

    async def start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()


Env = tuple[FakeDingTalk, DingTalkHarness, Internal]


@pytest.fixture
async def env(prefix: str, redis_client: Any) -> AsyncIterator[Env]:
    internal = Internal()
    await internal.start()
    fake = FakeDingTalk()

    async def moved(request: web.Request) -> web.Response:
        """Not DingTalk's behaviour: a redirect on the allowed origin (a proxy in front of it,
        say) must still not send the answer elsewhere."""
        raise web.HTTPTemporaryRedirect(internal.url)

    fake.app.router.add_post("/robot/moved", moved)
    await fake.start()
    gateway, harness = await start_harness(prefix, fake)
    try:
        yield fake, harness, internal
    finally:
        await harness.close()
        await gateway.stop()
        await fake.stop()
        await internal.runner.cleanup()


async def test_a_forged_body_cannot_send_the_answer_to_an_internal_url(env: Env) -> None:
    fake, h, internal = env
    ts = int(time.time() * 1000)  # one (timestamp, sign) pair, as seen on a real request
    real = robot_message(fake, "real question")
    status, body = await h.post(real, timestamp=ts)
    assert status == 200 and json.loads(body)["status"] == "queued"
    forged = robot_message(fake, "what is the secret?", sessionWebhook=internal.url)
    status, body = await h.post(forged, timestamp=ts)
    assert status == 400 and json.loads(body) == {"error": "bad body"}
    await eventually(lambda: len(fake.sent()) >= 2)
    # Nothing reached the internal service, and only the real message was answered.
    assert internal.hits == []
    assert [m["text"] for m in fake.sent()] == ["**Working on it…**", "You said:\n> real question"]


async def test_a_second_message_with_the_same_pair_is_taken(env: Env) -> None:
    """Two messages DingTalk sends in the same millisecond carry the same pair (the sign is a
    function of the timestamp alone): a second one of the same sender in the same chat is a
    real message, not a replay. (One naming another sender or chat is refused: the pair is
    bound to its first body's, issue 36; tests/dingtalk/test_http.py.)"""
    fake, h, _ = env
    ts = int(time.time() * 1000)
    first = robot_message(fake, "one", sender="alice")
    second = robot_message(fake, "two", sender="alice")
    for message in (first, second):
        status, body = await h.post(message, timestamp=ts)
        assert status == 200 and json.loads(body)["status"] == "queued"
    await eventually(lambda: len(fake.sent()) >= 4)


async def test_a_redirect_from_the_webhook_is_not_followed(env: Env) -> None:
    fake, h, internal = env
    moved = robot_message(fake, "hello", sessionWebhook=f"{fake.base}/robot/moved?session=x")
    status, _ = await h.post(moved)
    assert status == 200
    working, final = await eventually(lambda: len(fake.sent()) >= 2 and fake.sent())
    assert working["via"] == final["via"] == "openapi"  # the webhook failed: OpenAPI instead
    assert final["text"] == "You said:\n> hello"
    assert internal.hits == []


async def test_a_timestamp_older_than_the_window_is_refused(env: Env) -> None:
    fake, h, _ = env
    ten_minutes_ago = int(time.time() * 1000) - 600_000  # within DingTalk's 1 h, past 300 s
    status, _ = await h.post(robot_message(fake, "late"), timestamp=ten_minutes_ago)
    assert status == 401
    sign = robot_sign(SECRET, str(10**16))  # digits too many for a timestamp in ms
    status, _ = await h.post(robot_message(fake, "far"), timestamp=10**16, sign=sign)
    assert status == 401
    assert fake.sent() == []


async def test_the_window_is_configurable(prefix: str, redis_client: Any) -> None:
    fake = FakeDingTalk()
    await fake.start()
    gateway, h = await start_harness(prefix, fake, signWindowSeconds=3600)
    try:
        ten_minutes_ago = int(time.time() * 1000) - 600_000
        status, _ = await h.post(robot_message(fake, "late"), timestamp=ten_minutes_ago)
        assert status == 200
        await eventually(lambda: len(fake.sent()) >= 2)
    finally:
        await h.close()
        await gateway.stop()
        await fake.stop()
