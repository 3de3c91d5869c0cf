"""The Lark adapter's hooks into the core's webhook skeleton (``gateway.edge.webhook``), for
``POST /api/lark/webhook/{integrationId}``, and the same event handling for the long connection.

Order (docs/architecture.md, "The edge"): the timestamp window (a signed request must carry its
timestamp), the signature over the raw body, then the body is parsed (bounded) and decrypted,
then the verification token; the event then becomes an Envelope, is made durable through
intake, and only then answered 200 (docs/lark.md). :class:`LarkInbound` is the
integration's ``gateway.edge.inbound.Inbound``: the long connection (``connection.py``) runs
its ``envelope`` and ``answer`` for each payload too (``Inbound.take``), without ``verify``: that
socket is opened with the app's credentials and its frames are not signed (lark-oapi's ws client
calls ``do_without_validation``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from aiohttp import web
from pydantic import ValidationError

from adapters.lark.cards import toast
from adapters.lark.crypto import CryptoError, EventCipher, same_secret
from adapters.lark.events import BadEvent, action_envelope, event_type, message_envelope, sub
from adapters.lark.outbound import LarkOutbound
from adapters.lark.settings import LarkIntegration
from gateway.edge.adapter import Adapter
from gateway.edge.body import ascii_text, json_object
from gateway.edge.inbound import Inbound
from gateway.edge.ingest import IngestOutcome
from gateway.edge.stores import StoreUnavailable
from gateway.edge.webhook import EventWebhook
from gateway.envelope import Envelope
from gateway.errors import Refused

log = structlog.get_logger("adapters.lark")

__all__ = ["LarkBot", "LarkInbound", "LarkWebhook", "setup_routes"]

EMPTY: dict[str, Any] = {}  # the usual answer; never mutated
EMPTY_RESPONSE = b"{}"


class LarkBot(Adapter):
    """A Lark adapter as its inbound sees it (``LarkAdapter``): the bot's own open_id (learnt
    at start; None until then), the outbound that knows the cards clicked, and its Inbound."""

    settings: LarkIntegration
    outbound: LarkOutbound
    inbound: LarkInbound
    bot_open_id: str | None


class LarkInbound(Inbound[dict[str, Any], dict[str, Any]]):
    def __init__(
        self,
        *,
        settings: LarkIntegration,
        adapter: LarkBot,
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
        # Seconds since the epoch: ten digits until 2286; a longer run of digits is no time
        # (and int() of thousands of them raises).
        if not timestamp:
            raise Refused(401, "missing request timestamp")
        if not timestamp.isdigit() or len(timestamp) > 12:
            raise Refused(401, "bad request timestamp")
        if abs(self.clock() - int(timestamp)) > self.settings.timestamp_tolerance_seconds:
            raise Refused(401, "stale request timestamp")

    def verify(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The verified, decrypted payload; raises :class:`Refused` otherwise."""
        timestamp = ascii_text(headers.get("X-Lark-Request-Timestamp"), "timestamp")
        nonce = ascii_text(headers.get("X-Lark-Request-Nonce"), "nonce")
        signature = ascii_text(headers.get("X-Lark-Signature"), "signature")
        if self.cipher is None:
            if timestamp:
                self._check_timestamp(timestamp)
            payload = json_object(body)
            if "encrypt" in payload:
                raise Refused(400, "body: encrypted, but no encryptKey is configured")
            self._check_token(payload)
            return payload
        signed = bool(signature)
        if signed:
            # The signature covers timestamp + nonce run together, so it does not say where one
            # ends: a captured timestamp moved into the nonce (the timestamp header left out)
            # signs the same. A signed request must therefore carry a numeric timestamp, and
            # that timestamp is always held to the window (issue 25).
            self._check_timestamp(timestamp)
            if not self.cipher.signature_ok(timestamp, nonce, body, signature):
                raise Refused(401, "bad signature")
        elif timestamp:
            self._check_timestamp(timestamp)
        encrypted = json_object(body).get("encrypt")
        if not isinstance(encrypted, str):
            raise Refused(400, "body: expected an encrypted event")
        try:
            plain = self.cipher.decrypt(encrypted)
        except CryptoError as exc:
            # Unsigned bodies get one answer whatever fails, so no padding oracle.
            reason = str(exc) if signed else "missing signature"
            raise Refused(400 if signed else 401, reason) from None
        try:
            payload = json_object(plain, "encrypt")
        except Refused:
            raise Refused(400 if signed else 401, "encrypt: not a JSON object") from None
        # Lark signs events; only the URL check (answered by token alone, as the SDK does) may
        # come unsigned.
        if not signed and payload.get("type") != "url_verification":
            raise Refused(401, "missing signature")
        self._check_token(payload)
        return payload

    def _check_token(self, payload: dict[str, Any]) -> None:
        if self.token is None:  # long-connection integrations: no HTTP events expected
            raise Refused(401, "webhooks need a verificationToken")
        header = payload.get("header")
        given = header.get("token") if isinstance(header, dict) else payload.get("token")
        if not same_secret(self.token, given):
            raise Refused(401, "bad verification token")

    # --- events (webhook and long connection) ---------------------------------------------
    def envelope(self, payload: dict[str, Any]) -> Envelope | None:
        """The event's Envelope; None for event types the gateway does not act on.

        The hot path binds no log context per event (the pipeline binds integration and event
        ids for everything logged below it); the few log lines here name them explicitly."""
        kind = event_type(payload)
        try:
            if kind == "im.message.receive_v1":
                return message_envelope(
                    self.settings.id,
                    payload,
                    self.adapter.bot_open_id,
                    keep_raw=self.settings.store_raw,
                )
            if kind == "card.action.trigger":
                return action_envelope(self.settings.id, payload)
        except (BadEvent, ValidationError) as exc:
            reason = str(exc) if isinstance(exc, BadEvent) else "fields of the wrong type"
            log.debug(
                "lark event rejected",
                integration_id=self.settings.id,
                lark_event_id=str(sub(payload, "header").get("event_id")),
                event_type=kind,
                reason=reason,
            )
            raise Refused(400, reason) from None
        log.info("lark event ignored", integration_id=self.settings.id, event_type=kind)
        return None

    async def answer(self, env: Envelope, outcome: IngestOutcome) -> dict[str, Any]:
        if env.action is None:
            return EMPTY
        action = env.action
        if outcome.notice:  # refused (not the clicker's to answer): the card stays as it is
            return toast(action.id, notice=outcome.notice)
        card = await self._clicked_card(action.id, action.message_id, action.value)
        return toast(action.id, duplicate=outcome.status == "duplicate", card=card)

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
        except StoreUnavailable as exc:
            log.warning(
                "lark clicked card unavailable", integration_id=self.settings.id, error=str(exc)
            )
            return None


