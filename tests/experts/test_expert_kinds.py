"""Expert kinds register like adapters: a throwaway kind, installed only as a temporary
distribution with an ``xpert_gateway.experts`` entry point (no core file names it), validates its
settings with the usual messages, appears in the schema, runs a turn and takes a steer through the
console, and is rebuilt from a session snapshot. A reload hands the new settings to one holder."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml
from structlog.testing import capture_logs

from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.experts.base import Expert
from gateway.experts.registry import ExpertKindError, checked_kind, discover_experts
from gateway.runtime.cli import settings_model
from gateway.turns.snapshot import snapshot_of
from tests.fakes.throwaway_expert import STEP, ShoutExpert, ShoutSettings
from tests.support.cli import cli
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.waits import eventually

ROOT = Path(__file__).resolve().parents[2]
SHOUT = "shout = tests.fakes.throwaway_expert:ShoutExpert"


def install(site: Path, *entry_points: str, name: str = "xgw-shout-kind") -> Path:
    """A distribution as pip leaves it in site-packages: ``*.dist-info`` with METADATA and
    ``entry_points.txt``; the module it names is importable from the repository root."""
    dist = site / f"{name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    group = "\n".join(["[xpert_gateway.experts]", *entry_points])
    (dist / "entry_points.txt").write_text(group + "\n")
    return site


@pytest.fixture
def shout_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = install(tmp_path / "site", SHOUT)
    monkeypatch.syspath_prepend(str(site))
    return site


def shout_config(prefix: str, **expert: Any) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId="loud")
    cfg["experts"] = [{"id": "loud", "kind": "shout", "token": "s3cret", **expert}]
    return cfg


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_settings(config, model=settings_model(), env={})
    return info.value.problems


def test_the_kind_is_found_only_through_its_entry_point(shout_kind: Path) -> None:
    kinds = discover_experts()
    assert kinds["shout"] is ShoutExpert
    assert {"echo", "openai", "xpert"} <= set(kinds)  # the built-in kinds register the same way
    assert settings_model().expert_kinds["shout"] is ShoutExpert


def test_without_the_distribution_the_kind_is_unknown(prefix: str) -> None:
    [problem] = problems(shout_config(prefix))
    assert problem.startswith(
        "experts[loud].kind: unknown kind 'shout' (expected one of: 'a2a', 'echo'"
    )


def test_its_settings_are_validated_with_the_usual_messages(shout_kind: Path, prefix: str) -> None:
    settings = load_settings(shout_config(prefix, volume=3), model=settings_model(), env={})
    assert isinstance(settings.experts[0], ShoutSettings) and settings.experts[0].volume == 3
    assert problems(shout_config(prefix, volume=9)) == [
        "experts[loud].volume: Input should be less than or equal to 5"
    ]
    assert problems(shout_config(prefix, colour="red")) == ["experts[loud].colour: unknown key"]
    [unknown] = problems(shout_config(prefix, kind="whisper"))
    assert unknown == (
        "experts[loud].kind: unknown kind 'whisper' "
        "(expected one of: 'a2a', 'echo', 'langgraph', 'openai', 'shout', 'xpert')"
    )


def test_steer_support_comes_from_the_kind(shout_kind: Path, prefix: str) -> None:
    steer = shout_config(prefix)
    steer["integrations"][0]["busyPolicy"] = "steer"
    load_settings(steer, model=settings_model(), env={})  # no xpert expert, and accepted
    echo = base_config(prefix, busyPolicy="steer")
    assert problems(echo) == [
        "integrations[console].busyPolicy: steer needs an expert of kind shout or xpert "
        "(this integration uses echo)"
    ]


def run_cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_schema_and_check_of_a_fresh_process_include_the_kind(
    shout_kind: Path, tmp_path: Path, prefix: str
) -> None:
    result = run_cli(shout_kind, "schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$defs"]["ShoutSettings"]["properties"]["volume"]["maximum"] == 5
    experts = schema["$defs"]["GatewaySettings"] if "GatewaySettings" in schema["$defs"] else schema
    items = experts["properties"]["experts"]["items"]
    assert items["discriminator"]["mapping"]["shout"] == "#/$defs/ShoutSettings"
    path = tmp_path / "shout.yaml"
    path.write_text(yaml.safe_dump(shout_config(prefix)))
    result = run_cli(shout_kind, "check", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "loud (shout)" in result.stdout and "s3cret" not in result.stdout


async def test_a_turn_runs_end_to_end_through_the_console(
    shout_kind: Path, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(shout_config(prefix, volume=2))
    await console.send("hello there")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "HELLO THERE!!"
    assert card["card"]["steps"] == [{"title": STEP, "status": "done"}]


async def test_a_follow_up_is_steered_into_the_running_turn(
    shout_kind: Path, make_gateway: Callable[..., Any], prefix: str
) -> None:
    config = shout_config(prefix, steerWaitSeconds=20)
    config["integrations"][0]["busyPolicy"] = "steer"
    console = await make_gateway(config)
    await console.send("write the plan")

    async def breathing() -> bool:  # the expert runs and waits for a follow-up
        cards = await console.cards()
        return bool(cards) and cards[0]["card"]["steps"] == [{"title": STEP, "status": "running"}]

    await eventually(breathing)
    await console.send("add the budget")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "WRITE THE PLAN ADD THE BUDGET!"
    assert len(await console.cards()) == 1  # one turn, one card


def test_a_session_snapshot_rebuilds_the_kind_with_the_current_secrets(
    shout_kind: Path, prefix: str
) -> None:
    settings = load_settings(shout_config(prefix, volume=4), model=settings_model(), env={})
    integ, loud = settings.integrations[0], settings.experts[0]
    text, _digest = snapshot_of(integ, loud, "loud")
    stored = json.loads(text)["expert"]
    assert stored["token"] == "**********"  # snapshots hold no secrets
    for rebuilt in (settings.expert_from_snapshot(stored),):
        assert isinstance(rebuilt, ShoutSettings) and rebuilt.volume == 4
        assert rebuilt.token is not None and rebuilt.token.get_secret_value() == "s3cret"
    # The config now has an echo expert under that id: its (lack of) secrets are not mixed in.
    other = copy.deepcopy(shout_config(prefix))
    other["experts"] = [{"id": "loud", "kind": "echo"}]
    changed = load_settings(other, model=settings_model(), env={})
    kept = changed.expert_from_snapshot(stored)
    assert isinstance(kept, ShoutSettings) and kept.token is not None
    assert kept.token.get_secret_value() == "**********"


def test_a_snapshot_of_a_kind_no_longer_installed_is_refused(prefix: str) -> None:
    stored = {"id": "loud", "kind": "shout", "volume": 1}
    settings: Settings = load_settings(base_config(prefix), model=settings_model(), env={})
    with pytest.raises(ValueError, match="expert kind 'shout' is not installed"):
        settings.expert_from_snapshot(stored)


@pytest.mark.parametrize(
    ("entry_point", "expected"),
    [
        (
            "yell = tests.fakes.throwaway_expert:ShoutExpert",
            "expert kind 'yell' (tests.fakes.throwaway_expert:ShoutExpert): "
            "its class says kind 'shout'",
        ),
        (
            "shout = tests.fakes.throwaway_expert:ShoutSettings",
            "expert kind 'shout' (tests.fakes.throwaway_expert:ShoutSettings): "
            "not a subclass of gateway.experts.Expert",
        ),
    ],
)
def test_a_broken_kind_is_refused_saying_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_point: str, expected: str
) -> None:
    monkeypatch.syspath_prepend(str(install(tmp_path / "site", entry_point, name="xgw-broken")))
    with pytest.raises(ExpertKindError) as info:
        discover_experts()
    assert str(info.value) == expected


def test_a_kind_must_implement_the_interface_and_tag_its_settings() -> None:
    class Unfinished(Expert):
        kind = "half"
        settings_model = ShoutSettings

    class Mislabelled(ShoutExpert):
        kind = "other"

    with pytest.raises(ExpertKindError, match="does not implement create, resume, run"):
        checked_kind("half", Unfinished)
    with pytest.raises(ExpertKindError, match=r"ShoutSettings.kind must be Literal\['other'\]"):
        checked_kind("other", Mislabelled)


async def test_a_reload_replaces_the_settings_in_the_one_holder_everything_reads(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    config = base_config(prefix)
    config["admin"] = {"token": "old-admin-token-0001"}
    gw = InProcessGateway(config)
    await gw.start()
    try:
        gateway, client = gw.gateway, gw.client
        await client.send("before")
        [card] = await client.wait_cards()
        assert card["card"]["answer"].startswith("You said:")

        new = copy.deepcopy(config)
        new["experts"][0]["replyPrefix"] = "Heard:"
        new["admin"] = {"token": "new-admin-token-0002"}
        new["runtime"]["leaseSeconds"] = 30
        with capture_logs() as logs:
            await gateway.reload(load_settings(new, model=settings_model(), env={}))
        current = gateway.live()
        assert gateway.settings is current
        assert gateway.runner.settings is current and gateway.pipeline.settings is current
        assert current.runtime == gw.settings.runtime  # restart-only: the running values stay
        assert "runtime changes apply after a restart" in logs[0]["event"]
        assert current.expert("echo") == new_expert(new)

        async def admin(token: str) -> int:
            headers = {"Authorization": f"Bearer {token}"}
            url = f"{client.base}/v1.0/chats/console/dm-alice/memory"
            async with client.http.get(url, headers=headers) as resp:
                return resp.status

        assert (
            await admin("old-admin-token-0001") == 401
        )  # the admin API reads the holder per request
        assert await admin("new-admin-token-0002") == 200
        await client.send("after", chat="dm-bob", sender="bob")
        [bob] = await client.wait_cards(chat="dm-bob")
        assert bob["card"]["answer"].startswith("Heard:")
    finally:
        await gw.stop()


def new_expert(config: dict[str, Any]) -> Any:
    return load_settings(config, model=settings_model(), env={}).experts[0]


def test_check_accepts_the_agent_server_example_and_refuses_a_bad_expert(tmp_path: Path) -> None:
    example = ROOT / "config/examples/agent-servers.yaml"
    ok = cli("check", "--config", str(example))
    assert ok.returncode == 0, ok.stderr
    assert "  research (langgraph)\n" in ok.stdout and "  helpdesk (a2a)\n" in ok.stdout
    assert "Bearer" not in ok.stdout + ok.stderr  # a header's value is a secret
    text = example.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        text.replace('"${A2A_URL:-http://127.0.0.1:9999}"', "ftp://agent").replace(
            "    assistantId: agent", "    assistantId: agent\n    showNodez: true"
        )
    )
    refused = cli("check", "--config", str(bad))
    assert refused.returncode != 0
    assert "experts[helpdesk].url" in refused.stderr + refused.stdout
    assert "experts[research].showNodez" in refused.stderr + refused.stdout
