"""``xgw_connection_state`` reports the states each adapter declares (``connection_states``):
the core lists none of its own, so a new platform's long connection is counted without a core
edit, and a state its adapter did not declare is counted as ``other``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from adapters.dingtalk import DingTalkAdapter
from adapters.lark import LarkAdapter
from adapters.wecom import WeComAdapter
from gateway.edge.adapter import Adapter
from gateway.ops.collectors import GatewayCollector


class Socketed(Adapter):
    """An adapter of a platform the core has never heard of, with a long connection."""

    connection_states = ("up", "backing-off", "handed-over")

    def __init__(self, state: str | None, *, key: str = "connection") -> None:
        self.settings = SimpleNamespace(platform="slack", id="s")  # type: ignore[assignment]
        self.state, self.key = state, key

    def readiness(self) -> dict[str, Any]:
        info: dict[str, Any] = {"ready": self.state == "up"}
        if self.state is not None:
            info[self.key] = self.state
        return info


class Undeclared(Socketed):
    connection_states = ()


def series(adapters: dict[str, Adapter]) -> dict[tuple[str, str], float]:
    collector = GatewayCollector(
        settings=lambda: None,  # type: ignore[arg-type,return-value]
        store=None,  # type: ignore[arg-type]
        active_runs=lambda: 0,
        adapters=adapters,
        schedules=SimpleNamespace(fired_by={}, missed_by={}),
    )
    [_ready, states] = list(collector._integrations())
    return {(s.labels["integration"], s.labels["state"]): s.value for s in states.samples}


def test_each_declared_state_is_a_series_and_the_current_one_is_1() -> None:
    found = series({"a": Socketed("backing-off"), "b": Socketed("up", key="state")})
    assert found == {
        ("a", "up"): 0.0, ("a", "backing-off"): 1.0, ("a", "handed-over"): 0.0,
        ("b", "up"): 1.0, ("b", "backing-off"): 0.0, ("b", "handed-over"): 0.0,
    }  # fmt: skip


def test_a_state_the_adapter_did_not_declare_is_other() -> None:
    found = series({"a": Socketed("melting"), "u": Undeclared("connected")})
    assert found == {
        ("a", "up"): 0.0, ("a", "backing-off"): 0.0, ("a", "handed-over"): 0.0,
        ("a", "other"): 1.0, ("u", "other"): 1.0,
    }  # fmt: skip


def test_an_adapter_without_a_long_connection_has_no_series() -> None:
    assert series({"w": Socketed(None)}) == {}


def test_the_platforms_declare_what_their_connections_report() -> None:
    assert {"connected", "standby", "connecting", "stopped"} <= set(LarkAdapter.connection_states)
    assert {"connected", "standby", "idle", "closed"} <= set(DingTalkAdapter.connection_states)
    assert {"connected", "standby", "displaced", "refused"} <= set(WeComAdapter.connection_states)
