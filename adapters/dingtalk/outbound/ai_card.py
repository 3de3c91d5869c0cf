"""The AI card (createAndDeliver, streaming, instance updates, §2.6): the operator's own
template (``cardTemplateId``, our variables and buttons) or, by default, the public AI markdown
card of DingTalk's stream SDK (``msgContent`` streamed, ``flowStatus`` 1 → 2 → 3, or 5 on
failure: ``AIMarkdownCardInstance`` / ``AICardReplier`` in open-dingtalk/dingtalk-stream-sdk-
python card_instance.py l.151-315, card_replier.py l.613-760; the same calls and keys in
DingTalk-Real-AI/dingtalk-openclaw-connector src/services/messaging/card.ts). It shares the
send-once claims of the robot messages (``robot.SENT_NS``).

createAndDeliver answers HTTP 200 even when the card reached no chat: each target space has
its own ``result.deliverResults[{spaceType, spaceId, success, errorMsg, carrierId}]``
(https://open.dingtalk.com/document/development/create-and-deliver-cards; SDK model
``CreateAndDeliverResponseBody`` in aliyun/dingtalk-sdk card_1_0). A card delivered nowhere,
or refused outright (a 4xx other than throttling), makes the turn fall back to markdown. A
refusal that holds for every chat (403: the app lacks Card.Instance.Write, as
open-dingtalk/dingtalk-stream-sdk-python#15 found; ``param.template…``: a template the app may
not use, zfanswer/dify-on-dingtalk#2) is remembered for an hour and logged once, so the turns
meanwhile go out as markdown without a refused call each (the monthly quota counts calls)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import structlog

from adapters.dingtalk.api import DingTalkApi, DingTalkApiError
from adapters.dingtalk.cards import (
    ai_card_create_params,
    ai_card_markdown,
    ai_card_params,
    card_content,
    card_params,
    card_parts,
    first_part,
    fit,
)
from adapters.dingtalk.outbound.robot import SENT_NS, SENT_TTL_MS, reply_extras, target
from gateway.edge.stores import RecordStore
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.dingtalk")

CARD_NS = "dingtalk.card"
CARD_EXISTS = "param.cardAlreadyExist"  # createAndDeliver with an outTrackId already used
REFUSED_KEY = "*refused*"  # the app's card refusal, one record for every chat
REFUSED_TTL_MS = 3_600_000


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
    ``isFinalize`` on the final state (§2.6). ``public``: the public AI markdown card, whose
    final ``flowStatus`` (and whole ``msgContent``) is put after the last stream, as the SDK's
    ``ai_finish`` and the connector's ``finishAICard`` do. An answer longer than one robot
    message shows its first part on the card, marked (1/n); ``update`` returns the rest, which
    the caller sends as markdown messages (``cards.card_parts``)."""

    def __init__(
        self,
        *,
        integration_id: str,
        robot_code: str,
        template_id: str,
        api: DingTalkApi,
        records: RecordStore,
        card_ttl_ms: int,
        public: bool = False,
    ) -> None:
        self.integration_id = integration_id
        self.robot_code = robot_code
        self.template_id = template_id
        self.api = api
        self.records = records
        self.card_ttl_ms = card_ttl_ms
        self.public = public
        self.key = "msgContent" if public else "content"
        self._refusal_told = False
        # handle -> (params, content) last shown, so unchanged parts are not re-sent.
        self._shown: dict[str, tuple[dict[str, str], str]] = {}

    def _content(self, progress: Progress) -> str:
        return ai_card_markdown(progress) if self.public else card_content(progress)

    def _params(self, progress: Progress, content: str, links: str) -> dict[str, str]:
        if self.public:
            return ai_card_params(progress, content, links)
        return card_params(progress)

    def _first_params(self, progress: Progress, links: str) -> dict[str, str]:
        content = fit(first_part(self._content(progress), progress.title))
        if self.public:
            return ai_card_create_params(content, links)
        return {**card_params(progress), "content": content}

    @staticmethod
    def handle_of(key: str) -> str:
        """The handle ``create`` gives the card of the send keyed ``key``."""
        return f"card:{f'xgw-{key}'[:64]}"

    async def _refused_for_all(self, exc: DingTalkApiError, track: str) -> None:
        if exc.status != 403 and not exc.code.startswith("param.template"):
            return
        where = f"{self.integration_id}:{REFUSED_KEY}"
        await self.records.put(CARD_NS, where, exc.code, ttl_ms=REFUSED_TTL_MS)
        if not self._refusal_told:
            self._refusal_told = True
            log.warning(
                "AI card refused for this app; replying with markdown (see docs/dingtalk.md "
                "for the card permissions, or set cards: markdown)",
                integration_id=self.integration_id,
                out_track_id=track,
                **exc.log_fields(),
            )

    async def create(
        self, reply_to: Envelope, progress: Progress, key: str, *, links: str = ""
    ) -> str | None:
        """Create and deliver the turn's card; its handle, or None when the card reached no
        chat and the turn must go out as markdown. The outcome is kept with the claim, so a
        retry (any replica) decides the same way and never sends the card twice. ``links``:
        the public card's buttons as markdown links."""
        handle = self.handle_of(key)
        track = handle.removeprefix("card:")
        claim = f"{self.integration_id}:{track}"
        if not await self.records.put_new(SENT_NS, claim, "pending", ttl_ms=SENT_TTL_MS):
            outcome = await self.records.get(SENT_NS, claim)
            return None if outcome == "markdown" else handle
        if await self.records.get(CARD_NS, f"{self.integration_id}:{REFUSED_KEY}") is not None:
            await self.records.put(SENT_NS, claim, "markdown", ttl_ms=SENT_TTL_MS)
            return None
        group, conversation, staff = target(reply_to)
        body: dict[str, Any] = {
            "cardTemplateId": self.template_id,
            "outTrackId": track,
            "callbackType": "STREAM",
            "cardData": {"cardParamMap": self._first_params(progress, links)},
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
                await self._refused_for_all(exc, track)
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
        first = self._first_params(progress, links)
        shown_text = first_part(self._content(progress), progress.title)
        self._shown[handle] = ({k: first[k] for k in self._params(progress, "", "")}, shown_text)
        bound.info("card created")
        return handle

    async def update(self, handle: str, progress: Progress, *, links: str = "") -> list[str]:
        """Show ``progress`` on the card; the answer's parts past the first when final (to
        be sent as messages), else nothing."""
        track = handle.removeprefix("card:")
        text = self._content(progress)
        parts = card_parts(text, progress.title)
        if not parts:
            content = ""
        else:
            content = parts[0] if progress.final else first_part(text, progress.title, parts)
        params = self._params(progress, content, links)
        shown_params = self._shown.get(handle, ({}, None))[0]
        if params.get("status") != shown_params.get("status"):
            log.info(
                "card state", out_track_id=track, turn_id=progress.turn_id, status=progress.status
            )
        if self.public:
            await self._public_update(handle, params, content, progress.final)
        else:
            await self._own_update(handle, params, content, progress)
        if progress.final:
            self._shown.pop(handle, None)
            return parts[1:]
        return []

    async def _public_update(
        self, handle: str, params: dict[str, str], content: str, final: bool
    ) -> None:
        """The public card in as few calls as its API allows (issue 38): a state whose
        ``flowStatus`` or links change goes as ONE ``PUT /v1.0/card/instances`` carrying them
        with the whole ``msgContent`` (processing -> inputting with the first content, as the
        SDKs' inputting PUT carries it: dingtalk-channel-sdk-python card.py ``set_status``);
        only the answer growing within one status is streamed; and the final state is one PUT
        of ``flowStatus`` 3 (5 failed) with the whole ``msgContent``, as the stream SDK's
        ``AIMarkdownCardInstance.ai_finish`` makes it (card_instance.py l.253-274: no finalizing
        stream). No call only changes the status."""
        track = handle.removeprefix("card:")
        shown_params, shown_content = self._shown.get(handle, ({}, None))
        if final or params != shown_params:
            body = {**params, "msgContent": content} if content or final else params
            await self._put(track, body)
            self._shown[handle] = (params, content or shown_content or "")
        elif content and content != shown_content:
            await self._stream(track, content, final=False, error=False)
            self._shown[handle] = (params, content)

    async def _own_update(
        self, handle: str, params: dict[str, str], content: str, progress: Progress
    ) -> None:
        """The operator's template: status, steps and flags PUT when they change; the answer
        streamed into ``content``, ``isFinalize`` on the final state (§2.6)."""
        track = handle.removeprefix("card:")
        shown_params, shown_content = self._shown.get(handle, ({}, None))
        if params != shown_params:
            await self._put(track, params)
            self._shown[handle] = (params, shown_content or "")
        # An empty content is refused (400 param.stream.contentEmpty, …/api-streamingupdate).
        if content and (content != shown_content or progress.final):
            await self._stream(
                track, content, final=progress.final, error=progress.status == "error"
            )
            self._shown[handle] = (params, content)

    async def _stream(self, track: str, content: str, *, final: bool, error: bool) -> None:
        await self.api.call(
            "PUT",
            "/v1.0/card/streaming",
            {
                "outTrackId": track,
                "guid": uuid.uuid4().hex,
                "key": self.key,
                "content": content,
                "isFull": True,
                "isFinalize": final,
                "isError": error,
            },
        )

    async def _put(self, track: str, params: dict[str, str]) -> None:
        await self.api.call(
            "PUT",
            "/v1.0/card/instances",
            {
                "outTrackId": track,
                "cardData": {"cardParamMap": params},
                "cardUpdateOptions": {"updateCardDataByKey": True},
            },
        )

    async def where(self, track: str) -> dict[str, Any] | None:
        raw = await self.records.get(CARD_NS, f"{self.integration_id}:{track}")
        return json.loads(raw) if raw else None
