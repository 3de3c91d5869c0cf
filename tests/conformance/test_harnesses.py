"""Every platform the gateway loads has a conformance harness (the console, a page for people
at the keyboard with no platform to fake, is tested by tests/console/), each harness a platform
the gateway loads, and the suite runs each in its default mode."""

from __future__ import annotations

from gateway.edge.factory import discover_adapters
from tests.support.conformance import harnesses

WITHOUT_HARNESS = {"console"}


def test_every_platform_has_a_harness_and_every_harness_a_platform() -> None:
    found = harnesses()
    platforms = set(discover_adapters())
    covered = {cls.platform for cls in found.values()}
    assert platforms - WITHOUT_HARNESS - covered == set(), "platforms without a harness"
    assert covered - platforms == set(), "harnesses of no platform"
    assert {"lark", "dingtalk", "wecom-app", "wecom-aibot"} <= set(found)
    assert all(cls.modes and cls.id == pid for pid, cls in found.items())
