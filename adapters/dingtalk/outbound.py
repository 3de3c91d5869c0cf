"""Replies: markdown / actionCard messages through the sessionWebhook while it is valid, else
the robot OpenAPI (§2.5); and the AI card (createAndDeliver, streaming, instance updates, §2.6)
when a template is configured. Every send is claimed in Redis first, so one idempotency key
never makes a second message, across retries and replicas.

createAndDeliver answers HTTP 200 even when the card reached no chat: each target space has
its own ``result.deliverResults[{spaceType, spaceId, success, errorMsg, carrierId}]``
(https://open.dingtalk.com/document/development/create-and-deliver-cards; SDK model
``CreateAndDeliverResponseBody`` in aliyun/dingtalk-sdk card_1_0). A card delivered nowhere,
or refused outright (a 4xx other than throttling), makes the turn fall back to markdown.
(Over 300 lines: the robot messages and the AI card share the send-once claims; one module.)"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from adapters.dingtalk.api import DingTalkApi, DingTalkApiError, WebhookGone
from adapters.dingtalk.cards import Message, card_content, card_params, fit
from adapters.dingtalk.settings import SESSION_WEBHOOK_ORIGIN, origin_of
from gateway.edge.adapter import RecordStore
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.dingtalk")

SENT_NS = "dingtalk.sent"
CARD_NS = "dingtalk.card"
SENT_TTL_MS = 24 * 3_600_000
WEBHOOK_MARGIN_MS = 60_000  # don't start a post on a webhook about to expire
BATCH_ATTEMPTS = 5
CARD_EXISTS = "param.cardAlreadyExist"  # createAndDeliver with an outTrackId already used


def webhook_allowed(url: str, origins: frozenset[str]) -> bool:
    """Whether a sessionWebhook is on one of ``origins`` (scheme, host and port exactly)."""
    return origin_of(url) in origins


def reply_extras(envelope: Envelope) -> dict[str, Any]:
    return dict(envelope.reply_to.model_extra or {}) if envelope.reply_to else {}


def delivered(answer: dict[str, Any]) -> bool:
    """Whether a createAndDeliver answer shows the card in at least one chat. An answer
    without ``deliverResults`` (the doc's own example is ``"result": {}``) counts as
    delivered: showing nothing twice beats showing the answer twice."""
    if answer.get("success") is False:
        return False
    result = answer.get("result")
    spaces = result.get("deliverResults") if isinstance(result, dict) else None
    if not isinstance(spaces, list) or not spaces:
        return True
    return any(isinstance(s, dict) and s.get("success") is True for s in spaces)


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

    async def deliver(self, reply_to: Envelope, message: Message) -> None:
        extras = reply_extras(reply_to)
        webhook = extras.get("sessionWebhook")
        expires = int(extras.get("sessionWebhookExpiredTime") or 0)
        if webhook and not webhook_allowed(str(webhook), self.webhook_origins):
            # Never a request to where a message body points (stream frames, envelopes stored
            # before the HTTP intake checked it): the robot OpenAPI reaches the chat instead.
            log.warning("sessionWebhook not on DingTalk's origin; using the robot OpenAPI")
            webhook = None
        if webhook and expires - WEBHOOK_MARGIN_MS > self.clock_ms():
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

    async def to_user(self, staff: str, message: Message) -> bool:
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


class CardOutbound:
    """The AI card of one turn: created and delivered once, then updated in place.

    ``PUT /v1.0/card/instances`` carries status, steps and button flags when they change; the
    answer goes through ``PUT /v1.0/card/streaming`` as full text with a fresh guid each time,
    ``isFinalize`` on the final state (§2.6)."""

    def __init__(
        self,
        *,
        integration_id: str,
        robot_code: str,
        template_id: str,
        api: DingTalkApi,
        records: RecordStore,
        card_ttl_ms: int,
    ) -> None:
        self.integration_id = integration_id
        self.robot_code = robot_code
        self.template_id = template_id
        self.api = api
        self.records = records
        self.card_ttl_ms = card_ttl_ms
        # handle -> (params, content) last shown, so unchanged parts are not re-sent.
        self._shown: dict[str, tuple[dict[str, str], str]] = {}

    async def create(self, reply_to: Envelope, progress: Progress, key: str) -> str | None:
        """Create and deliver the turn's card; its handle, or None when the card reached no
        chat and the turn must go out as markdown. The outcome is kept with the claim, so a
        retry (any replica) decides the same way and never sends the card twice."""
        track = f"xgw-{key}"[:64]
        handle = f"card:{track}"
        claim = f"{self.integration_id}:{track}"
        if not await self.records.put_new(SENT_NS, claim, "pending", ttl_ms=SENT_TTL_MS):
            outcome = await self.records.get(SENT_NS, claim)
            return None if outcome == "markdown" else handle
        group, conversation, staff = target(reply_to)
        params = card_params(progress)
        body: dict[str, Any] = {
            "cardTemplateId": self.template_id,
            "outTrackId": track,
            "callbackType": "STREAM",
            "cardData": {"cardParamMap": {**params, "content": fit(card_content(progress))}},
            "userIdType": 1,
        }
        if group:
            body["openSpaceId"] = f"dtv1.card//IM_GROUP.{conversation}"
            body["imGroupOpenSpaceModel"] = {"supportForward": True}
            body["imGroupOpenDeliverModel"] = {"robotCode": self.robot_code}
        else:
            body["openSpaceId"] = f"dtv1.card//IM_ROBOT.{staff}"
            body["imRobotOpenSpaceModel"] = {"supportForward": True}
            body["imRobotOpenDeliverModel"] = {
                "spaceType": "IM_ROBOT",
                "robotCode": self.robot_code,
            }
        # Where a click on this card belongs (the callback names only the card).
        where = {"chatId": reply_to.chat.id, "group": group, "extras": reply_extras(reply_to)}
        await self.records.put(CARD_NS, claim, json.dumps(where), ttl_ms=self.card_ttl_ms)
        bound = log.bind(out_track_id=track, turn_id=progress.turn_id)
        try:
            answer = await self.api.call("POST", "/v1.0/card/instances/createAndDeliver", body)
            shown = delivered(answer)
        except DingTalkApiError as exc:
            if exc.code == CARD_EXISTS:  # an earlier attempt created it; its answer was lost
                shown = True
            elif exc.refused:  # no card was made: the answer goes out as markdown
                bound.warning("card refused", code=exc.code, request_id=exc.request_id)
                shown = False
            else:
                await self.records.delete(SENT_NS, claim)
                raise
        except BaseException:
            await self.records.delete(SENT_NS, claim)
            raise
        await self.records.put(SENT_NS, claim, "card" if shown else "markdown", ttl_ms=SENT_TTL_MS)
        if not shown:
            await self.records.delete(CARD_NS, claim)
            bound.warning("card delivered nowhere; replying with markdown")
            return None
        self._shown[handle] = (params, card_content(progress))
        bound.info("card created")
        return handle

    async def update(self, handle: str, progress: Progress) -> None:
        track = handle.removeprefix("card:")
        params = card_params(progress)
        content = card_content(progress)
        shown_params, shown_content = self._shown.get(handle, ({}, None))
        if params.get("status") != shown_params.get("status"):
            log.info(
                "card state", out_track_id=track, turn_id=progress.turn_id, status=progress.status
            )
        if params != shown_params:
            await self.api.call(
                "PUT",
                "/v1.0/card/instances",
                {
                    "outTrackId": track,
                    "cardData": {"cardParamMap": params},
                    "cardUpdateOptions": {"updateCardDataByKey": True},
                },
            )
            self._shown[handle] = (params, shown_content or "")
        # An empty content is refused (400 param.stream.contentEmpty, …/api-streamingupdate).
        if content and (content != shown_content or progress.final):
            await self.api.call(
                "PUT",
                "/v1.0/card/streaming",
                {
                    "outTrackId": track,
                    "guid": uuid.uuid4().hex,
                    "key": "content",
                    "content": content,
                    "isFull": True,
                    "isFinalize": progress.final,
                    "isError": progress.status == "error",
                },
            )
            self._shown[handle] = (params, content)
        if progress.final:
            self._shown.pop(handle, None)

    async def where(self, track: str) -> dict[str, Any] | None:
        raw = await self.records.get(CARD_NS, f"{self.integration_id}:{track}")
        return json.loads(raw) if raw else None
