"""The public AI markdown card, DingTalk's answer without ``cardTemplateId`` (the template of
DingTalk's connector and channel SDKs; tests/fakes/dingtalk.py): created inputting (2) when it
has steps to show, else processing (1) and put to 2 with its first content; the answer streamed
into ``msgContent`` while the status holds; finished at 3 (5 on failure) by one PUT carrying the
whole answer, no call only changing the status and no finalizing stream (the stream SDK's
``ai_finish``); an
app without the card permission answers in markdown and is told once; ``cards: markdown``
makes no card call; Confirm / Reject go as a markdown message beside the card."""

from __future__ import annotations

import re
from typing import Any

from structlog.testing import capture_logs

from adapters.dingtalk.settings import AI_MARKDOWN_TEMPLATE
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.support.dingtalk import robot_message, running
from tests.support.helpers import serve
from tests.support.waits import eventually

CREATE = "/v1.0/card/instances/createAndDeliver"
DEFAULT: dict[str, Any] = {"cards": None}  # the integration's default: no cards key at all


def puts(fake: FakeDingTalk) -> list[dict[str, str]]:
    return [b["cardData"]["cardParamMap"] for b in fake.bodies("/v1.0/card/instances", "PUT")]


def frames(fake: FakeDingTalk) -> list[dict[str, Any]]:
    return fake.bodies("/v1.0/card/streaming", "PUT")


def finished(fake: FakeDingTalk) -> bool:
    return any(p.get("flowStatus") in ("3", "5") for p in puts(fake))


async def test_without_a_template_the_answer_streams_into_the_public_ai_card(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, **DEFAULT) as (fake, h):
        status, _ = await h.post(robot_message(fake, "card please", group=True))
        assert status == 200
        await eventually(lambda: finished(fake), timeout=20)
        [created] = fake.bodies(CREATE)
        assert created["cardTemplateId"] == AI_MARKDOWN_TEMPLATE
        assert created["openSpaceId"] == "dtv1.card//IM_GROUP.cidGROUP"
        first = created["cardData"]["cardParamMap"]
        # Created inputting when it has something to show (else processing, put to inputting
        # with the first content): no call only changes the status.
        assert first["flowStatus"] == ("2" if first["msgContent"] else "1")
        assert first["staticMsgContent"].startswith("[Stop](")
        assert first["sys_full_json_obj"] == '{"order": ["msgContent", "staticMsgContent"]}'
        assert first["config"] == '{"autoLayout": true}'
        shown = frames(fake)
        assert {f["key"] for f in shown} <= {"msgContent"}
        assert not any(f["isFinalize"] for f in shown)  # the final PUT finishes the card
        flows = [p["flowStatus"] for p in puts(fake)]
        assert flows[-1] == "3" and "5" not in flows and flows.count("3") == 1
        assert all("msgContent" in p for p in puts(fake))  # no call only changes the status
        card = fake.cards[created["outTrackId"]]
        assert card.params["msgContent"] == "You said:\n> card please"  # the final put, whole
        # Every card call of the turn: create, at most one inputting PUT, streams, one final PUT.
        calls = [c for c in fake.calls if c.path.startswith("/v1.0/card/")]
        assert len(calls) == 1 + len(puts(fake)) + len(shown)
        assert len(puts(fake)) <= (1 if first["flowStatus"] == "2" else 2)
        assert fake.sent() == []  # no markdown messages beside the card
        assert card.params["staticMsgContent"].startswith("[New conversation](")  # final links


