"""Robot messages: markdown / actionCard messages through the sessionWebhook while it is valid,
else the robot OpenAPI (docs/dingtalk.md). Every send is claimed in Redis first, so one idempotency
key never makes a second message, across retries and replicas."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from adapters.dingtalk.api import DingTalkApi, DingTalkApiError, WebhookGone
from adapters.dingtalk.cards import Message
from adapters.dingtalk.settings import SESSION_WEBHOOK_ORIGIN, origin_of
from gateway.edge.stores import RecordStore
from gateway.envelope import Envelope


class OpenApiMessage(Protocol):
    """A robot message only the OpenAPI sends (an image, a file): its msgKey and msgParam."""

    def openapi_param(self) -> tuple[str, str]: ...


log = structlog.get_logger("adapters.dingtalk")

SENT_NS = "dingtalk.sent"
SENT_TTL_MS = 24 * 3_600_000
WEBHOOK_MARGIN_MS = 60_000  # don't start a post on a webhook about to expire
BATCH_ATTEMPTS = 5


def webhook_allowed(url: str, origins: frozenset[str]) -> bool:
    """Whether a sessionWebhook is on one of ``origins`` (scheme, host and port exactly)."""
    return origin_of(url) in origins


def reply_extras(envelope: Envelope) -> dict[str, Any]:
    return dict(envelope.reply_to.model_extra or {}) if envelope.reply_to else {}


def target(envelope: Envelope) -> tuple[bool, str, str]:
    """(group?, openConversationId, staff id) for OpenAPI sends; schedules have no reply
    handle, so the chat stands in (a direct chat's schedule names the user's staff id as its
    chat: ``DingTalkAdapter.unprompted_chat_id``)."""
    extras = reply_extras(envelope)
    ctype = extras.get("conversationType") or ("2" if envelope.chat.type == "group" else "1")
    conversation = str(extras.get("conversationId") or envelope.chat.id)
    sender = envelope.chat.id if envelope.kind in ("schedule", "event") else envelope.sender.id
    staff = str(extras.get("senderStaffId") or sender)
    return ctype == "2", conversation, staff


class Sender:
    """Delivers robot messages for one integration."""

    def __init__(
        self,
        *,
        integration_id: str,
        robot_code: str,
        api: DingTalkApi,
        records: RecordStore,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        webhook_origins: frozenset[str] = frozenset({SESSION_WEBHOOK_ORIGIN}),
    ) -> None:
        self.integration_id = integration_id
        self.robot_code = robot_code
        self.api = api
        self.records = records
        self.clock_ms = clock_ms
        self.webhook_origins = webhook_origins

    async def once(self, key: str, messages: list[Message], reply_to: Envelope) -> None:
        """Send each message at most once for ``key`` (claimed before, released on failure)."""
        for i, message in enumerate(messages):
            claim = f"{self.integration_id}:{key}:{i}"
            if not await self.records.put_new(SENT_NS, claim, "1", ttl_ms=SENT_TTL_MS):
                continue
            try:
                await self.deliver(reply_to, message)
            except BaseException:
                await self.records.delete(SENT_NS, claim)
                raise

    async def deliver(self, reply_to: Envelope, message: Message | OpenApiMessage) -> None:
        extras = reply_extras(reply_to)
        # A sessionWebhook takes text, markdown, actionCard, feedCard and link only.
        webhook = extras.get("sessionWebhook") if isinstance(message, Message) else None
        expires = int(extras.get("sessionWebhookExpiredTime") or 0)
        if webhook and not webhook_allowed(str(webhook), self.webhook_origins):
            # Never a request to where a message body points (stream frames, envelopes stored
            # before the HTTP intake checked it): the robot OpenAPI reaches the chat instead.
            log.warning("sessionWebhook not on DingTalk's origin; using the robot OpenAPI")
            webhook = None
        if (
            isinstance(message, Message)
            and webhook
            and expires - WEBHOOK_MARGIN_MS > self.clock_ms()
        ):
            try:
                await self.api.post_webhook(str(webhook), message.webhook_body())
                return
            except WebhookGone as exc:
                log.info("sessionWebhook unusable; using the robot OpenAPI", reason=str(exc))
        group, conversation, staff = target(reply_to)
        if group:
            msg_key, msg_param = message.openapi_param()
            await self.api.call(
                "POST",
                "/v1.0/robot/groupMessages/send",
                {
                    "robotCode": self.robot_code,
                    "openConversationId": conversation,
                    "msgKey": msg_key,
                    "msgParam": msg_param,
                },
            )
            return
        await self.to_user(staff, message)

    async def to_user(self, staff: str, message: Message | OpenApiMessage) -> bool:
        """A 1:1 robot message to ``staff`` (``oToMessages/batchSend``); False when DingTalk
        lists the id in ``invalidStaffIdList`` (nothing was sent: DOC:chatbots-send-one-on-one-
        chat-messages-in-batches). Raises ``DingTalkApiError`` when refused."""
        msg_key, msg_param = message.openapi_param()
        users = [staff]
        for attempt in range(BATCH_ATTEMPTS):
            result = await self.api.call(
                "POST",
                "/v1.0/robot/oToMessages/batchSend",
                {
                    "robotCode": self.robot_code,
                    "userIds": users,
                    "msgKey": msg_key,
                    "msgParam": msg_param,
                },
            )
            if staff in [str(u) for u in result.get("invalidStaffIdList") or []]:
                return False
            users = [str(u) for u in result.get("flowControlledStaffIdList") or []]
            if not users:
                return True
            log.warning("recipient flow-controlled; retrying", attempt=attempt)
            await asyncio.sleep(min(0.25 * 2**attempt, 4.0))
        raise DingTalkApiError(403, "FlowControlled", "recipient still throttled")

    async def to_user_once(self, key: str, staff: str, message: Message) -> bool:
        """``to_user`` at most once for ``key``; whether it reached them. The outcome is kept
        with the claim, so a retry (any replica) tells the chat the same; a refusal is logged
        as one line with DingTalk's code."""
        claim = f"{self.integration_id}:{key}"
        if not await self.records.put_new(SENT_NS, claim, "pending", ttl_ms=SENT_TTL_MS):
            return await self.records.get(SENT_NS, claim) != "refused"
        try:
            reached = await self.to_user(staff, message)
            fields: dict[str, Any] = {"code": "invalidStaffIdList"}
        except DingTalkApiError as exc:
            if not exc.refused:
                await self.records.delete(SENT_NS, claim)
                raise
            reached, fields = False, exc.log_fields()
        except BaseException:
            await self.records.delete(SENT_NS, claim)
            raise
        if not reached:
            log.warning(
                "direct message refused", integration_id=self.integration_id, user=staff, **fields
            )
        outcome = "sent" if reached else "refused"
        await self.records.put(SENT_NS, claim, outcome, ttl_ms=SENT_TTL_MS)
        return reached
