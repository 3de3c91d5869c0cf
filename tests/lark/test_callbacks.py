"""Lark card callbacks through the webhook: the answer carries a toast and, where the click
changes the card, the updated card (applied by the fake as Lark would); the run then keeps
updating the card by PATCH; duplicate callbacks are deduplicated (issue 3)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import (
    LarkHarness,
    answer,
    card_click,
    final_card,
    lark_config,
    message_event,
    reply_to,
)
from tests.support.waits import eventually


def buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["behaviors"][0]["value"]["action"]: e["behaviors"][0]["value"]
        for e in card["body"]["elements"]
        if e["tag"] == "button"
    }


def card_with(fake: FakeLark, message_id: str, action: str) -> Callable[[], Any]:
    """The reply card to ``message_id`` once it shows the ``action`` button: (card id, value)."""

    def check() -> Any:
        replies = reply_to(fake, message_id)
        if not replies:
            return None
        value = buttons(fake.card_of(replies[0])).get(action)
        return (replies[0], value) if value else None

    return check


async def test_stop_click_answers_with_a_stopping_card_then_the_run_stops(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark(slow=True)
    await lark.post(message_event("please write a long answer " * 3, message_id="om_s1"))
    card_id, value = await eventually(card_with(fake, "om_s1", "stop"))
    click = card_click(value, message_id=card_id, event_id="cb-stop-1")
    status, body = await lark.post(click)
    assert status == 200 and body["toast"]["content"] == "Stopping…"
    card = body["card"]["data"]
    assert card["header"]["title"]["content"] == "Stopping…"
    assert buttons(card) == {}
    assert "streaming_mode" not in card["config"] and card["config"]["update_multi"] is True
    fake.apply_callback(card_id, body)
    status, again = await lark.post(click)
    assert status == 200 and again["toast"]["content"] == "Already received"
    stopped = await eventually(final_card(fake, "om_s1", "Stopped"))  # PATCHed on from there
    assert stopped["header"]["template"] == "grey"
    assert set(buttons(stopped)) == {"new"}


async def test_a_callback_card_shown_after_the_final_patch_is_replaced_again(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    """Lark applies a callback's card when it gets the answer; should that happen after the run's
    final PATCH (a Stop click racing the end), the final card is sent once more after the
    callback window, so the message never stays on "Stopping…"."""
    lark = await make_lark(slow=True)
    await lark.post(message_event("please write a long answer " * 3, message_id="om_r1"))
    card_id, value = await eventually(card_with(fake, "om_r1", "stop"))
    status, body = await lark.post(card_click(value, message_id=card_id, event_id="cb-race-1"))
    assert status == 200 and body["card"]["data"]["header"]["title"]["content"] == "Stopping…"
    stopped = await eventually(final_card(fake, "om_r1", "Stopped"))
    patches = len(fake.of("patch"))
    fake.apply_callback(card_id, body)  # the answer lands late, over the final card
    assert fake.card_of(card_id)["header"]["title"]["content"] == "Stopping…"
    again = await eventually(final_card(fake, "om_r1", "Stopped"), timeout=15)
    assert again == stopped and len(fake.of("patch")) == patches + 1


async def test_new_click_answers_with_an_ended_card(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark()
    await lark.post(message_event("first", message_id="om_n1"))
    done = await eventually(final_card(fake, "om_n1"))
    card_id = reply_to(fake, "om_n1")[0]
    status, body = await lark.post(card_click(buttons(done)["new"], message_id=card_id))
    assert status == 200 and body["toast"]["type"] == "success"
    card = body["card"]["data"]
    assert buttons(card) == {} and answer(card) == answer(done)
    assert any("ended" in e.get("content", "") for e in card["body"]["elements"])
    fake.apply_callback(card_id, body)

    def new_notice() -> Any:
        return [
            c
            for c in fake.of("reply")
            if c.body["msg_type"] == "text" and "new conversation" in c.body["content"]
        ]

    await eventually(new_notice)
    # A second click on the (old) button no longer changes the card: a toast only.
    status, body = await lark.post(card_click(buttons(done)["new"], message_id=card_id))
    assert status == 200 and "card" not in body


async def test_confirm_click_answers_continuing_then_the_run_resumes(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark()
    await lark.post(message_event("[confirm] deploy", message_id="om_c1"))
    waiting = await eventually(final_card(fake, "om_c1", "Please confirm: shall I go ahead?"))
    values = buttons(waiting)
    assert set(values) == {"confirm", "reject"}
    await eventually(lambda: fake.of("reaction_delete"))  # waiting for the user, not typing
    card_id = reply_to(fake, "om_c1")[0]
    status, body = await lark.post(card_click(values["confirm"], message_id=card_id))
    assert status == 200 and body["toast"]["content"] == "Confirmed"
    card = body["card"]["data"]
    assert card["header"]["title"]["content"] == "Continuing…" and buttons(card) == {}
    fake.apply_callback(card_id, body)
    done = await eventually(final_card(fake, "om_c1"))
    assert "deploy" in answer(done)
    assert len(reply_to(fake, "om_c1")) == 1


async def test_click_on_an_unknown_or_cardkit_card_answers_a_toast_only(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark(slow=True, cardMode="cardkit")
    await lark.post(message_event("streamed " * 4, message_id="om_k2"))
    card_id, value = await eventually(card_with(fake, "om_k2", "stop"))
    status, body = await lark.post(card_click(value, message_id=card_id))
    # CardKit cards stream: a callback cannot update them at once, the renderer does.
    assert status == 200 and body["toast"]["content"] == "Stopping…" and "card" not in body
    await eventually(final_card(fake, "om_k2", "Stopped"), timeout=20)
    status, body = await lark.post(card_click(value, message_id="om_unknown"))
    assert status == 200 and "card" not in body


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    model = FakeOpenAI()
    async for url in serve(model.app()):
        yield model, url + "/v1"


async def test_retry_click_is_accepted_and_the_failed_turn_runs_again_in_its_card(
    openai: tuple[FakeOpenAI, str], fake: FakeLark, prefix: str, redis_client: Any
) -> None:
    """Every button a card shows must be accepted: Retry on a failed turn's card used to be
    answered 400 ("not a button of ours"), which Lark shows the user as an error."""
    model, url = openai
    model.fail_with = [500]
    config = lark_config(prefix, fake, xpertId="gpt")
    config["experts"] = [
        {
            "id": "gpt",
            "kind": "openai",
            "baseUrl": url,
            "apiKey": OPENAI_KEY,
            "model": "m",
            "retries": 0,
        }
    ]
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    try:
        await lark.post(message_event("try me", message_id="om_rt1"))
        failed = await eventually(final_card(fake, "om_rt1", "Something went wrong"))
        assert set(buttons(failed)) == {"retry", "new"}
        card_id = reply_to(fake, "om_rt1")[0]
        status, body = await lark.post(card_click(buttons(failed)["retry"], message_id=card_id))
        assert status == 200 and body["toast"]["content"] == "Retrying…"
        card = body["card"]["data"]
        assert card["header"]["title"]["content"] == "Retrying…" and buttons(card) == {}
        fake.apply_callback(card_id, body)
        done = await eventually(final_card(fake, "om_rt1"), timeout=15)
        assert answer(done) == "Echo: try me" and len(reply_to(fake, "om_rt1")) == 1
    finally:
        await lark.close()