async def test_the_public_cards_stop_link_stops_the_turn(prefix: str, redis_client: Any) -> None:
    slow = [{"id": "echo", "kind": "echo", "stepDelayMs": 400, "charDelayMs": 40}]
    async with running(prefix, experts=slow, **DEFAULT) as (fake, h):
        await h.post(robot_message(fake, "stop me " * 8))
        [created] = await eventually(lambda: fake.bodies(CREATE), timeout=20)
        line = created["cardData"]["cardParamMap"]["staticMsgContent"]
        stop = re.fullmatch(r"\[Stop\]\((\S+)\)", line)
        assert stop is not None
        # The answer is under way (streamed, or put with the status when created processing).
        await eventually(
            lambda: frames(fake) or any(p["flowStatus"] == "2" for p in puts(fake)), timeout=20
        )
        status, _ = await h.click(stop[1])
        assert status == 200
        await eventually(lambda: finished(fake), timeout=20)
        card = fake.cards[created["outTrackId"]]
        assert card.params["flowStatus"] == "3" and "Stopped" in card.params["msgContent"]
        # While running, the card keeps the Stop link it was created with.
        live = {
            p["staticMsgContent"]
            for p in puts(fake)
            if p["flowStatus"] in ("1", "2") and "staticMsgContent" in p
        }
        assert live <= {line}  # (created inputting, the card may need no live PUT at all)


async def test_a_failed_turn_finishes_the_card_at_flow_status_5(
    prefix: str, redis_client: Any
) -> None:
    model = FakeOpenAI(fail_with=[401])
    async for url in serve(model.app()):
        gpt = {"id": "gpt", "kind": "openai", "baseUrl": url + "/v1", "apiKey": OPENAI_KEY,
               "model": "m"}  # fmt: skip
        async with running(prefix, experts=[gpt], xpertId="gpt", **DEFAULT) as (fake, h):
            await h.post(robot_message(fake, "fail please"))
            await eventually(lambda: finished(fake), timeout=20)
            final = puts(fake)[-1]
            assert final["flowStatus"] == "5" and final["msgContent"]  # the error, in one PUT


async def test_without_the_card_permission_turns_answer_in_markdown_and_the_log_says_so_once(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, **DEFAULT) as (fake, h):
        fake.card_permission = False
        with capture_logs() as logs:
            for i in range(2):
                await h.post(robot_message(fake, f"turn {i}"))
                await eventually(lambda n=i: len(fake.sent()) >= 2 * (n + 1), timeout=20)
                await h.idle()
        creates = [c for c in fake.calls if c.path == CREATE]
        assert len(creates) == 1 and creates[0].status == 403  # the second turn asked no card
        told = [e for e in logs if "AI card refused for this app" in str(e["event"])]
        assert (
            len(told) == 1
            and told[0]["code"] == "Forbidden.AccessDenied.AccessTokenPermissionDenied"
        )
        assert [m["text"] for m in fake.sent()][1::2] == [
            "You said:\n> turn 0",
            "You said:\n> turn 1",
        ]


async def test_cards_markdown_keeps_plain_markdown_messages(prefix: str, redis_client: Any) -> None:
    async with running(prefix, cards="markdown") as (fake, h):
        await h.post(robot_message(fake, "plain"))
        await eventually(lambda: len(fake.sent()) == 2, timeout=20)
        await h.idle()
        assert not [c for c in fake.calls if c.path.startswith("/v1.0/card/")]


async def test_an_unknown_template_is_refused_and_the_turn_answers_in_markdown(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, aiCardTemplateId="nope.schema", **DEFAULT) as (fake, h):
        await h.post(robot_message(fake, "which card"))
        await eventually(lambda: len(fake.sent()) == 2, timeout=20)
        [create] = [c for c in fake.calls if c.path == CREATE]
        assert create.status == 400 and fake.cards == {}


async def test_confirm_and_reject_go_as_a_markdown_message_beside_the_card(
    prefix: str, redis_client: Any
) -> None:
    async with running(prefix, **DEFAULT) as (fake, h):
        await h.post(robot_message(fake, "deploy [confirm]"))
        ask = await eventually(lambda: [m for m in fake.sent() if m["buttons"]], timeout=20)
        assert ask[0]["buttons"] == ["Confirm", "Reject"]
        assert "Please confirm" in ask[0]["text"]
        assert puts(fake)[-1]["flowStatus"] == "4"
        status, _ = await h.click(ask[0]["urls"][0])
        assert status == 200
        await eventually(lambda: finished(fake), timeout=20)
        [track] = fake.cards
        assert fake.cards[track].params["msgContent"] == "Confirmed. You said:\n> deploy [confirm]"
