"""DingTalk AI cards end to end (docs/dingtalk.md): createAndDeliver, streaming, instance
updates, card callbacks; and what happens when the card reaches no chat: createAndDeliver
answers HTTP 200 with ``deliverResults[].success: false`` (or refuses with a 4xx), and the
turn then goes out as markdown messages, once."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.dingtalk import FakeDingTalk
from tests.support.dingtalk import robot_message, running
from tests.support.waits import eventually

ROBOT = "/v1.0/im/bot/messages/get"
CARD = "/v1.0/card/instances/callback"
CREATE = "/v1.0/card/instances/createAndDeliver"
CARD_OPTIONS: dict[str, Any] = {"connectionMode": "stream", "cardTemplateId": "tpl.schema"}


def card_frames(fake: FakeDingTalk) -> list[dict[str, Any]]:
    return fake.bodies("/v1.0/card/streaming", "PUT")


async def test_ai_card_is_created_streamed_and_finalized(prefix: str, redis_client: Any) -> None:
    async with running(prefix, **CARD_OPTIONS) as (fake, _h):
        fake.flow_control("/v1.0/card/streaming", times=2)  # throttled: backs off, still lands
        await fake.push("CALLBACK", ROBOT, robot_message(fake, "card please", group=True))
        await eventually(lambda: any(f["isFinalize"] for f in card_frames(fake)))
        [created] = fake.bodies(CREATE)
        assert created["cardTemplateId"] == "tpl.schema" and created["callbackType"] == "STREAM"
        assert created["openSpaceId"] == "dtv1.card//IM_GROUP.cidGROUP"
        assert created["imGroupOpenDeliverModel"]["robotCode"] == "dingappkey"
        params = created["cardData"]["cardParamMap"]
        assert params["showStop"] == "true" and params["conversation"].startswith("dt|")
        frames = card_frames(fake)
        track = created["outTrackId"]
        assert {f["outTrackId"] for f in frames} == {track}
        assert [f["isFinalize"] for f in frames] == [False] * (len(frames) - 1) + [True]
        assert len({f["guid"] for f in frames}) == len(frames) and all(f["isFull"] for f in frames)
        card = fake.cards[track]
        assert card.finalized and card.stream["content"] == "You said:\n> card please"
        assert card.params["flowStatus"] == "3" and card.params["showNew"] == "true"
        assert card.params["showStop"] == "false"
        assert "✅ Writing the answer" in card.params["steps"]
        assert fake.sent() == []  # no markdown messages in card mode


async def test_card_callbacks_stop_and_new(prefix: str, redis_client: Any) -> None:
    slow = [{"id": "echo", "kind": "echo", "stepDelayMs": 400, "charDelayMs": 40}]
    async with running(prefix, experts=slow, **CARD_OPTIONS) as (fake, _h):
        await fake.push("CALLBACK", ROBOT, robot_message(fake, "stop me " * 8))
        [created] = await eventually(lambda: fake.bodies(CREATE))
        assert created["openSpaceId"] == "dtv1.card//IM_ROBOT.staff1"
        params = created["cardData"]["cardParamMap"]

        def click(action: str) -> dict[str, Any]:
            button = {
                "action": action,
                "conversation": params["conversation"],
                "turnId": params["turnId"],
            }
            content = {"cardPrivateData": {"actionIds": [action], "params": button}}
            return {
                "type": "actionCallback",
                "outTrackId": created["outTrackId"],
                "corpId": "dingcorp",
                "userId": "staff1",
                "userIdType": 1,
                "spaceType": "IM_ROBOT",
                "spaceId": "staff1",
                "content": json.dumps(content),
                "extension": "{}",
            }

        stop = await fake.push("CALLBACK", CARD, click("stop"))
        [ack] = await eventually(lambda: fake.stream.acks.get(stop))
        answer = json.loads(ack["data"])["response"]
        assert answer["cardData"]["cardParamMap"]["statusText"] == "Stopping…"
        final = await eventually(lambda: [f for f in card_frames(fake) if f["isFinalize"]])
        assert len(final) == 1
        last = fake.cards[created["outTrackId"]].params
        assert last["status"] == "cancelled" and last["showNew"] == "true"

        new = await fake.push("CALLBACK", CARD, click("new"))
        await eventually(lambda: new in fake.stream.acks)
        [notice] = await eventually(lambda: fake.sent())
        assert notice["text"].startswith("Started a new conversation")
        assert notice["via"] == "webhook"  # the conversation's webhook is still valid


async def answered_in_order(fake: FakeDingTalk, *texts: str) -> list[dict[str, Any]]:
    """Sends each text in one chat and waits for its answer (as a card or in markdown): a chat's
    turns run one after another, so once the last is answered the earlier ones are done."""
    for text in texts:
        await fake.push("CALLBACK", ROBOT, robot_message(fake, text, group=True))

        def answered(text: str = text) -> bool:
            quoted = f"You said:\n> {text}"
            in_card = any(
                c.finalized and c.stream.get("content") == quoted for c in fake.cards.values()
            )
            return in_card or any(m["text"] == quoted for m in fake.sent())

        await eventually(answered)
    return fake.sent()


async def test_card_delivered_nowhere_goes_out_as_markdown_once(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, **CARD_OPTIONS) as (fake, _h):
        fake.refuse_delivery("robot is not in this group")
        sent = await answered_in_order(fake, "no card here", "a card now")
        # Turn 1: the card reached no chat, so "working on it" and the answer went as markdown,
        # each once, and the undelivered card was never updated.
        assert [m["text"] for m in sent] == ["**Working on it…**", "You said:\n> no card here"]
        assert sent[0]["via"] == "webhook" and sent[0]["buttons"] == ["Stop"]
        assert sent[1]["buttons"] == ["New conversation"]
        first, second = (c.body["outTrackId"] for c in fake.calls if c.path == CREATE)
        assert not fake.cards[first].finalized and fake.cards[first].stream == {}
        assert {f["outTrackId"] for f in card_frames(fake)} == {second}
        # Turn 2: delivered, so the card carries it.
        assert fake.cards[second].finalized


async def test_card_refused_outright_goes_out_as_markdown(prefix: str, redis_client: Any) -> None:
    async with running(prefix, **CARD_OPTIONS) as (fake, _h):
        fake.fail(CREATE, status=400, code="param.templateUnpublished")
        sent = await answered_in_order(fake, "template not published")
        assert [m["text"] for m in sent][-1] == "You said:\n> template not published"
        assert fake.cards == {} and card_frames(fake) == []


async def test_card_created_but_answer_lost_is_not_sent_twice(
    prefix: str, redis_client: Any
) -> None:
    """createAndDeliver carried out, its answer lost: the retry is refused with
    ``param.cardAlreadyExist``, which means the card exists; no markdown copy follows."""
    async with running(prefix, **CARD_OPTIONS) as (fake, _h):
        fake.lose_answer(CREATE)
        sent = await answered_in_order(fake, "answer lost")
        attempts = [(c.status, c.body["outTrackId"]) for c in fake.calls if c.path == CREATE]
        assert [status for status, _ in attempts] == [502, 400]
        assert len({track for _, track in attempts}) == 1 and len(fake.cards) == 1
        assert sent == []


async def test_a_confirm_clicked_by_another_group_member_leaves_the_card_and_the_question(
    prefix: str, redis_client: Any
) -> None:
    """Issue 25: in a group, only the asker (or an ``approvers`` id) answers Confirm / Reject.
    Another member's card callback is acked without changing the card, and nothing resumes; the
    asker's click then resumes the run."""
    async with running(prefix, **CARD_OPTIONS) as (fake, _h):
        ask = robot_message(fake, "[confirm] drop the table", group=True)
        await fake.push("CALLBACK", ROBOT, ask)
        [created] = await eventually(lambda: fake.bodies(CREATE))
        track = created["outTrackId"]
        await eventually(lambda: fake.cards[track].params.get("showConfirm") == "true")
        params = created["cardData"]["cardParamMap"]

        def click(user: str) -> dict[str, Any]:
            button = {
                "action": "confirm",
                "conversation": params["conversation"],
                "turnId": params["turnId"],
            }
            content = {"cardPrivateData": {"actionIds": ["confirm"], "params": button}}
            return {
                "type": "actionCallback",
                "outTrackId": track,
                "corpId": "dingcorp",
                "userId": user,
                "userIdType": 1,
                "spaceType": "IM_GROUP",
                "spaceId": "cidGROUP",
                "content": json.dumps(content),
                "extension": "{}",
            }

        other = await fake.push("CALLBACK", CARD, click("staff2"))
        [ack] = await eventually(lambda: fake.stream.acks.get(other))
        assert json.loads(ack["data"])["response"] == {}  # the card is left as it was
        assert fake.cards[track].params["showConfirm"] == "true"
        mine = await fake.push("CALLBACK", CARD, click("staff1"))
        [ack] = await eventually(lambda: fake.stream.acks.get(mine))
        answer = json.loads(ack["data"])["response"]
        assert answer["cardData"]["cardParamMap"]["showConfirm"] == "false"
        card = fake.cards[track]
        await eventually(
            lambda: card.finalized and card.stream["content"].startswith("Confirmed."), timeout=15
        )
