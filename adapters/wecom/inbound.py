"""WeCom's hooks into the core's webhook skeleton (``gateway.edge.webhook``):
``GET,POST /api/wecom/webhook/{integrationId}``, URL verification and callbacks.

Every request is verified first (signature in constant time, timestamp window, decryption with
the 32-byte padding and the receive-id check); a failure is a short 4xx and nothing is stored.
The signature covers the body's ``Encrypt`` field, so the outer body is parsed (bounded) first.
What a callback holds depends on the connection mode, chosen once per integration: encrypted XML
for an app (:class:`AppCallbacks`), encrypted JSON with stream replies for an AI bot
(:class:`AibotCallbacks`), each a ``gateway.edge.inbound.Inbound``; an AI bot's long connection
reads its frames with the same ``envelope`` (:class:`AibotInbound`). WeCom is answered only once
intake returned (5 s rule, docs/wecom.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
import xmltodict  # type: ignore[import-untyped]
from aiohttp import web

import adapters.wecom.cards as cards
from adapters.wecom.crypto import CryptoError, WeComCrypto
from adapters.wecom.events import (
    LEADING_MENTION,
    BadPayload,
    aibot_envelope,
    aibot_message,
    app_envelope,
    event_type,
    parse_app_xml,
    stream_id_for,
)
from adapters.wecom.outbound import AppOutbound
from adapters.wecom.outbound.stream import StreamOutbound
from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, ascii_text, json_object, utf8, xml_text
from gateway.edge.inbound import Inbound
from gateway.edge.ingest import IngestOutcome
from gateway.edge.webhook import EventWebhook, Webhook
from gateway.envelope import Envelope
from gateway.errors import Refused
from gateway.progress import ACTION_ANSWER

log = structlog.get_logger("adapters.wecom")

Answer = Envelope | web.StreamResponse | None
Reply = dict[str, Any] | None  # an AI bot's reply, encrypted by the route; None: an empty 200
R = TypeVar("R")
# A click on an option the gateway took as the clicker's answer (gateway/intake/buttons.py).
ANSWERED = ("queued", "busy", "spooled")


@dataclass(frozen=True, slots=True)
class Callback:
    """A verified, decrypted callback, or a long-connection frame's body, and what its answer
    reuses: the nonce of an encrypted answer, the req_id of a frame's."""

    data: dict[str, Any]
    nonce: str = ""
    req_id: str | None = None


def _query(query: Mapping[str, str], *names: str) -> list[str]:
    values = [ascii_text(query.get(n), n, status=400) for n in names]
    if not all(values):
        raise Refused(400, f"missing query parameters: {', '.join(names)}")
    return values


def _unreadable(exc: BadPayload) -> Refused:
    return Refused(400, str(exc), public="unreadable message")


class Opener:
    """Verify and decrypt for one integration (its crypto, signature window and clock)."""

    def __init__(self, *, crypto: WeComCrypto, window_s: int, clock: Callable[[], float]) -> None:
        self.crypto = crypto
        self.window_s = window_s
        self.clock = clock

    def open(self, sig: str, ts: str, nonce: str, encrypted: str) -> str:
        try:
            self.crypto.verify(sig, ts, nonce, encrypted, window_s=self.window_s, now=self.clock())
        except CryptoError as exc:
            raise Refused(401, str(exc), public="signature check failed") from None
        try:
            return self.crypto.decrypt(encrypted)
        except CryptoError as exc:
            raise Refused(400, str(exc), public="cannot decrypt") from None


class Callbacks(Inbound[Callback, Reply]):
    """One connection mode's callbacks: its Inbound (``verify`` reads the signature from the
    query), and what it answers without intake (``early``: a stream poll, a welcome)."""

    opener: Opener

    async def early(self, callback: Callback) -> Reply:
        return None


