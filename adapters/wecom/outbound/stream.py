"""AI bot callback mode (docs/wecom.md, "AI bot"): replies are ``stream`` messages that WeCom polls.

The user's message is answered at once with a stream id; WeCom then POSTs refresh callbacks for
that id and each is answered with the current full content, kept in ``context.records`` so any
replica can answer. WeCom stops polling 6 minutes after the message: a turn still running near
that point ends its stream with a note, and its answer is sent through ``response_url`` when done.

Long answers: a stream holds 20,480 bytes, and the one other way this mode has to send is the
message's ``response_url``, usable ONCE within an hour (doc 101138 "主动回复消息": "每个
response_url 用户可以调用接口一次"; refresh callbacks carry none, doc 100719). So an answer in
n parts shows part (1/n) in the stream and part (2/n) through ``response_url``; parts (3/n) on
wait for the user: a message ``more`` (or ``继续``) in that chat is answered, without a turn,
with the next part as its own stream, each telling how to get the one after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

import adapters.wecom.cards as cards
from adapters.wecom.api import LinkDownloads
from adapters.wecom.outbound.media import msg_items
from gateway.edge.downloads import FetchedFile
from gateway.edge.stores import RecordStore
from gateway.envelope import Attachment, Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.wecom")

NS = "wecom"
STREAM_TTL_MS = 15 * 60_000  # past WeCom's 6-minute polling window
PENDING = "⏳"
MORE_TTL_MS = 3_600_000  # the parts left wait as long as a response_url would
MORE_WORDS = frozenset({"more", "/more", "继续", "更多"})
CUT_NOTE = "\n\n_(This is taking longer; the answer will follow in a new message.)_"


def _extra(env: Envelope, name: str) -> str | None:
    extra = env.reply_to.model_extra if env.reply_to is not None else None
    value = (extra or {}).get(name)
    return str(value) if value else None


class StreamOutbound:
    """The outbound strategy of ``connectionMode: aibot`` (see ``outbound.Outbound``)."""

    def __init__(
        self,
        *,
        integration_id: str,
        records: RecordStore,
        window_s: float,
        bot_key: bytes,
        api_base: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.integration_id = integration_id
        self.records = records
        self.window_ms = int(window_s * 1000)
        self.clock = clock
        self.downloads = LinkDownloads(
            integration_id=integration_id, bot_key=bot_key, api_base=api_base
        )
        self._http: aiohttp.ClientSession | None = None

    def _key(self, *parts: str) -> str:
        return ":".join((self.integration_id, *parts))

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        await self.downloads.close()

    def readiness(self) -> dict[str, Any]:
        return {"ready": True, "mode": "aibot"}

    async def fetch(self, attachment: Attachment, max_bytes: int) -> FetchedFile | None:
        return await self.downloads.fetch(attachment, max_bytes)

    # --- inbound side ------------------------------------------------------------------------
    async def opened(self, stream_id: str) -> None:
        """The message's stream starts now (a retried message keeps its first start)."""
        now = str(int(self.clock() * 1000))
        await self.records.put_new(NS, self._key("start", stream_id), now, ttl_ms=STREAM_TTL_MS)

    async def finish_with(self, stream_id: str, text: str, *, overwrite: bool) -> None:
        value = json.dumps({"content": text, "finish": True})
        if overwrite:
            await self.records.put(NS, self._key("stream", stream_id), value, ttl_ms=STREAM_TTL_MS)
        else:
            await self.records.put_new(
                NS, self._key("stream", stream_id), value, ttl_ms=STREAM_TTL_MS
            )

    async def refresh(self, stream_id: str) -> dict[str, Any]:
        """The answer to a refresh callback: the current full content, or the cut-off note."""
        raw = await self.records.get(NS, self._key("stream", stream_id))
        state = json.loads(raw) if raw else {"content": "", "finish": False}
        if state["finish"]:
            done = {"id": stream_id, "finish": True, "content": state["content"]}
            if state.get("msg_item"):  # the answer's images, in the last frame only
                done["msg_item"] = state["msg_item"]
            return done
        cut = await self.records.get(NS, self._key("cut", stream_id))
        if cut is None:
            started = await self.records.get(NS, self._key("start", stream_id))
            age_ms = self.clock() * 1000 - int(started) if started else 0
            if age_ms < self.window_ms:
                return {"id": stream_id, "finish": False, "content": state["content"] or PENDING}
            await self.records.put_new(
                NS, self._key("cut", stream_id), str(state["content"]), ttl_ms=STREAM_TTL_MS
            )
            cut = await self.records.get(NS, self._key("cut", stream_id)) or ""
            log.info("stream window ending; the answer follows as a new message", stream=stream_id)
        return {
            "id": stream_id,
            "finish": True,
            "content": cards.clip_bytes(cut + CUT_NOTE, cards.STREAM_BYTES),
        }

    # --- the renderer's side ------------------------------------------------------------------
    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await self.show(reply_to, progress)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.show(reply_to, progress)

    async def show(self, reply_to: Envelope, progress: Progress) -> str:
        stream_id = _extra(reply_to, "stream_id") or ""
        if not stream_id:  # nothing WeCom polls for (a scheduled task): no way to deliver
            log.info("no stream to answer on; turn not shown", event_id=reply_to.event_id)
            return ""
        parts = cards.callback_parts(cards.stream_text(progress))
        state: dict[str, Any] = {"content": (parts or [""])[0], "finish": progress.final}
        if progress.final and (items := msg_items(progress)):
            state["msg_item"] = items  # 004-被动回复消息.md l.136-144: with finish=true only
        value = json.dumps(state)
        await self.records.put(NS, self._key("stream", stream_id), value, ttl_ms=STREAM_TTL_MS)
        if progress.final:
            if await self.records.get(NS, self._key("cut", stream_id)) is not None:
                # The stream closed with a note: the whole answer follows.
                await self._send_rest(
                    reply_to, stream_id, cards.callback_parts(cards.final_text(progress)), 1
                )
            elif len(parts) > 1:
                await self._send_rest(reply_to, stream_id, parts[1:], 2)
        return stream_id

    async def _send_rest(
        self, reply_to: Envelope, stream_id: str, parts: list[str], first: int
    ) -> None:
        """Part ``first`` of the answer through ``response_url`` (once); the parts after it
        wait for a ``more`` in the chat."""
        url = _extra(reply_to, "response_url")
        if not url or not parts:
            return
        if not await self.records.put_new(
            NS, self._key("rest", stream_id), "1", ttl_ms=STREAM_TTL_MS
        ):
            return
        head, later = parts[0], parts[1:]
        total = first + len(parts) - 1
        if later:
            left = {"batch": stream_id, "first": first + 1, "total": total, "parts": later}
            chat = self._key("more", reply_to.chat.id)
            await self.records.put(NS, chat, json.dumps(left), ttl_ms=MORE_TTL_MS)
            head += cards.more_note(first + 1, total)
        body = {"msgtype": "markdown", "markdown": {"content": head}}
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._http.post(url, json=body) as resp:
                data = await resp.json(content_type=None)
            if resp.status != 200 or data.get("errcode", 0) != 0:
                raise RuntimeError(f"response_url refused: {resp.status} {data.get('errcode')}")
        except BaseException:
            await self.records.delete(NS, self._key("rest", stream_id))
            raise
        log.info("answer part sent through response_url", stream=stream_id, part=first)

    async def more(
        self, chat_id: str, msg_id: str, stream_id: str, text: str
    ) -> dict[str, Any] | None:
        """The answer to a ``more`` message: the next part of the chat's last long answer as
        the message's own stream (finished), claimed once across replicas (and the same part
        again for WeCom's retry of the same message); None when nothing waits (the message then
        goes to the expert like any other)."""
        if text.strip().lower() not in MORE_WORDS:
            return None
        again = await self.records.get(NS, self._key("moreof", msg_id))
        if again is not None:
            return {"id": stream_id, "finish": True, "content": again}
        raw = await self.records.get(NS, self._key("more", chat_id))
        if raw is None:
            return None
        left = json.loads(raw)
        parts, batch = list(left["parts"]), str(left["batch"])
        for i, part in enumerate(parts):
            if not await self.records.put_new(
                NS, self._key("taken", batch, str(i)), "1", ttl_ms=MORE_TTL_MS
            ):
                continue
            if i + 1 < len(parts):
                part += cards.more_note(int(left["first"]) + i + 1, int(left["total"]))
            else:
                await self.records.delete(NS, self._key("more", chat_id))
            await self.records.put(NS, self._key("moreof", msg_id), part, ttl_ms=MORE_TTL_MS)
            await self.finish_with(stream_id, part, overwrite=True)
            log.info("answer part sent on 'more'", stream=stream_id, part=int(left["first"]) + i)
            return {"id": stream_id, "finish": True, "content": part}
        await self.records.delete(NS, self._key("more", chat_id))
        return None

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        stream_id = _extra(reply_to, "stream_id")
        if stream_id is None:
            log.info("no stream to answer on; text dropped", event_id=reply_to.event_id)
            return
        await self.finish_with(stream_id, text, overwrite=True)
