"""``GET,POST /api/wecom/webhook/{integrationId}``: URL verification and callbacks.

Every request is verified first (signature in constant time, timestamp window, decryption with
the 32-byte padding and the receive-id check); a failure is a short 4xx and nothing is stored.
Messages are handed to intake and WeCom is answered only once that returned (5 s rule, §3.2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
import xmltodict  # type: ignore[import-untyped]
from aiohttp import web

from adapters.wecom import cards
from adapters.wecom.crypto import CryptoError
from adapters.wecom.messages import (
    BadPayload,
    aibot_envelope,
    app_envelope,
    event_type,
    parse_app_xml,
)
from gateway.adapter import AdapterContext, IngestOutcome, storage_failure
from gateway.envelope import Envelope
from gateway.pipeline import ShuttingDown

if TYPE_CHECKING:
    from adapters.wecom import WeComAdapter

log = structlog.get_logger("adapters.wecom")


def _fail(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text)


class WeComWebhook:
    def __init__(self, adapters: Mapping[str, WeComAdapter]) -> None:
        self.adapters = adapters

    def _adapter(self, request: web.Request) -> WeComAdapter:
        adapter = self.adapters.get(request.match_info["integrationId"])
        if adapter is None or adapter.crypto is None:
            raise web.HTTPNotFound(text="unknown integration")
        return adapter

    @staticmethod
    def _query(request: web.Request, *names: str) -> list[str]:
        values = [request.query.get(n, "") for n in names]
        if not all(values):
            raise web.HTTPBadRequest(text=f"missing query parameters: {', '.join(names)}")
        return values

    def _verify(self, adapter: WeComAdapter, sig: str, ts: str, nonce: str, enc: str) -> str:
        assert adapter.crypto is not None
        try:
            adapter.crypto.verify(
                sig,
                ts,
                nonce,
                enc,
                window_s=adapter.settings.signature_window_seconds,
                now=adapter.clock(),
            )
        except CryptoError as exc:
            log.info("callback refused", integration_id=adapter.integration_id, reason=str(exc))
            raise web.HTTPUnauthorized(text="signature check failed") from None
        try:
            return adapter.crypto.decrypt(enc)
        except CryptoError as exc:
            log.info("callback refused", integration_id=adapter.integration_id, reason=str(exc))
            raise web.HTTPBadRequest(text="cannot decrypt") from None

    async def verify_url(self, request: web.Request) -> web.Response:
        adapter = self._adapter(request)
        sig, ts, nonce, echo = self._query(
            request, "msg_signature", "timestamp", "nonce", "echostr"
        )
        plain = self._verify(adapter, sig, ts, nonce, echo)
        log.info("URL verified", integration_id=adapter.integration_id)
        return web.Response(text=plain, content_type="text/plain")

    async def callback(self, request: web.Request) -> web.Response:
        adapter = self._adapter(request)
        sig, ts, nonce = self._query(request, "msg_signature", "timestamp", "nonce")
        body = await request.text()
        if adapter.settings.connection_mode == "app":
            return await self._app(adapter, body, sig, ts, nonce)
        return await self._aibot(adapter, body, sig, ts, nonce)

    async def _app(
        self, adapter: WeComAdapter, body: str, sig: str, ts: str, nonce: str
    ) -> web.Response:
        try:
            outer = xmltodict.parse(body)["xml"]
            encrypt = str(outer["Encrypt"])
        except Exception:
            return _fail(400, "body is not callback XML")
        plain = self._verify(adapter, sig, ts, nonce, encrypt)
        try:
            data = parse_app_xml(plain)
            envelope = app_envelope(adapter.integration_id, data)
        except (BadPayload, ValueError) as exc:
            log.info("callback refused", integration_id=adapter.integration_id, reason=str(exc))
            return _fail(400, "unreadable message")
        if envelope is None:
            log.debug(
                "event skipped", integration_id=adapter.integration_id, type=data.get("MsgType")
            )
            return web.Response(status=200, text="")
        if envelope.kind == "action" and data.get("ResponseCode") and adapter.app is not None:
            # The click's fresh response_code is what the turn's next card update must use.
            await adapter.app.remember_response_code(
                str(data.get("TaskId") or ""), str(data["ResponseCode"])
            )
        outcome = await ingest(adapter.context, envelope)
        if isinstance(outcome, web.Response):
            return outcome
        return web.Response(status=200, text="")

    async def _aibot(
        self, adapter: WeComAdapter, body: str, sig: str, ts: str, nonce: str
    ) -> web.Response:
        try:
            encrypt = json.loads(body)["encrypt"]
            if not isinstance(encrypt, str):
                raise TypeError("encrypt")
        except (ValueError, KeyError, TypeError):
            return _fail(400, "body is not callback JSON")
        plain = self._verify(adapter, sig, ts, nonce, encrypt)
        assert adapter.stream is not None and adapter.crypto is not None
        try:
            message: dict[str, Any] = json.loads(plain)
            if not isinstance(message, dict):
                raise BadPayload("not an object")
            if message.get("msgtype") == "stream":
                stream_id = str((message.get("stream") or {}).get("id") or "")
                if not stream_id:
                    raise BadPayload("stream refresh without id")
                reply = {"msgtype": "stream", "stream": await adapter.stream.refresh(stream_id)}
                return _json(adapter.crypto.encrypted_json(reply, nonce=nonce))
            if event_type(message) == "enter_chat":
                reply = {"msgtype": "text", "text": {"content": cards.WELCOME}}
                return _json(adapter.crypto.encrypted_json(reply, nonce=nonce))
            envelope = aibot_envelope(adapter.integration_id, message)
        except (BadPayload, ValueError) as exc:
            log.info("callback refused", integration_id=adapter.integration_id, reason=str(exc))
            return _fail(400, "unreadable message")
        if envelope is None:
            return web.Response(status=200, text="")
        outcome = await ingest(adapter.context, envelope)
        if isinstance(outcome, web.Response):
            return outcome
        if envelope.kind == "action":
            assert envelope.action is not None
            reply = {
                "response_type": "update_template_card",
                "userids": [envelope.sender.id],
                "template_card": cards.clicked_card(envelope.action, envelope.sender.id),
            }
            return _json(adapter.crypto.encrypted_json(reply, nonce=nonce))
        if outcome.status == "ignored":
            return web.Response(status=200, text="")
        stream_id = (
            str((envelope.reply_to.model_extra or {})["stream_id"]) if envelope.reply_to else ""
        )
        await adapter.stream.opened(stream_id)
        if outcome.status == "handled" and outcome.reason == "stop":
            await adapter.stream.finish_with(stream_id, "Stopping.", overwrite=False)
        reply = {"msgtype": "stream", "stream": await adapter.stream.refresh(stream_id)}
        return _json(adapter.crypto.encrypted_json(reply, nonce=nonce))


def _json(text: str) -> web.Response:
    return web.Response(text=text, content_type="application/json")


async def ingest(
    context: AdapterContext, envelope: Envelope, *, spool: bool = False
) -> IngestOutcome | web.Response:
    """Durable intake; storage trouble is a 503 so WeCom retries (it retries on non-200).
    ``spool``: for the long connection, which never delivers a frame again: while Redis is
    unreachable the event waits in the local spool (outcome ``spooled``)."""
    bound = log.bind(integration_id=envelope.integration_id, event_id=envelope.event_id)
    try:
        outcome = await (context.ingest_or_spool if spool else context.ingest)(envelope)
    except ShuttingDown:
        return _fail(503, "shutting down")
    except Exception as exc:
        if not storage_failure(exc):
            raise
        bound.warning("callback not stored", error=str(exc))
        return _fail(503, "storage unavailable")
    bound.info("callback ingested", status=outcome.status, kind=envelope.kind)
    return outcome


def setup_routes(app: web.Application, adapters: Mapping[str, WeComAdapter]) -> None:
    hook = WeComWebhook(adapters)
    app.router.add_get("/api/wecom/webhook/{integrationId}", hook.verify_url)
    app.router.add_post("/api/wecom/webhook/{integrationId}", hook.callback)
