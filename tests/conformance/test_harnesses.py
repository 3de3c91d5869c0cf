"""Every platform the gateway loads has a conformance harness (the console, a page for people
at the keyboard with no platform to fake, is tested by tests/console/), each harness a platform
the gateway loads, and the suite runs each in its default mode."""

from __future__ import annotations

from pathlib import Path

from gateway.edge.capabilities import Capability
from gateway.edge.factory import discover_adapters
from tests.support.conformance import harnesses

WITHOUT_HARNESS = {"console"}
TEST_ONLY = "tests.platforms."


def test_every_platform_has_a_harness_and_every_harness_a_platform() -> None:
    found = harnesses()
    platforms = set(discover_adapters())
    covered = {cls.platform for cls in found.values()}
    assert platforms - WITHOUT_HARNESS - covered == set(), "platforms without a harness"
    # A platform that lives only in the tests (tests/platforms/<name>/) is loaded while its
    # harness is open, through its own entry point (tests/platforms/test_one_folder.py).
    test_only = {cls.platform for cls in found.values() if cls.__module__.startswith(TEST_ONLY)}
    assert covered - platforms - test_only == set(), "harnesses of no platform"
    assert {"lark", "dingtalk", "wecom-app", "wecom-aibot"} <= set(found)
    assert all(cls.modes and cls.id == pid for pid, cls in found.items())


def test_every_capability_is_held_to_by_some_behaviour() -> None:
    """A capability no conformance module reads would be a declaration nothing checks."""
    sources = "".join(p.read_text("utf-8") for p in Path(__file__).parent.glob("test_*.py"))
    unread = [c.name for c in Capability if f"Capability.{c.name}" not in sources]
    assert unread == [], unread
