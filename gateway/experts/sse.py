"""A small server-sent-events reader for aiohttp responses (XpertAI runs, OpenAI streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str
    id: str | None


COMMENT = ":"  # the ``event`` of a comment line, yielded when ``comments`` is asked for


MAX_EVENT_BYTES = 64 * 1024 * 1024  # an event larger than this is dropped, not the stream


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's lines, however long: a tool's whole output can be one ``data:`` line, longer
    than aiohttp's own line limit. A line over MAX_EVENT_BYTES comes out as a comment, so its
    event is dropped and the stream goes on."""
    pending = bytearray()
    oversized = False
    async for chunk in response.content.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if not oversized:
                pending += chunk[start:end]
            yield b": dropped, too large" if oversized else bytes(pending)
            pending.clear()
            oversized = False
            start = end + 1
        if not oversized:
            pending += chunk[start:]
            if len(pending) > MAX_EVENT_BYTES:
                pending.clear()
                oversized = True
    if pending and not oversized:
        yield bytes(pending)


async def read_sse(
    response: aiohttp.ClientResponse, *, comments: bool = False
) -> AsyncIterator[SseEvent]:
    """Yield each event (``event:``/``data:``/``id:`` fields, blank-line terminated); with
    ``comments``, also each comment line (``: keep-alive``) as an event named ``:``, so a
    caller can count a server's heartbeats as activity."""
    event, last_id = "message", None
    data: list[str] = []
    async for raw in _lines(response):
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not line:
            if data:
                yield SseEvent(event, "\n".join(data), last_id)
            event, data = "message", []
            continue
        if line.startswith(":"):
            if comments:
                yield SseEvent(COMMENT, line[1:].strip(), None)
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            last_id = value
    if data:
        yield SseEvent(event, "\n".join(data), last_id)
