"""Steered messages and resumes with the xpert backend, end to end against the fake XpertAI
(tests/fakes/xpertai.py): console -> daemon -> fake XpertAI -> card. How the real server takes a
steer (one per model step; the rest queued at the run's end and run by a ``send`` carrying the
clientMessageId) is in the fake's docstring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import gateway.experts.xpert as xpert_module
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_agent import Run
from tests.support.waits import eventually
from tests.support.xpert import config


def _texts(run: Run) -> str:
    parts = [p["data"] for _, p in run.log if p["type"] == "message"]
    return "".join(p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text")


def _tool_done(fake: FakeXpertAI) -> bool:
    """The tool ended: the next (last) model call is under way, past taking steers."""
    return any(
        p["type"] == "message"
        and isinstance(p["data"], dict)
        and p["data"].get("type") == "component"
        and p["data"]["data"].get("status") == "success"
        for run in fake.runs.values()
        for _, p in run.log
    )


def _sends(fake: FakeXpertAI) -> list[dict[str, Any]]:
    return [r["input"] for r in fake.requests if r["input"]["action"] == "send"]


async def test_a_steered_message_reaches_the_running_execution(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("write the plan [hold]")  # the tool runs until released
    await eventually(lambda: [r for r in fake.runs.values() if r.log])
    await console.send("add the budget")
    await eventually(lambda: fake.steers)
    fake.release()  # the next model step takes the steer
    [card] = await console.wait_cards()
    [run] = fake.runs.values()
    [steer] = fake.steers
    assert steer["mode"] == "steer" and steer["target"]["executionId"] == run.id
    assert steer["message"]["input"] == {"input": "add the budget"}
    assert card["card"]["answer"] == (
        "Hello from xpert [write the plan [hold]] (steer: add the budget)"
    )
    assert len(fake.runs) == 1  # no second run


async def test_a_steer_the_run_ends_before_taking_is_answered_in_the_same_card(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("plan [late]")
    await eventually(lambda: any(_texts(r) for r in fake.runs.values()))  # the last step
    await console.send("add the budget")
    await eventually(lambda: fake.steers)
    fake.release()
    [card] = await console.wait_cards()
    [steer] = fake.steers
    client_id = steer["message"]["clientMessageId"]
    # the queued follow-up was run by a send carrying its clientMessageId
    assert _sends(fake)[-1]["message"]["clientMessageId"] == client_id
    assert card["card"]["answer"] == (
        "Hello from xpert [plan [late]]\n\nHello from xpert [add the budget]"
    )
    assert not fake.threads[fake.requests[0]["thread"]].pending()


async def test_two_steers_the_run_ends_before_taking_are_each_sent_on_their_own(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    """XpertAI runs only the one follow-up a send matches (persisted-follow-up.ts), with the
    text it kept: one send per steered message, each with its own clientMessageId."""
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("plan [late]")
    await eventually(lambda: any(_texts(r) for r in fake.runs.values()))
    await console.send("add the budget")
    await eventually(lambda: len(fake.steers) == 1)
    await console.send("and the risks")
    await eventually(lambda: len(fake.steers) == 2)
    fake.release()
    [card] = await console.wait_cards()
    steered = [s["message"]["clientMessageId"] for s in fake.steers]
    sends = _sends(fake)
    assert [s["message"]["clientMessageId"] for s in sends[1:]] == steered
    assert card["card"]["answer"] == (
        "Hello from xpert [plan [late]]\n\nHello from xpert [add the budget]"
        "\n\nHello from xpert [and the risks]"
    )
    assert not fake.threads[fake.requests[0]["thread"]].pending()


async def test_a_failed_run_shows_its_failure_then_answers_the_steered_messages(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("plan [fail] [late]")
    await eventually(lambda: _tool_done(fake))  # the failing model call is under way
    await console.send("add the budget")
    await eventually(lambda: fake.steers)
    fake.release()
    [card] = await console.wait_cards()
    assert {"title": "The run failed: Model quota exceeded", "status": "failed"} in card["card"][
        "steps"
    ]
    assert card["card"]["answer"].strip() == "Hello from xpert [add the budget]"
    [steer] = fake.steers
    assert _sends(fake)[-1]["message"]["clientMessageId"] == steer["message"]["clientMessageId"]


async def test_the_answer_after_a_failed_run_without_text_has_no_leading_blank_lines(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, busyPolicy="steer"))
    await console.send("plan [fail] [late]")
    await eventually(lambda: _tool_done(fake))
    await console.send("add the budget")
    await eventually(lambda: fake.steers)
    fake.release()
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Hello from xpert [add the budget]"


async def test_a_resume_read_after_a_stale_complete_still_shows_the_resumed_run(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client stopped reading at on_conversation_end (the interrupted run's ``complete``
    came late): the resume's Last-Event-ID is older than that ``complete``, which the server
    replays first; the client then rejoins the resumed execution after it."""
    monkeypatch.setattr(xpert_module, "END_GRACE_S", 0.2)
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("mail the report [interrupt] [hold-complete]")
    [card] = await console.wait_cards(status="waiting")
    [run] = fake.runs.values()
    assert not any(p["type"] == "complete" for _, p in run.log)
    ended = next(sid for sid, p in run.log if p.get("event") == "on_conversation_end")
    fake.release()
    complete = await eventually(
        lambda: next((sid for sid, p in run.log if p["type"] == "complete"), None)
    )
    await console.click("dm-alice", card["id"], "confirm")
    [card] = await console.wait_cards(status="done")
    assert card["card"]["answer"] == "Email sent to the team."
    assert card["card"]["tools"] == [{"title": "Send email", "status": "done", "detail": ""}]
    assert fake.connections[-2:] == [(run.id, ended), (run.id, complete)]