class LarkWebhook(EventWebhook[LarkBot, dict[str, Any], dict[str, Any]]):
    """UTF-8, as Lark sends; the signature covers the raw bytes, and the JSON parser refuses any
    that are not UTF-8 (no decode to text here: issue 15)."""

    platform = "lark"

    def inbound(self, adapter: LarkBot) -> LarkInbound:
        return adapter.inbound

    async def parse(
        self, adapter: LarkBot, payload: dict[str, Any]
    ) -> Envelope | web.StreamResponse | None:
        if payload.get("type") == "url_verification":
            return web.json_response({"challenge": str(payload.get("challenge", ""))})
        return await super().parse(adapter, payload)

    def ignored(self, adapter: LarkBot, payload: dict[str, Any]) -> web.StreamResponse:
        return web.Response(body=EMPTY_RESPONSE, content_type="application/json")

    def respond(
        self,
        adapter: LarkBot,
        payload: dict[str, Any],
        outcome: IngestOutcome,
        answer: dict[str, Any],
    ) -> web.StreamResponse:
        if answer is EMPTY:
            return web.Response(body=EMPTY_RESPONSE, content_type="application/json")
        return web.json_response(answer)


def setup_routes(app: web.Application, adapters: Mapping[str, LarkBot]) -> None:
    handle = LarkWebhook(adapters).handle
    app.router.add_post("/api/lark/webhook/{integrationId}", handle)
