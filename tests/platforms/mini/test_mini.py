"""The Mini platform end to end through the whole gateway, on a real Redis: installed only
through its own entry point, a message gets its card answered in place, a button works, a
redelivery is one turn, hostile input is a 4xx, and a burst stays within Mini's published
limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.edge.factory import discover_adapters
from gateway.runtime.cli import settings_model
from tests.platforms.mini.fake import FakeMini
from tests.platforms.mini.harness import (
    ENTRY_POINT,
    INTEGRATION,
    MiniHarness,
    click_event,
    installed,
    message_event,
    mini_config,
    signed,
)
from tests.support.helpers import Gateways
from tests.support.metrics import scrape
from tests.support.spawn import run_gateway


@pytest.fixture
async def fake() -> AsyncIterator[FakeMini]:
    server = FakeMini(limited=True)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def mini(
    monkeypatch: pytest.MonkeyPatch, fake: FakeMini, prefix: str, gateways: Gateways
) -> AsyncIterator[MiniHarness]:
    installed(monkeypatch)
    harness = MiniHarness(fake, await gateways(mini_config(prefix, fake)))
    yield harness
    await harness.close()


def test_mini_is_found_only_through_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "mini" not in discover_adapters()
    installed(monkeypatch)
    assert "mini" in discover_adapters()
    assert "MiniIntegration" in settings_model().model_json_schema()["$defs"]


def test_a_fresh_process_checks_a_mini_config_given_its_entry_point(
    fake: FakeMini, prefix: str, tmp_path: Path
) -> None:
    """A gateway subprocess finds Mini through ``PYTHONPATH`` (as pip's site-packages): ``check``
    takes its config and compares its limits with Mini's published ones."""
    config = mini_config(prefix, fake, platformLimits={"callsPerSecond": 50})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_gateway("check", "--config", str(path), env={"PYTHONPATH": str(ENTRY_POINT)})
    assert result.returncode == 0, result.stderr
    assert f"{INTEGRATION} (mini) -> echo" in result.stdout
    assert "callsPerSecond: 50 is above mini's published 20" in result.stderr


async def test_a_message_gets_its_card_updated_in_place(mini: MiniHarness) -> None:
    event = await mini.say("hello mini")
    card = await mini.card(event)
    assert card.card is not None and "hello mini" in card.card["text"]
    assert len(card.versions) > 1  # sent once, then replaced in place
    assert [b["label"] for b in card.card["buttons"]] == ["New conversation"]


async def test_in_texts_mode_the_answer_is_one_message_sent_final(
    monkeypatch: pytest.MonkeyPatch, fake: FakeMini, prefix: str, gateways: Gateways
) -> None:
    installed(monkeypatch)
    harness = MiniHarness(fake, await gateways(mini_config(prefix, fake, answers="texts")))
    try:
        event = await harness.say("plain please")
        await harness.idle()
    finally:
        await harness.close()
    [reply] = fake.replies_to(event["messageId"])
    assert reply.card is None and "plain please" in reply.text
    assert [call.endpoint for call in fake.answers] == ["send"]  # nothing updated


async def test_a_redelivered_event_is_one_turn(mini: MiniHarness) -> None:
    event = message_event("once")
    assert (await mini.post(event))[0] == 200
    status, answer = await mini.post(event)
    assert status == 200 and answer["status"] == "duplicate"
    await mini.card(event)
    await mini.idle()
    assert len(mini.fake.replies_to(event["messageId"])) == 1


async def test_the_stop_button_stops_the_turn(mini: MiniHarness) -> None:
    event = await mini.say("a long one " * 50)
    running = await mini.card(event, status="running")
    status, answer = await mini.post(click_event(running, "stop"))
    assert status == 200 and answer["ok"], answer
    stopped = await mini.card(event, status="cancelled")
    assert stopped.id == running.id


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"secret": "wrong"}, 401),
        ({"timestamp": 1}, 401),
    ],
)
async def test_a_bad_signature_or_stale_timestamp_is_refused(
    mini: MiniHarness, change: dict[str, Any], status: int
) -> None:
    body, headers = signed(message_event("x"), **change)
    assert (await mini.post_raw(body, headers))[0] == status
    assert mini.fake.messages == {}


async def test_a_signed_body_of_the_wrong_shape_is_a_400(mini: MiniHarness) -> None:
    for body in (b"[1]", b"{", json.dumps({"type": "message", "id": 5}).encode()):
        assert (await mini.post_raw(*signed(body)))[0] == 400


async def burst(mini: MiniHarness) -> None:
    """Thirty turns at once, each in a chat of its own: more sends and updates a second than
    Mini allows; each answered in the end."""
    events = await asyncio.gather(*(mini.say(f"burst {i}", chat=f"c-{i}") for i in range(30)))
    await asyncio.gather(*(mini.card(event) for event in events))


async def test_a_burst_keeps_within_minis_published_limits(mini: MiniHarness) -> None:
    await burst(mini)
    assert mini.fake.throttled == 0


async def test_unpaced_the_same_burst_is_throttled(
    monkeypatch: pytest.MonkeyPatch, fake: FakeMini, prefix: str, gateways: Gateways
) -> None:
    """What the declaration is for: with the limits off, the fake refuses some calls."""
    installed(monkeypatch)
    config = mini_config(prefix, fake, platformLimits={"enabled": False})
    harness = MiniHarness(fake, await gateways(config))
    try:
        await burst(harness)
        metrics = await scrape(harness.base)
    finally:
        await harness.close()
    assert fake.throttled > 0
    calls = "xgw_platform_api_calls_total"
    assert metrics.value(calls, platform="mini", code="rate_limited") == fake.throttled
    assert metrics.value(calls, platform="mini", endpoint="send", code="ok") >= 30
    assert metrics.value("xgw_integration_ready", integration=INTEGRATION, platform="mini") == 1
