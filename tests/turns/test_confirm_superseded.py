"""A card that asked for Confirm / Reject when a newer message starts a turn in the same
conversation: the newer message took over, so the card says so (no buttons left to press)
instead of "Please confirm" forever, and a late click on it is told nothing waits. Through the
console's HTTP API against a real daemon and Redis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.turns.approval import TOOK_OVER
from tests.support.configs import base_config


async def test_a_newer_message_takes_over_a_pending_confirmation(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(base_config(prefix, summaryWindowSeconds=0))
    await console.send("please [confirm] deploy to production")
    [asked] = await console.wait_cards(status="waiting")
    assert {b["actionId"] for b in asked["card"]["buttons"]} == {"confirm", "reject"}
    await console.send("no wait, show me the diff first")
    await console.wait_cards(count=2, status=None)
    await console.idle()
    old, new = await console.cards()
    assert old["id"] == asked["id"]
    assert old["card"]["status"] == "cancelled"
    assert old["card"]["error"] == TOOK_OVER
    assert {b["actionId"] for b in old["card"]["buttons"]} & {"confirm", "reject"} == set()
    assert new["card"]["status"] == "done" and "show me the diff" in new["card"]["answer"]
    # A click on the old card's Confirm (a stale page) runs nothing.
    await console.click("dm-alice", asked["id"], "confirm")
    await console.idle()
    cards = await console.cards()
    assert [c["card"]["status"] for c in cards] == ["cancelled", "done"]
    assert "Confirmed." not in str(cards)


async def test_confirm_before_any_newer_message_still_resumes(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway()
    await console.send("please [confirm] deploy")
    [asked] = await console.wait_cards(status="waiting")
    assert await console.click("dm-alice", asked["id"], "confirm") == 202
    [card] = await console.wait_cards(status="done")
    assert card["card"]["answer"].startswith("Confirmed.")
