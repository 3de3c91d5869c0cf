"""The AI card (createAndDeliver, streaming, instance updates, §2.6) when a template is
configured; it shares the send-once claims of the robot messages (``robot.SENT_NS``).

createAndDeliver answers HTTP 200 even when the card reached no chat: each target space has
its own ``result.deliverResults[{spaceType, spaceId, success, errorMsg, carrierId}]``
(https://open.dingtalk.com/document/development/create-and-deliver-cards; SDK model
``CreateAndDeliverResponseBody`` in aliyun/dingtalk-sdk card_1_0). A card delivered nowhere,
or refused outright (a 4xx other than throttling), makes the turn fall back to markdown."""

from __future__ import annotations

import json
import uuid
from typing import Any

import structlog

from adapters.dingtalk.api import DingTalkApi, DingTalkApiError
from adapters.dingtalk.cards import card_content, card_params, fit
from adapters.dingtalk.outbound.robot import SENT_NS, SENT_TTL_MS, reply_extras, target
from gateway.edge.stores import RecordStore
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.dingtalk")

CARD_NS = "dingtalk.card"
CARD_EXISTS = "param.cardAlreadyExist"  # createAndDeliver with an outTrackId already used


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
