"""Hostile input, on every platform whose mode takes webhooks, through the running gateway
(docs/architecture.md, invariant 6): a forged or unsigned request is refused (401, or the
platform's refusal of a request that is no callback), a correctly signed body that is not the
platform's format is a 4xx, a body past ``server.maxBodyBytes`` is a 413 before the rest of it
is sent; each in one log line and no traceback, nothing ingested (the fake shows no message), and
a good message after all that still gets its answer. Each harness builds the requests
(``Harness.webhook``, ``Harness.forged``); the platform-specific cases (raw sockets, header
names, each platform's wrong shapes) are in tests/edge/test_hostile.py and test_fuzz.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import urlencode

import pytest
from structlog.testing import capture_logs

from tests.support.conformance import Harness
from tests.support.conformance.base import Webhook

# Signed or encrypted as the platform does, none of them its format (JSON or XML); then each
# platform's own message with a field of the wrong type (``Harness.misshapen``).
NOT_THE_FORMAT = [
    b"{not json",
    b"<xml><a>",
    b"[1, 2]",
    b'"a string"',
    b"\xff\xfe\x00",
]


async def post(platform: Harness, hook: Webhook) -> int:
    url = f"http://127.0.0.1:{platform.gateway.port}{hook.path}"
    http = platform.gateway.client.http
    async with http.post(url, params=hook.query, headers=hook.headers, data=hook.body) as resp:
        await resp.read()
        return resp.status


async def past_the_bound(platform: Harness, hook: Webhook) -> int:
    """The status of ``hook`` announcing a body 8 times ``server.maxBodyBytes``, of which only
    the bound and 128 KiB are ever sent: an answer proves the rest was not waited for."""
    bound = platform.gateway.settings.server.max_body_bytes
    reader, writer = await asyncio.open_connection("127.0.0.1", platform.gateway.port)
    target = hook.path + (f"?{urlencode(hook.query)}" if hook.query else "")
    head = [f"POST {target} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {bound * 8}"]
    head += [f"{k}: {v}" for k, v in hook.headers.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())

    async def body() -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(bound // 65_536 + 2):
                writer.write(b"a" * 65_536)
                await writer.drain()

    sending = asyncio.create_task(body())
    try:
        status_line = await asyncio.wait_for(reader.readline(), 30)
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await sending
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    return int(status_line.split()[1])


def one_refusal(logs: list[dict[str, Any]], what: str) -> None:
    """Since the last call: one line saying the request was refused, nothing noisy."""
    lines = [e for e in logs if str(e["event"]).endswith("request refused")]
    assert len(lines) == 1, (what, lines)
    noisy = [e for e in logs if e.get("exc_info") or e["log_level"] in ("error", "critical")]
    assert noisy == [], (what, noisy)
    logs.clear()


async def test_hostile_requests_are_refused_and_the_gateway_still_answers(
    platform: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    if platform.webhook(b"{}") is None:
        pytest.skip(f"{platform.id} ({platform.mode}) takes no webhook: a long connection")
    await platform.start()
    forged = platform.forged()
    assert {"wrong signature", "unsigned"} <= set(forged)
    with capture_logs() as logs:
        for what, (hook, status) in forged.items():
            assert await post(platform, hook) == status, what
            one_refusal(logs, what)
        misshapen = platform.misshapen()
        assert misshapen, "a platform taking webhooks names payloads of the wrong shape"
        for payload in NOT_THE_FORMAT + misshapen:
            hook = platform.webhook(payload)
            assert hook is not None
            status = await post(platform, hook)
            assert 400 <= status < 500, (payload, status)
            one_refusal(logs, repr(payload))
        hook = platform.webhook(b"{}")
        assert hook is not None
        assert await past_the_bound(platform, hook) == 413
        one_refusal(logs, "past the bound")
        await platform.idle()
    assert platform.shown() == [], "a hostile request reached a chat"
    assert platform.refused() == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], [r.getMessage() for r in errors]

    sent = await platform.send("still here")
    answer = await platform.answer(sent)
    assert "still here" in answer.text