class AppCallbacks(Callbacks):
    """A self-built app: ``<xml><Encrypt>…</Encrypt></xml>`` holding callback XML
    (docs/wecom.md)."""

    def __init__(self, *, opener: Opener, outbound: AppOutbound, integration_id: str) -> None:
        self.opener = opener
        self.outbound = outbound
        self.integration_id = integration_id

    def verify(self, meta: Mapping[str, str], body: bytes) -> Callback:
        sig, ts, nonce = _query(meta, "msg_signature", "timestamp", "nonce")
        try:
            encrypted = str(xmltodict.parse(xml_text(utf8(body)))["xml"]["Encrypt"])
        except Refused:
            raise
        except Exception:  # expat errors, no <xml>, no <Encrypt>
            raise Refused(400, "body is not callback XML") from None
        plain = self.opener.open(sig, ts, nonce, encrypted)
        try:
            return Callback(parse_app_xml(plain), nonce)
        except BadPayload as exc:
            raise _unreadable(exc) from None

    def envelope(self, payload: Callback) -> Envelope | None:
        try:
            envelope = app_envelope(self.integration_id, payload.data)
        except BadPayload as exc:
            raise _unreadable(exc) from None
        if envelope is None:
            log.debug(
                "event skipped", integration_id=self.integration_id, type=payload.data["MsgType"]
            )
        return envelope

    async def received(self, envelope: Envelope) -> None:
        data = envelope.raw or {}
        if envelope.kind == "action" and data.get("ResponseCode"):
            # The click's fresh response_code is what the turn's next card update must use.
            await self.outbound.remember_response_code(
                str(data.get("TaskId") or ""), str(data["ResponseCode"])
            )

    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> Reply:
        action = envelope.action
        if (
            action is not None
            and action.id.startswith(ACTION_ANSWER)
            and action.message_id
            and outcome.status in ANSWERED
        ):
            # The question is answered: its card's buttons become one grey label, with the
            # click's own response_code (the answer's turn sends a card of its own).
            await self.outbound.close_buttons(action.message_id, envelope.sender.id, "Answer sent")
        return None


class AibotInbound(Inbound[Callback, R]):
    """An AI bot's messages, as callbacks or long-connection frames: the one ``envelope``."""

    integration_id: str

    def envelope(self, payload: Callback) -> Envelope | None:
        try:
            return aibot_envelope(self.integration_id, payload.data, req_id=payload.req_id)
        except BadPayload as exc:
            raise _unreadable(exc) from None


class AibotCallbacks(AibotInbound[Reply], Callbacks):
    """An AI bot's callbacks: ``{"encrypt": …}`` holding a JSON message, answered with an
    encrypted stream reply that WeCom then polls (docs/wecom.md, "AI bot")."""

    def __init__(self, *, opener: Opener, stream: StreamOutbound, integration_id: str) -> None:
        self.opener = opener
        self.stream = stream
        self.integration_id = integration_id

    def verify(self, meta: Mapping[str, str], body: bytes) -> Callback:
        sig, ts, nonce = _query(meta, "msg_signature", "timestamp", "nonce")
        encrypted = json_object(utf8(body)).get("encrypt")
        if not isinstance(encrypted, str):
            raise Refused(400, "body is not callback JSON")
        plain = self.opener.open(sig, ts, nonce, encrypted)
        return Callback(json_object(plain, "message"), nonce)

    async def early(self, callback: Callback) -> Reply:
        m = callback.data
        try:
            if m.get("msgtype") == "stream":
                stream = aibot_message(m).stream
                if stream is None or not stream.id:
                    raise BadPayload("stream refresh without id")
                return {"msgtype": "stream", "stream": await self.stream.refresh(stream.id)}
            if m.get("msgtype") == "text":
                more = await self._more(aibot_message(m))
                if more is not None:
                    return {"msgtype": "stream", "stream": more}
        except BadPayload as exc:
            raise _unreadable(exc) from None
        if event_type(m) == "enter_chat":
            return {"msgtype": "text", "text": {"content": cards.WELCOME}}
        return None

    async def _more(self, m: Any) -> dict[str, Any] | None:
        """``more`` after a long answer: its next part, without a turn (StreamOutbound.more)."""
        text = m.text.content if m.text else ""
        sender = m.sender.userid if m.sender else ""
        if not m.msgid or len(text) > 40 or not (m.chatid or sender):
            return None
        if m.chattype == "group":
            text = LEADING_MENTION.sub("", text, count=1)
        stream_id = stream_id_for(self.integration_id, m.msgid)
        return await self.stream.more(m.chatid or sender, m.msgid, stream_id, text)

    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> Reply:
        if envelope.kind == "action":
            assert envelope.action is not None
            if outcome.notice:  # refused (not the clicker's to answer): the card stays
                return None
            return {
                "response_type": "update_template_card",
                "userids": [envelope.sender.id],
                "template_card": cards.clicked_card(envelope.action, envelope.sender.id),
            }
        if outcome.status == "ignored":
            return None
        extra = envelope.reply_to.model_extra if envelope.reply_to else None
        stream_id = str((extra or {})["stream_id"])
        await self.stream.opened(stream_id)
        if outcome.status == "handled" and outcome.reason == "stop":
            await self.stream.finish_with(stream_id, "Stopping.", overwrite=False)
        return {"msgtype": "stream", "stream": await self.stream.refresh(stream_id)}


