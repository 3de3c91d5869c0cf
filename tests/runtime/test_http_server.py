"""The daemon's HTTP server holds no connection longer than its deadlines (issue 25): a request
head trickled in (slow loris) and an idle keep-alive connection are closed after
``server.keepAliveSeconds``, a body trickled in past ``server.bodyTimeoutSeconds`` is a 408 and
the connection closed. Raw sockets against a real gateway and real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.configs import base_config
from tests.support.helpers import Gateways, RawConnection, raw_post

KEEPALIVE, BODY = 1.0, 1.0
ADMIN_TOKEN = "http-server-admin-token"
SLACK = 2.0  # the loop's and the machine's delays on top of a deadline


def config(prefix: str) -> dict[str, Any]:
    cfg = base_config(prefix)
    cfg["server"] = {"keepAliveSeconds": KEEPALIVE, "bodyTimeoutSeconds": BODY}
    return cfg


async def trickle(conn: RawConnection, data: bytes, every: float) -> None:
    """A slow client: one byte of ``data`` every ``every`` seconds, until it is cut off."""
    with contextlib.suppress(ConnectionError):
        for i in range(len(data)):
            conn.writer.write(data[i : i + 1])
            await conn.writer.drain()
            await asyncio.sleep(every)


async def cut_off_after(conn: RawConnection, send: Callable[[], Any]) -> tuple[bytes, float]:
    """What the server wrote before it closed the connection, and when it closed it."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    sending = asyncio.ensure_future(send())
    received = b""
    try:
        async with asyncio.timeout(KEEPALIVE + BODY + 3 * SLACK):
            # to the end, or to a reset (the server closed; the slow client wrote on)
            with contextlib.suppress(ConnectionResetError):
                while chunk := await conn.reader.read(65536):
                    received += chunk
                    sending.cancel()  # answered: the client stops sending
    finally:
        sending.cancel()
        conn.close()
    return received, loop.time() - start


async def test_a_request_head_sent_byte_by_byte_is_cut_off_at_the_keepalive_deadline(
    gateways: Gateways, prefix: str
) -> None:
    gw = await gateways(config(prefix))
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    conn = await RawConnection.open(gw.port)
    received, took = await cut_off_after(conn, lambda: trickle(conn, head, 0.05))
    assert received == b"" and took < KEEPALIVE + SLACK, (received[:80], took)


@pytest.mark.parametrize("path", ["/console/api/messages", "/v1.0/schedules"])
async def test_a_body_sent_byte_by_byte_is_a_408_at_the_body_deadline(
    gateways: Gateways, prefix: str, path: str
) -> None:
    """The console reads its body with the core's bounded reader, the admin schedules route
    with aiohttp's ``text()``: either way a 408 at the deadline."""
    cfg = config(prefix)
    cfg["admin"] = {"token": ADMIN_TOKEN}
    gw = await gateways(cfg)
    message = {"integrationId": "console", "chatId": "dm-alice", "chatType": "p2p"}
    message |= {"senderId": "alice", "text": "slow " * 40, "mentionBot": False}
    body = json.dumps(message).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_TOKEN}"}
    request = raw_post(path, body, headers).replace(
        b"Host: gw", f"Host: 127.0.0.1:{gw.port}".encode()
    )
    head, _, rest = request.partition(b"\r\n\r\n")
    conn = await RawConnection.open(gw.port)
    conn.writer.write(head + b"\r\n\r\n" + rest[:10])

    received, took = await cut_off_after(conn, lambda: trickle(conn, rest[10:], 0.05))
    assert received.startswith(b"HTTP/1.1 408 "), received[:80]
    assert b"not received in time" in received
    assert took < BODY + SLACK, took
    assert await gw.client.messages() == []  # nothing stored of it


async def test_an_idle_keepalive_connection_is_closed(gateways: Gateways, prefix: str) -> None:
    gw = await gateways(config(prefix))
    conn = await RawConnection.open(gw.port)
    conn.writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, headers, _ = await conn.answer()
    assert status == 200 and headers.get("connection") != "close"
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with asyncio.timeout(KEEPALIVE + 3 * SLACK):
        assert await conn.reader.read() == b""
    took = loop.time() - start
    conn.close()
    assert KEEPALIVE - 0.2 < took < KEEPALIVE + SLACK, took


async def test_a_request_within_the_deadlines_is_served_on_a_kept_alive_connection(
    gateways: Gateways, prefix: str
) -> None:
    """The deadlines cut off slow clients, not ordinary ones: two requests on one connection."""
    gw = await gateways(config(prefix))
    conn = await RawConnection.open(gw.port)
    for _ in range(2):
        conn.writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await conn.answer())[0] == 200
    conn.close()
