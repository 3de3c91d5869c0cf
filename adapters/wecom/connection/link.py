"""Framing rules of the AI-bot long connection, as the official SDK keeps them
(``WecomTeam/aibot-node-sdk`` ``src/ws.ts``, docs/wecom.md "AI bot"):

- every command is answered by an ack frame without ``cmd``: ``{headers: {req_id}, errcode,
  errmsg}``; the SDK tells subscribe and ping acks apart by the req_id's prefix
  (``<cmd>_<ms>_<random>``, ``src/utils.ts`` ``generateReqId``);
- replies that share a req_id go one at a time: the next is written only after the previous
  one's ack, or after 5 s without one (``sendReply`` / ``processReplyQueue``,
  ``replyAckTimeout``);
- ``disconnected_event`` arrives as an ``aibot_event_callback`` whose ``body.event.eventtype``
  says so (``handleFrame``), not as a cmd of its own.

Stream frames carry the full content each time, so an unsent stream update is replaced by a
newer one for the same stream instead of queueing behind it (the SDK's
``replyStreamNonBlocking`` skips such frames for the same reason).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gateway.errors import GatewayError

log = structlog.get_logger("adapters.wecom")

SUBSCRIBE = "aibot_subscribe"
PING = "ping"
ACK_TIMEOUT_S = 5.0  # ws.ts replyAckTimeout
MISSED_PINGS = 2  # ws.ts maxMissedPong: two pings without an ack and the connection is dead
DISCONNECTED = "disconnected_event"
# Refusals named in WeCom's own integration (WecomTeam/wecom-openclaw-plugin
# src/message-sender.ts): a reply on an event's req_id, and a stream past its 6 minutes.
INVALID_REQ_ID = 846605
STREAM_EXPIRED = 846608


def new_req_id(prefix: str) -> str:
    """``<prefix>_<ms>_<8 hex>``, the SDK's shape (``src/utils.ts``)."""
    return f"{prefix}_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


def req_id_of(frame: dict[str, Any]) -> str:
    return str((frame.get("headers") or {}).get("req_id") or "")


def is_disconnected(frame: dict[str, Any]) -> bool:
    """WeCom gave the bot's connection to another client (``ws.ts`` ``handleFrame``)."""
    if frame.get("cmd") != "aibot_event_callback":
        return False
    body = frame.get("body")
    event = body.get("event") if isinstance(body, dict) else None
    return isinstance(event, dict) and event.get("eventtype") == DISCONNECTED


class WsRefused(GatewayError, RuntimeError):
    """WeCom acked a frame with a non-zero errcode."""

    def __init__(self, errcode: int, errmsg: str) -> None:
        super().__init__(f"WeCom refused the frame: {errcode} {errmsg}")
        self.errcode = errcode
        self.errmsg = errmsg


Write = Callable[[str], Awaitable[None]]


@dataclass
class _Item:
    frame: dict[str, Any]
    waiters: list[asyncio.Future[dict[str, Any] | None]] = field(default_factory=list)

    def settle(self, result: dict[str, Any] | None, exc: BaseException | None = None) -> None:
        for waiter in self.waiters:
            if waiter.done():
                continue
            if exc is None:
                waiter.set_result(result)
            else:
                waiter.set_exception(exc)


def _stream(frame: dict[str, Any]) -> dict[str, Any] | None:
    body = frame.get("body") or {}
    if frame.get("cmd") != "aibot_respond_msg" or body.get("msgtype") != "stream":
        return None
    stream = body.get("stream")
    return stream if isinstance(stream, dict) else None


def _replaces(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """``new`` makes the unsent ``old`` pointless: a later snapshot of the same open stream."""
    a, b = _stream(new), _stream(old)
    return a is not None and b is not None and a.get("id") == b.get("id") and not b.get("finish")


class ReplyQueues:
    """One queue per req_id on one socket. ``submit`` returns a future that resolves with the
    ack (or None when the frame was handed back unsent by :meth:`close`) and fails with
    :class:`WsRefused`, :class:`TimeoutError` or :class:`ConnectionError`."""

    def __init__(self, write: Write, *, timeout_s: float = ACK_TIMEOUT_S) -> None:
        self._write = write
        self.timeout_s = timeout_s
        self._queues: dict[str, deque[_Item]] = {}
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._closed: BaseException | None = None

    def submit(self, frame: dict[str, Any]) -> asyncio.Future[dict[str, Any] | None]:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        if self._closed is not None:
            waiter.set_exception(ConnectionError("long connection closed"))
            return waiter
        req_id = req_id_of(frame)
        queue = self._queues.setdefault(req_id, deque())
        if queue and _replaces(frame, queue[-1].frame):
            queue[-1].frame = frame
            queue[-1].waiters.append(waiter)
        else:
            queue.append(_Item(frame, [waiter]))
        if req_id not in self._workers:
            self._workers[req_id] = loop.create_task(
                self._drain(req_id), name=f"wecom-ack:{req_id}"
            )
        return waiter

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def on_ack(self, frame: dict[str, Any]) -> bool:
        """Hand an ack frame to the reply waiting for it; False when none is."""
        ack = self._acks.get(req_id_of(frame))
        if ack is None or ack.done():
            return False
        errcode = int(frame.get("errcode") or 0)
        if errcode:
            ack.set_exception(WsRefused(errcode, str(frame.get("errmsg") or "")))
        else:
            ack.set_result(frame)
        return True

    def close(self, reason: str) -> list[dict[str, Any]]:
        """The socket is gone: replies waiting for an ack fail; the unsent ones are returned
        (their callers get None) for whoever holds the connection next."""
        self._closed = ConnectionError(reason)
        for ack in self._acks.values():
            if not ack.done():
                ack.set_exception(ConnectionError(reason))
        unsent: list[dict[str, Any]] = []
        for queue in self._queues.values():
            while queue:
                item = queue.popleft()
                item.settle(None)
                unsent.append(item.frame)
        return unsent

    async def wait_closed(self) -> None:
        if self._workers:
            await asyncio.wait(list(self._workers.values()), timeout=self.timeout_s + 1)

    async def _drain(self, req_id: str) -> None:
        queue = self._queues[req_id]
        loop = asyncio.get_running_loop()
        try:
            while queue:
                item = queue.popleft()
                ack: asyncio.Future[dict[str, Any]] = loop.create_future()
                self._acks[req_id] = ack
                try:
                    await self._write(json.dumps(item.frame, ensure_ascii=False))
                    async with asyncio.timeout(self.timeout_s):
                        item.settle(await ack)
                except TimeoutError:
                    # The SDK gives up on the ack after 5 s and moves on to the next frame.
                    log.warning("no ack for a reply", req_id=req_id, cmd=item.frame.get("cmd"))
                    item.settle(None, TimeoutError(f"no ack within {self.timeout_s} s"))
                except Exception as exc:  # refused, or the socket went away
                    item.settle(None, exc)
                finally:
                    del self._acks[req_id]
                    if not ack.done():
                        ack.cancel()
                    elif not ack.cancelled():
                        ack.exception()  # retrieved, so asyncio does not warn about it
        finally:
            del self._workers[req_id]
            if not queue:
                self._queues.pop(req_id, None)