class CallbackAdapter(Adapter):
    """A WeCom adapter as its callback routes see it (``WeComAdapter``): ``callbacks`` reads
    its callbacks, None in a mode without them (``aibot_ws``)."""

    callbacks: Callbacks | None


def _empty() -> web.Response:
    return web.Response(status=200, text="")


class _WeComRoute(Webhook[CallbackAdapter, Any]):
    platform = "wecom"

    def serves(self, adapter: CallbackAdapter) -> bool:
        return adapter.callbacks is not None

    def refusal(self, rejected: Refused) -> web.StreamResponse:
        return web.Response(status=rejected.status, text=rejected.public)


class UrlCheck(_WeComRoute):
    """GET: WeCom checks the callback URL with a signed, encrypted ``echostr``."""

    def verify(self, adapter: CallbackAdapter, request: HttpRequest, body: bytes) -> str:
        assert adapter.callbacks is not None
        sig, ts, nonce, echo = _query(
            request.query, "msg_signature", "timestamp", "nonce", "echostr"
        )
        return adapter.callbacks.opener.open(sig, ts, nonce, echo)

    async def parse(self, adapter: CallbackAdapter, payload: str) -> Answer:
        log.info("URL verified", integration_id=adapter.integration_id)
        return web.Response(text=payload, content_type="text/plain")


class CallbackWebhook(EventWebhook[CallbackAdapter, Callback, Reply], _WeComRoute):
    """POST: a callback, verified by its query and decrypted from its body."""

    def check(self, adapter: CallbackAdapter, request: HttpRequest) -> None:
        _query(request.query, "msg_signature", "timestamp", "nonce")

    def inbound(self, adapter: CallbackAdapter) -> Callbacks:
        assert adapter.callbacks is not None
        return adapter.callbacks

    def meta(self, request: HttpRequest) -> Mapping[str, str]:
        return request.query

    async def parse(self, adapter: CallbackAdapter, payload: Callback) -> Answer:
        early = await self.inbound(adapter).early(payload)
        if early is not None:
            return self.respond(adapter, payload, None, early)
        return await super().parse(adapter, payload)

    def ignored(self, adapter: CallbackAdapter, payload: Callback) -> web.StreamResponse:
        return _empty()

    def respond(
        self,
        adapter: CallbackAdapter,
        payload: Callback,
        outcome: IngestOutcome | None,
        answer: Reply,
    ) -> web.StreamResponse:
        if answer is None:
            return _empty()
        assert adapter.callbacks is not None
        text = adapter.callbacks.opener.crypto.encrypted_json(answer, nonce=payload.nonce)
        return web.Response(text=text, content_type="application/json")


def setup_routes(app: web.Application, adapters: Mapping[str, CallbackAdapter]) -> None:
    app.router.add_get("/api/wecom/webhook/{integrationId}", UrlCheck(adapters).handle)
    app.router.add_post("/api/wecom/webhook/{integrationId}", CallbackWebhook(adapters).handle)
