"""The Lark adapter's inbound side: ``POST /api/lark/webhook/{integrationId}``.

Order (STYLE: verify before parsing): signature over the raw body and the timestamp window, then
decrypt, then the verification token, then the event is parsed, made durable through intake, and
only then answered 200 (platforms.md §1.2-1.4). The long connection hands its payloads to the
same :meth:`LarkInbound.dispatch`, which is why it lives apart from HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from adapters.lark.cards import toast
from adapters.lark.crypto import CryptoError, EventCipher, same_secret
from adapters.lark.events import BadEvent, action_envelope, event_type, message_envelope, sub
from adapters.lark.settings import LarkIntegration
from gateway.adapter import storage_failure
from gateway.pipeline import ShuttingDown

if TYPE_CHECKING:
    from adapters.lark import LarkAdapter

log = structlog.get_logger("adapters.lark")


class Rejected(Exception):
    """A request that is answered with a short 4xx (or 503) and nothing stored."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _object(raw: bytes | str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Rejected(400, f"{what}: not valid JSON") from None
    if not isinstance(data, dict):
        raise Rejected(400, f"{what}: expected a JSON object")
    return data


EMPTY: dict[str, Any] = {}  # the usual answer; never mutated
EMPTY_RESPONSE = b"{}"


class LarkInbound:
    def __init__(
        self,
        *,
        settings: LarkIntegration,
        adapter: LarkAdapter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.adapter = adapter
        self.clock = clock
        key = settings.encrypt_key.get_secret_value() if settings.encrypt_key else ""
        self.cipher = EventCipher(key) if key else None
        token = settings.verification_token
        self.token = token.get_secret_value() if token else None

    # --- verification ---------------------------------------------------------------------
    def _check_timestamp(self, timestamp: str) -> None:
        try:
            ts = int(timestamp)
        except ValueError:
            raise Rejected(401, "bad request timestamp") from None
        if abs(self.clock() - ts) > self.settings.timestamp_tolerance_seconds:
            raise Rejected(401, "stale request timestamp")

    def verify(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The verified, decrypted payload; raises :class:`Rejected` otherwise."""
        outer = _object(body, "body")
        timestamp = headers.get("X-Lark-Request-Timestamp", "")
        nonce = headers.get("X-Lark-Request-Nonce", "")
        signature = headers.get("X-Lark-Signature", "")
        signed = False
        if self.cipher is not None:
            encrypted = outer.get("encrypt")
            if not isinstance(encrypted, str):
                raise Rejected(400, "body: expected an encrypted event")
            if signature:
                if not self.cipher.signature_ok(timestamp, nonce, body, signature):
                    raise Rejected(401, "bad signature")
                signed = True
            if timestamp:
                self._check_timestamp(timestamp)
            try:
                payload = _object(self.cipher.decrypt(encrypted), "encrypt")
            except CryptoError as exc:
                # Unsigned bodies get one answer whatever fails, so no padding oracle.
                reason = str(exc) if signed else "missing signature"
                raise Rejected(400 if signed else 401, reason) from None
            # Lark signs events; only the URL check (answered by token alone, as the SDK does)
            # may come unsigned.
            if not signed and payload.get("type") != "url_verification":
                raise Rejected(401, "missing signature")
        else:
            if "encrypt" in outer:
                raise Rejected(400, "body: encrypted, but no encryptKey is configured")
            if timestamp:
                self._check_timestamp(timestamp)
            payload = outer
        self._check_token(payload)
        return payload

    def _check_token(self, payload: dict[str, Any]) -> None:
        if self.token is None:  # long-connection integrations: no HTTP events expected
            raise Rejected(401, "webhooks need a verificationToken")
        header = payload.get("header")
        given = header.get("token") if isinstance(header, dict) else payload.get("token")
        if not same_secret(self.token, given):
            raise Rejected(401, "bad verification token")

    # --- dispatch (webhook and long connection) ---------------------------------------------
    async def dispatch(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Ingest one verified event; returns the answer body. Raises :class:`Rejected`.

        The hot path binds no log context per event (the pipeline binds integration and event
        ids for everything logged below it); the few log lines here name them explicitly."""
        kind = event_type(payload)
        try:
            if kind == "im.message.receive_v1":
                env = message_envelope(self.settings.id, payload, self.adapter.bot_open_id)
            elif kind == "card.action.trigger":
                env = action_envelope(self.settings.id, payload)
            else:
                log.info("lark event ignored", integration_id=self.settings.id, event_type=kind)
                return {}
        except BadEvent as exc:
            log.info(
                "lark event rejected",
                integration_id=self.settings.id,
                lark_event_id=sub(payload, "header").get("event_id"),
                event_type=kind,
                reason=str(exc),
            )
            raise Rejected(400, str(exc)) from None
        try:
            outcome = await self.adapter.context.ingest(env)
        except ShuttingDown:
            raise Rejected(503, "shutting down; retry") from None
        except Exception as exc:
            if not storage_failure(exc):
                raise
            log.warning(
                "lark event not stored",
                integration_id=self.settings.id,
                event_id=env.event_id,
                error=str(exc),
            )
            raise Rejected(503, "storage unavailable; retry") from None
        if env.action is not None:
            card = await self._clicked_card(env.action.id, env.action.message_id, env.action.value)
            return toast(env.action.id, duplicate=outcome.status == "duplicate", card=card)
        return EMPTY

    async def _clicked_card(
        self, action_id: str, message_id: str | None, value: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The card a click turns into; the click is stored already, so a lookup that fails only
        costs the immediate card change (the renderer's next update still lands)."""
        if not message_id:
            return None
        try:
            return await self.adapter.outbound.clicked(
                message_id, action_id, str(value.get("turnId") or "")
            )
        except Exception as exc:
            if not storage_failure(exc):
                raise
            log.warning(
                "lark clicked card unavailable", integration_id=self.settings.id, error=str(exc)
            )
            return None


class LarkWebhook:
    def __init__(self, adapters: Mapping[str, LarkAdapter]) -> None:
        self.adapters = adapters

    async def handle(self, request: web.Request) -> web.Response:
        integration_id = request.match_info["integrationId"]
        adapter = self.adapters.get(integration_id)
        if adapter is None:
            log.info("lark webhook for unknown integration", integration_id=integration_id)
            return web.json_response({"error": "unknown integration"}, status=404)
        body = await request.read()
        try:
            payload = adapter.inbound.verify(request.headers, body)
            if payload.get("type") == "url_verification":
                return web.json_response({"challenge": str(payload.get("challenge", ""))})
            answer = await adapter.inbound.dispatch(payload)
        except Rejected as exc:
            log.info("lark webhook rejected", integration_id=integration_id, reason=exc.reason)
            return web.json_response({"error": exc.reason}, status=exc.status)
        if answer is EMPTY:
            return web.Response(body=EMPTY_RESPONSE, content_type="application/json")
        return web.json_response(answer)


def setup_routes(app: web.Application, adapters: Mapping[str, LarkAdapter]) -> None:
    app.router.add_post("/api/lark/webhook/{integrationId}", LarkWebhook(adapters).handle)
