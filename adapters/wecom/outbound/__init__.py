"""How a WeCom integration answers: one :class:`Outbound` strategy per connection mode, chosen
once when the adapter is made; and the first of them, a self-built app's replies (§3.3).

WeCom app messages cannot be edited: the only change a sent card allows is one
``update_template_card`` per ``response_code`` (single use, 72 h; each click hands out a new
one). So the turn's card is sent once with a Stop button, updated once more when the turn waits
for a confirmation and once when it ends, and the answer then arrives as markdown messages.
Intermediate progress is not shown live on this platform. The answer's images (JPG, PNG) and
files then follow as ``image`` / ``file`` messages of temporary media (``media``): app
markdown shows no images (limits.md, WeCom "images").
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

import adapters.wecom.cards as cards
from adapters.wecom.api import WeComApi, WeComApiError
from adapters.wecom.outbound.media import FILE_BYTES, IMAGE_BYTES, IMAGE_TYPES, app_media
from gateway.edge.chat_actions import Unsupported
from gateway.edge.downloads import FetchedFile
from gateway.edge.stores import RecordStore
from gateway.envelope import Attachment, Envelope
from gateway.progress import Media, Progress

log = structlog.get_logger("adapters.wecom")

NS = "wecom"
TTL_MS = 72 * 3_600_000  # a response_code's lifetime
CLOSE_WITHIN_S = 3.0  # a question card's buttons closed within the click's callback, or not


class Outbound(Protocol):
    """How one WeCom integration answers, chosen once by its connection mode: ``app`` (this
    module's :class:`AppOutbound`), ``aibot`` (``aibot.StreamOutbound``, replies WeCom polls for)
    or ``aibot_ws`` (``connection.AibotConnection``, frames on the long connection)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def readiness(self) -> dict[str, Any]: ...

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str: ...

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None: ...

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None: ...

    async def fetch(self, attachment: Attachment, max_bytes: int) -> FetchedFile | None:
        """An attachment's content (media by MediaId, or an AI bot's encrypted link)."""
        ...


class AppOutbound:
    def __init__(
        self, *, integration_id: str, agent_id: int, api: WeComApi, records: RecordStore
    ) -> None:
        self.integration_id = integration_id
        self.agent_id = agent_id
        self.api = api
        self.records = records

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        await self.api.close()

    def readiness(self) -> dict[str, Any]:
        return {"ready": True, "mode": "app"}

    async def fetch(self, attachment: Attachment, max_bytes: int) -> FetchedFile | None:
        got = await self.api.media(attachment.key, max_bytes=max_bytes)
        return FetchedFile(data=got[0], mime=got[1], name=attachment.name) if got else None

    def _key(self, *parts: str) -> str:
        return ":".join((self.integration_id, *parts))

    async def _send(self, touser: str, msg: Mapping[str, object]) -> dict[str, object]:
        body = {"touser": touser, "agentid": self.agent_id, **msg}
        return await self.api.call("message/send", body)

    async def _once(self, guard: str, touser: str, msg: Mapping[str, object]) -> dict[str, object]:
        """Send at most once per ``guard`` across replicas; a failed send frees the guard."""
        if not await self.records.put_new(NS, self._key("sent", guard), "1", ttl_ms=TTL_MS):
            return {}
        try:
            return await self._send(touser, msg)
        except BaseException:
            await self.records.delete(NS, self._key("sent", guard))
            raise

    async def remember_response_code(self, task_id: str, response_code: str) -> None:
        """The newest unused response_code of a card (from send, or from a click)."""
        await self.records.put(NS, self._key("rc", task_id), response_code, ttl_ms=TTL_MS)

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        task_id = cards.task_id_for(idempotency_key)
        msg = {"msgtype": "template_card", "template_card": cards.template_card(progress, task_id)}
        data = await self._once(f"card:{task_id}", reply_to.chat.id, msg)
        if data.get("response_code"):
            await self.remember_response_code(task_id, str(data["response_code"]))
        log.info("card sent", task_id=task_id, turn_id=progress.turn_id)
        return task_id

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if not (progress.final or progress.status == "waiting"):
            return  # no live edits on WeCom app messages (module docstring)
        stage = f"{handle}:{progress.status}"
        if await self.records.get(NS, self._key("updated", stage)) is None:
            await self._update_template_card(reply_to, handle, progress)
            await self.records.put(NS, self._key("updated", stage), "1", ttl_ms=TTL_MS)
        if progress.final:
            text = cards.final_text(progress)
            for i, part in enumerate(cards.split_bytes(text)):
                await self._once(
                    f"answer:{handle}:{i}",
                    reply_to.chat.id,
                    {"msgtype": "markdown", "markdown": {"content": part}},
                )
            for i, (kind, item) in enumerate(app_media(progress)):
                await self._media(f"media:{handle}:{i}", reply_to.chat.id, kind, item)
            log.info("turn answer sent", task_id=handle, status=progress.status)

    async def _media(self, guard: str, touser: str, kind: str, item: Media) -> None:
        """One image or file message of the answer, uploaded as temporary media first (once
        per ``guard`` across replicas); an upload or send WeCom refuses is logged and the
        answer keeps its link."""
        if not await self.records.put_new(NS, self._key("sent", guard), "1", ttl_ms=TTL_MS):
            return
        try:
            media_id = await self.api.upload(kind, item.data, item.name, item.mime)
            await self._send(touser, {"msgtype": kind, kind: {"media_id": media_id}})
        except WeComApiError as exc:
            if exc.rate_limited or exc.errcode < 0:
                await self.records.delete(NS, self._key("sent", guard))
                raise  # worth the renderer's retry
            log.warning("answer media not sent", kind=kind, errcode=exc.errcode)
        except BaseException:
            await self.records.delete(NS, self._key("sent", guard))
            raise

    async def _update_template_card(
        self, reply_to: Envelope, task_id: str, progress: Progress
    ) -> None:
        rc = await self.records.get(NS, self._key("rc", task_id))
        if rc is None:
            log.info("card not updated: no unused response_code", task_id=task_id)
            return
        body = {
            "userids": [reply_to.chat.id],
            "agentid": self.agent_id,
            "response_code": rc,
            **cards.card_update(progress, task_id),
        }
        try:
            await self.api.call("message/update_template_card", body)
        except WeComApiError as exc:
            if exc.rate_limited or exc.errcode < 0:
                raise  # worth the renderer's retry
            # A spent or expired code will not work on retry; the answer still goes out.
            log.warning("card update refused", task_id=task_id, errcode=exc.errcode)
        await self.records.delete(NS, self._key("rc", task_id))

    async def close_buttons(self, task_id: str, user: str, label: str) -> None:
        """A card's buttons replaced by one grey ``label`` (update_template_card's
        ``button.replace_name``, doc 94888), with the newest response_code (the click's); the
        card stays as it was when WeCom refuses."""
        rc = await self.records.get(NS, self._key("rc", task_id))
        if rc is None:
            return
        body = {
            "userids": [user],
            "agentid": self.agent_id,
            "response_code": rc,
            "button": {"replace_name": label},
        }
        await self.records.delete(NS, self._key("rc", task_id))  # single use, whatever comes
        try:
            async with asyncio.timeout(CLOSE_WITHIN_S):  # inside the click's 5 s callback
                await self.api.call("message/update_template_card", body)
        except WeComApiError as exc:
            log.warning("card buttons not closed", task_id=task_id, errcode=exc.errcode)
        except TimeoutError:
            log.warning("card buttons not closed", task_id=task_id, errcode="timeout")

    # --- an agent's chat actions (MCP): as the answer's text and media go, errors raised ---------
    async def post_markdown(self, touser: str, text: str, *, key: str) -> None:
        for i, part in enumerate(cards.split_bytes(text)):
            msg = {"msgtype": "markdown", "markdown": {"content": part}}
            await self._once(f"mcp:{key}:{i}", touser, msg)

    async def post_media(self, touser: str, item: Media, *, key: str) -> None:
        image = item.kind == "image" and item.mime in IMAGE_TYPES and len(item.data) <= IMAGE_BYTES
        if not image and len(item.data) > FILE_BYTES:
            raise Unsupported(f"WeCom sends files of at most {FILE_BYTES} bytes")
        kind = "image" if image else "file"
        media_id = await self.api.upload(kind, item.data, item.name, item.mime)
        await self._once(f"mcp:{key}", touser, {"msgtype": kind, kind: {"media_id": media_id}})

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        for i, part in enumerate(cards.split_bytes(text)):
            await self._once(
                f"text:{idempotency_key}:{i}",
                reply_to.chat.id,
                {"msgtype": "text", "text": {"content": part}},
            )
