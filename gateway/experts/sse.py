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


async def read_sse(
    response: aiohttp.ClientResponse, *, comments: bool = False
) -> AsyncIterator[SseEvent]:
    """Yield each event (``event:``/``data:``/``id:`` fields, blank-line terminated); with
    ``comments``, also each comment line (``: keep-alive``) as an event named ``:``, so a
    caller can count a server's heartbeats as activity."""
    event, last_id = "message", None
    data: list[str] = []
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\r\n")
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
