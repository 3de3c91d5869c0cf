"""What a card says (issue 11): a step is ticked only when done, a stopped card says "Stopped"
once and its interrupted step is not a failure, a rejected confirmation ends as "Rejected" (in
a neutral colour on every platform) and Confirm carries the card's earlier steps on."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args

import pytest

from adapters.console.cards import render_card as console_card
from adapters.dingtalk import cards as dingtalk_cards
from adapters.lark import cards as lark_cards
from adapters.wecom import cards as wecom_cards
from gateway.events import Finished, Interrupt, RunEvent, StepEvent, TextDelta
from gateway.experts.base import TurnInput
from gateway.experts.echo import EchoExpert, EchoExpertSettings
from gateway.progress import STATUS_TITLES, Progress, Status
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually

STEPS = ["Reading your message", "Thinking it over", "Writing the answer"]


def _echo() -> EchoExpert:
    settings = EchoExpertSettings.model_validate(
        {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0}
    )
    return EchoExpert(settings=settings)


def _turn(text: str) -> TurnInput:
    return TurnInput(
        turn_id="t1",
        session_id="s1",
        integration_id="console",
        xpert_id="echo",
        text=text,
        chat_id="dm-alice",
        chat_type="p2p",
        sender_id="alice",
    )


async def _fold(progress: Progress, events: Any) -> list[tuple[RunEvent, Progress]]:
    seen: list[tuple[RunEvent, Progress]] = []
    async for event in events:
        progress = progress.apply(event)
        seen.append((event, progress))
    return seen


def _writing_runs_while_text_streams(seen: list[tuple[RunEvent, Progress]]) -> None:
    texts = [i for i, (event, _) in enumerate(seen) if isinstance(event, TextDelta)]
    assert len(texts) >= 2
    for i in texts:
        steps = seen[i][1].steps
        assert steps[-1].title == "Writing the answer" and steps[-1].status == "running", steps
    done = next(
        i
        for i, (e, _) in enumerate(seen)
        if isinstance(e, StepEvent) and e.title == "Writing the answer" and e.status == "done"
    )
    assert done > texts[-1], "the step was ticked before the answer was written"
    assert isinstance(seen[-1][0], Finished)


async def test_echo_ticks_writing_the_answer_only_after_the_answer() -> None:
    expert = _echo()
    seen = await _fold(Progress(turn_id="t1"), expert.run(_turn("hello there, echo")))
    _writing_runs_while_text_streams(seen)
    final = seen[-1][1]
    assert [(s.title, s.status) for s in final.steps] == [(t, "done") for t in STEPS]
    assert final.status == "done"


async def test_echo_confirm_ticks_writing_after_the_answer_and_reject_adds_no_step() -> None:
    expert, turn = _echo(), _turn("go [confirm]")
    asked = await _fold(Progress(turn_id="t1"), expert.run(turn))
    waiting = asked[-1][1]
    assert waiting.status == "waiting" and [s.status for s in waiting.steps] == ["done"]
    resumed = waiting.resumed("confirm")
    seen = await _fold(resumed, expert.resume(turn, "confirm", {"text": turn.text}))
    _writing_runs_while_text_streams(seen)
    assert [(s.title, s.status) for s in seen[-1][1].steps] == [(t, "done") for t in STEPS]
    rejected = await _fold(
        waiting.resumed("reject"), expert.resume(turn, "reject", {"text": turn.text})
    )
    final = rejected[-1][1]
    assert final.status == "rejected" and [s.title for s in final.steps] == STEPS[:1]


def test_a_rejected_confirmation_ends_rejected_not_done() -> None:
    waiting = Progress(turn_id="t", steps=()).apply(StepEvent("s0", "Read", "done"))
    waiting = waiting.apply(Interrupt(prompt="Deploy?"))
    resumed = waiting.resumed("reject")
    assert resumed.status == "running" and resumed.prompt == "" and resumed.decision == "reject"
    assert resumed.steps == waiting.steps and resumed.version > waiting.version
    running = resumed.apply(StepEvent("r0", "Undo", "running")).apply(TextDelta("Not done."))
    final = running.finish("success")
    assert final.status == "rejected" and final.title == "Rejected" and final.final
    assert [b.action_id for b in final.buttons] == ["new"]
    assert [s.status for s in final.steps] == ["done", "done"]  # nothing left spinning
    # Only a run that ends well after Reject is "rejected"; Confirm ends "done".
    assert waiting.resumed("confirm").finish("success").status == "done"
    assert resumed.finish("error", "boom").status == "error"
    assert resumed.finish("cancelled").status == "cancelled"
    assert Progress(turn_id="t").finish("success").status == "done"


def test_a_stop_leaves_the_interrupted_step_stopped_not_failed() -> None:
    running = Progress(turn_id="t").apply(StepEvent("s0", "Read", "done"))
    running = running.apply(StepEvent("s1", "Think", "running"))
    stopped = running.finish("cancelled")
    assert [s.status for s in stopped.steps] == ["done", "cancelled"]
    assert [s.status for s in running.finish("error", "x").steps] == ["done", "failed"]


def _every_status() -> dict[str, Progress]:
    base = Progress(turn_id="t", conversation="c", answer="The answer.")
    base = base.apply(StepEvent("s0", "Read", "done")).apply(StepEvent("s1", "Act", "running"))
    states = {
        "running": base,
        "waiting": base.apply(Interrupt(prompt="Deploy it?")),
        "done": base.finish("success"),
        "rejected": base.resumed("reject").finish("success"),
        "error": base.finish("error", "the model was unreachable"),
        "cancelled": base.finish("cancelled"),
        "ended": replace(base, status="ended"),
    }
    assert set(states) == set(get_args(Status))
    return states


@pytest.mark.parametrize("status", get_args(Status))
def test_the_console_card_says_its_status_once(status: str) -> None:
    card = console_card(_every_status()[status])
    assert card["status"] == status and card["statusText"] == STATUS_TITLES[status]
    if status == "waiting":  # the headline is the question; the status goes beside it
        assert card["title"] == "Deploy it?"
    else:
        assert card["title"] == card["statusText"]


def test_every_platform_shows_a_rejected_card_neutral_and_a_stopped_step_as_stopped() -> None:
    states = _every_status()
    rejected, stopped = states["rejected"], states["cancelled"]
    lark = lark_cards.render_card(rejected, chat_type="p2p")
    assert lark["header"]["template"] == "grey"
    assert lark["header"]["title"]["content"] == "Rejected"
    assert lark_cards.render_card(states["done"], chat_type="p2p")["header"]["template"] == "green"
    params = dingtalk_cards.card_params(rejected)
    assert params["flowStatus"] == "3" and params["statusText"] == "Rejected"  # 3: finished
    [message] = dingtalk_cards.render_messages(rejected, None)
    assert message.text == "The answer.\n\n---\n*Rejected*"
    template = wecom_cards.template_card(rejected, "task")
    assert template["main_title"]["title"] == "Rejected"
    assert wecom_cards.stream_markdown(rejected).startswith("**Rejected**")
    for text in (
        lark_cards.render_card(stopped, chat_type="p2p")["body"]["elements"][0]["content"],
        dingtalk_cards.steps_markdown(stopped),
        wecom_cards.steps_text(stopped),
    ):
        assert "⏹️ Act" in text and "❌" not in text, text


# --- through the console API (an in-process gateway, real Redis) -----------------------------


async def test_confirm_keeps_the_cards_earlier_steps(console: ConsoleClient) -> None:
    await console.send("rename the staging bucket [confirm]")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["steps"] == [{"title": STEPS[0], "status": "done"}]
    assert await console.click("dm-alice", card["id"], "confirm") == 202
    [card] = await console.wait_cards(status="done")
    assert card["card"]["steps"] == [{"title": t, "status": "done"} for t in STEPS]


async def test_reject_ends_the_card_as_rejected(console: ConsoleClient) -> None:
    """Needs the resumed turn to start from ``Progress.resumed(decision)`` (the runner)."""
    await console.send("[confirm] wipe the cache")
    [card] = await console.wait_cards(status="waiting")
    assert await console.click("dm-alice", card["id"], "reject") == 202
    [card] = await console.wait_cards(status="rejected")
    shown = card["card"]
    assert shown["title"] == shown["statusText"] == "Rejected"
    assert shown["answer"] == "Rejected: nothing was done."
    assert [b["actionId"] for b in shown["buttons"]] == ["new"]
    # Its New conversation is a button the API takes.
    assert await console.click("dm-alice", card["id"], "new") == 202
    await eventually(lambda: console.texts(), timeout=10)
