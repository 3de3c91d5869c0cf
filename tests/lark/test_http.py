"""Lark webhooks over raw sockets, as aiohttp serves them (the HTTP front that once answered the
plainest of them is gone, issue 25): keep-alive and pipelining, bodies in pieces, chunked and
other framings, refusals of hostile bytes, size limits, half requests and shutdown. A real
gateway, real Redis. What held the front to aiohttp's behaviour, kept as aiohttp's own."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.support.helpers import RawConnection as Conn
from tests.support.helpers import raw_post
from tests.support.lark import INTEGRATION, LarkHarness, final_card, message_event, sealed
from tests.support.waits import eventually

PATH = f"/api/lark/webhook/{INTEGRATION}"


def request(body: bytes, headers: dict[str, str], *, path: str = PATH, **framing: Any) -> bytes:
    return raw_post(path, body, headers, **framing)


def event(fake: FakeLark, message_id: str) -> tuple[bytes, dict[str, str]]:
    """A user's message as Lark delivers it (known to the fake API, so it can be replied to)."""
    payload = message_event("hello", message_id=message_id, chat_id=f"oc_{message_id}")
    fake.receive(payload)
    return sealed(payload)


async def test_a_plain_signed_event_is_answered_and_turned_into_a_card(
    lark: LarkHarness, fake: FakeLark
) -> None:
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(*event(fake, "om_http1")))
    status, headers, body = await conn.answer()
    assert (status, json.loads(body)) == (200, {})
    assert headers["content-type"] == "application/json" and "date" in headers
    await eventually(final_card(fake, "om_http1"))
    # The same event again on the same connection: a duplicate, still 200.
    conn.writer.write(request(*event(fake, "om_http1")))
    status, headers, body = await conn.answer()
    assert (status, body) == (200, b"{}")
    await lark.idle()
    assert len(fake.of("reply")) == 1
    conn.close()


@pytest.mark.parametrize(
    "variant",
    [
        {"chunked": True},
        {"extra": "Expect: 100-continue\r\n"},
        {"extra": "X-Note: caf\u00e9\r\n"},  # a non-ASCII header value
        {"path": PATH + "?from=lark"},
        {"extra": "Connection: upgrade\r\n"},
    ],
    ids=["chunked", "expect", "non-ascii-header", "query", "connection-upgrade"],
)
async def test_other_framings_are_answered_the_same_way(
    lark: LarkHarness, fake: FakeLark, variant: dict[str, Any]
) -> None:
    message_id = f"om_http_{abs(hash(json.dumps(variant))) % 10**8}"
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(*event(fake, message_id), **variant))
    if "extra" in variant and "Expect" in variant["extra"]:
        assert (await conn.reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
    status, _headers, body = await conn.answer()
    assert (status, json.loads(body)) == (200, {})
    await eventually(final_card(fake, message_id))
    conn.close()


async def test_refusals_are_the_routes_own_whatever_the_framing(
    lark: LarkHarness, fake: FakeLark
) -> None:
    body, headers = event(fake, "om_http_bad")
    forged = dict(headers, **{"X-Lark-Signature": "0" * 64})
    answers = []
    for chunked in (False, True):
        conn = await Conn.open(lark.gw.port)
        conn.writer.write(request(body, forged, chunked=chunked))
        answers.append(await conn.answer())
        conn.close()
    (plain_status, _, plain_body), (status, _, chunked_body) = answers
    assert (plain_status, status) == (401, 401)
    assert json.loads(plain_body) == json.loads(chunked_body) == {"error": "bad signature"}
    # An integration nobody configured: the route's 404.
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(body, headers, path="/api/lark/webhook/nobody"))
    status, _got, text = await conn.answer()
    assert (status, json.loads(text)) == (404, {"error": "unknown integration"})
    conn.close()


async def test_pipelined_requests_are_answered_in_order(lark: LarkHarness, fake: FakeLark) -> None:
    conn = await Conn.open(lark.gw.port)
    first, second = request(*event(fake, "om_pipe1")), request(*event(fake, "om_pipe2"))
    health = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
    third = request(*event(fake, "om_pipe3"))
    conn.writer.write(first + second + health + third)
    answers = [await conn.answer() for _ in range(4)]
    assert [a[0] for a in answers] == [200, 200, 200, 200]
    assert json.loads(answers[2][2])["status"] == "ok"
    for message_id in ("om_pipe1", "om_pipe2", "om_pipe3"):
        await eventually(final_card(fake, message_id))
    conn.close()


async def test_a_body_sent_in_pieces_and_connection_close(
    lark: LarkHarness, fake: FakeLark
) -> None:
    raw = request(*event(fake, "om_slow"), extra="Connection: close\r\n")
    conn = await Conn.open(lark.gw.port)
    for i in range(0, len(raw), 97):
        conn.writer.write(raw[i : i + 97])
        await conn.writer.drain()
        await asyncio.sleep(0.005)
    status, headers, _ = await conn.answer()
    assert (status, headers.get("connection")) == (200, "close")
    assert await conn.closed()
    conn.close()
    await eventually(final_card(fake, "om_slow"))


async def test_hostile_bytes_get_aiohttps_refusals_never_a_5xx(
    lark: LarkHarness, fake: FakeLark
) -> None:
    body, headers = event(fake, "om_http_hostile")
    cases = [
        b"POST " + PATH.encode() + b" HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS hello
        request(body, headers).replace(b"Content-Length: ", b"Content-Length: +"),
        b"POST " + PATH.encode() + b" HTTP/1.1\r\n" + b"X-Big: " + b"a" * 70000 + b"\r\n\r\n",
    ]
    for raw in cases:
        conn = await Conn.open(lark.gw.port)
        conn.writer.write(raw)
        status, _got, _ = await conn.answer()
        assert 400 <= status < 500, raw[:40]
        conn.close()


async def test_a_body_over_the_limit_gets_aiohttps_413(lark: LarkHarness, fake: FakeLark) -> None:
    _body, headers = event(fake, "om_http_big")
    big = b'{"encrypt": "' + b"A" * (2 * 1024 * 1024) + b'"}'
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(big, headers))
    status, _got, _ = await conn.answer()
    assert status == 413
    conn.close()


async def test_half_a_request_then_eof_is_dropped_and_stop_closes_idle_connections(
    lark: LarkHarness, fake: FakeLark
) -> None:
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(*event(fake, "om_half"))[:120])
    conn.writer.write_eof()
    assert await conn.closed()
    conn.close()
    idle = await Conn.open(lark.gw.port)
    idle.writer.write(request(*event(fake, "om_idle")))
    assert (await idle.answer())[0] == 200  # a keep-alive connection, now idle
    await lark.gw.stop()
    assert await idle.closed()
    idle.close()


async def test_header_values_are_trimmed_as_aiohttp_trims_them(
    lark: LarkHarness, fake: FakeLark
) -> None:
    body, headers = event(fake, "om_http_ws")
    padded = {k: f" \t{v}\t " for k, v in headers.items()}  # OWS around every value
    conn = await Conn.open(lark.gw.port)
    conn.writer.write(request(body, padded))
    status, _got, text = await conn.answer()
    assert (status, json.loads(text)) == (200, {})
    await eventually(final_card(fake, "om_http_ws"))
    conn.close()
