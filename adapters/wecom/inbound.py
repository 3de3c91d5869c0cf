"""WeCom's hooks into the core's webhook skeleton (``gateway.edge.webhook``):
``GET,POST /api/wecom/webhook/{integrationId}``, URL verification and callbacks.

Every request is verified first (signature in constant time, timestamp window, decryption with
the 32-byte padding and the receive-id check); a failure is a short 4xx and nothing is stored.
The signature covers the body's ``Encrypt`` field, so the outer body is parsed (bounded) first.
What a callback holds depends on the connection mode, chosen once per integration: encrypted XML
for an app (:class:`AppCallbacks`), encrypted JSON with stream replies for an AI bot
(:class:`AibotCallbacks`). WeCom is answered only once intake returned (5 s rule, §3.2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
import xmltodict  # type: ignore[import-untyped]
from aiohttp import web

import adapters.wecom.cards as cards
from adapters.wecom.crypto import CryptoError, WeComCrypto
from adapters.wecom.events import (
    BadPayload,
    aibot_envelope,
    aibot_message,
    app_envelope,
    event_type,
    parse_app_xml,
)
from adapters.wecom.outbound import AppOutbound
from adapters.wecom.outbound.stream import StreamOutbound
from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, ascii_text, body_text, json_object, xml_text
from gateway.edge.ingest import IngestOutcome
from gateway.edge.webhook import Webhook
from gateway.envelope import Envelope
from gateway.errors import Refused

log = structlog.get_logger("adapters.wecom")

Answer = Envelope | web.StreamResponse | None


@dataclass(frozen=True, slots=True)
class Callback:
    """A verified, decrypted callback and the nonce its encrypted answer reuses."""

    data: dict[str, Any]
    nonce: str


def _query(request: HttpRequest, *names: str) -> list[str]:
    values = [ascii_text(request.query.get(n), n, status=400) for n in names]
    if not all(values):
        raise Refused(400, f"missing query parameters: {', '.join(names)}")
    return values


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


class Callbacks(Protocol):
    """One connection mode's callbacks."""

    opener: Opener

    def payload(self, body: str, sig: str, ts: str, nonce: str) -> Callback: ...

    async def parse(self, callback: Callback) -> Answer: ...

    async def answer(
        self, callback: Callback, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse: ...


def _empty() -> web.Response:
    return web.Response(status=200, text="")


class AppCallbacks:
    """A self-built app: ``<xml><Encrypt>…</Encrypt></xml>`` holding callback XML (§3.2)."""

    def __init__(self, *, opener: Opener, outbound: AppOutbound, integration_id: str) -> None:
        self.opener = opener
        self.outbound = outbound
        self.integration_id = integration_id

    def payload(self, body: str, sig: str, ts: str, nonce: str) -> Callback:
        try:
            encrypted = str(xmltodict.parse(xml_text(body))["xml"]["Encrypt"])
        except Refused:
            raise
        except Exception:  # expat errors, no <xml>, no <Encrypt>
            raise Refused(400, "body is not callback XML") from None
        plain = self.opener.open(sig, ts, nonce, encrypted)
        try:
            return Callback(parse_app_xml(plain), nonce)
        except BadPayload as exc:
            raise Refused(400, str(exc), public="unreadable message") from None

    async def parse(self, callback: Callback) -> Answer:
        data = callback.data
        try:
            envelope = app_envelope(self.integration_id, data)
        except BadPayload as exc:
            raise Refused(400, str(exc), public="unreadable message") from None
        if envelope is None:
            log.debug("event skipped", integration_id=self.integration_id, type=data["MsgType"])
            return None
        if envelope.kind == "action" and data.get("ResponseCode"):
            # The click's fresh response_code is what the turn's next card update must use.
            await self.outbound.remember_response_code(
                str(data.get("TaskId") or ""), str(data["ResponseCode"])
            )
        return envelope

    async def answer(
        self, callback: Callback, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        return _empty()


class AibotCallbacks:
    """An AI bot: ``{"encrypt": …}`` holding a JSON message, answered with an encrypted stream
    reply that WeCom then polls (§3.5)."""

    def __init__(self, *, opener: Opener, stream: StreamOutbound, integration_id: str) -> None:
        self.opener = opener
        self.stream = stream
        self.integration_id = integration_id

    def payload(self, body: str, sig: str, ts: str, nonce: str) -> Callback:
        encrypted = json_object(body).get("encrypt")
        if not isinstance(encrypted, str):
            raise Refused(400, "body is not callback JSON")
        plain = self.opener.open(sig, ts, nonce, encrypted)
        return Callback(json_object(plain, "message"), nonce)

    def _reply(self, callback: Callback, reply: dict[str, Any]) -> web.Response:
        text = self.opener.crypto.encrypted_json(reply, nonce=callback.nonce)
        return web.Response(text=text, content_type="application/json")

    async def parse(self, callback: Callback) -> Answer:
        m = callback.data
        try:
            if m.get("msgtype") == "stream":
                stream = aibot_message(m).stream
                if stream is None or not stream.id:
                    raise BadPayload("stream refresh without id")
                reply = {"msgtype": "stream", "stream": await self.stream.refresh(stream.id)}
                return self._reply(callback, reply)
            if event_type(m) == "enter_chat":
                return self._reply(
                    callback, {"msgtype": "text", "text": {"content": cards.WELCOME}}
                )
            return aibot_envelope(self.integration_id, m)
        except BadPayload as exc:
            raise Refused(400, str(exc), public="unreadable message") from None

    async def answer(
        self, callback: Callback, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        if envelope.kind == "action":
            assert envelope.action is not None
            if outcome.notice:  # refused (not the clicker's to answer): the card stays
                return _empty()
            reply = {
                "response_type": "update_template_card",
                "userids": [envelope.sender.id],
                "template_card": cards.clicked_card(envelope.action, envelope.sender.id),
            }
            return self._reply(callback, reply)
        if outcome.status == "ignored":
            return _empty()
        extra = envelope.reply_to.model_extra if envelope.reply_to else None
        stream_id = str((extra or {})["stream_id"])
        await self.stream.opened(stream_id)
        if outcome.status == "handled" and outcome.reason == "stop":
            await self.stream.finish_with(stream_id, "Stopping.", overwrite=False)
        return self._reply(
            callback, {"msgtype": "stream", "stream": await self.stream.refresh(stream_id)}
        )


class CallbackAdapter(Adapter):
    """A WeCom adapter as its callback routes see it (``WeComAdapter``): ``callbacks`` reads
    its callbacks, None in a mode without them (``aibot_ws``)."""

    callbacks: Callbacks | None


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
        sig, ts, nonce, echo = _query(request, "msg_signature", "timestamp", "nonce", "echostr")
        return adapter.callbacks.opener.open(sig, ts, nonce, echo)

    async def parse(self, adapter: CallbackAdapter, payload: str) -> Answer:
        log.info("URL verified", integration_id=adapter.integration_id)
        return web.Response(text=payload, content_type="text/plain")


class CallbackWebhook(_WeComRoute):
    """POST: a callback, verified by its query and decrypted from its body."""

    def check(self, adapter: CallbackAdapter, request: HttpRequest) -> None:
        _query(request, "msg_signature", "timestamp", "nonce")

    def verify(self, adapter: CallbackAdapter, request: HttpRequest, body: bytes) -> Callback:
        assert adapter.callbacks is not None
        sig, ts, nonce = _query(request, "msg_signature", "timestamp", "nonce")
        return adapter.callbacks.payload(body_text(request, body), sig, ts, nonce)

    async def parse(self, adapter: CallbackAdapter, payload: Callback) -> Answer:
        assert adapter.callbacks is not None
        return await adapter.callbacks.parse(payload)

    def ignored(self, adapter: CallbackAdapter, payload: Callback) -> web.StreamResponse:
        return _empty()

    async def answer(
        self,
        adapter: CallbackAdapter,
        payload: Callback,
        envelope: Envelope,
        outcome: IngestOutcome,
    ) -> web.StreamResponse:
        assert adapter.callbacks is not None
        return await adapter.callbacks.answer(payload, envelope, outcome)


def setup_routes(app: web.Application, adapters: Mapping[str, CallbackAdapter]) -> None:
    app.router.add_get("/api/wecom/webhook/{integrationId}", UrlCheck(adapters).handle)
    app.router.add_post("/api/wecom/webhook/{integrationId}", CallbackWebhook(adapters).handle)
