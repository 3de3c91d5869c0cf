"""The committed Grafana dashboard and Prometheus alert rules query only series a live gateway
exports: a replica with a console chat, a Lark long connection (the fake Lark) and a schedule
runs a turn, a schedule fire and card updates, then every PromQL expression of the dashboard
and the rules is checked against its ``/metrics`` - each series there with a sample, each label
it matches or groups by carried by those series. The files' structure is checked too (promtool
and Grafana are not here: the fields they need, by hand)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml

from tests.fakes.lark import FakeLark
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.lark import INTEGRATION, lark_integration, message_event
from tests.support.metrics import Scrape, exprs_of_dashboard, histogram_base, queried_metrics
from tests.support.metrics import scrape as scrape_of
from tests.support.waits import eventually

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "xpert-gateway.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"

# PromQL functions and aggregations the files may use (a typo is an unknown name).
FUNCTIONS = {
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "rate", "irate", "increase",
    "histogram_quantile", "clamp_min", "clamp_max", "label_values", "absent", "delta",
    "avg_over_time", "max_over_time", "min_over_time", "time", "vector", "abs",
}  # fmt: skip
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
EXTERNAL_LABELS = {"instance", "job"}  # added by Prometheus to every scraped series
PANEL_TYPES = {"row", "timeseries", "stat", "state-timeline", "table", "gauge", "bargauge"}
DURATION = re.compile(r"^\d+[smhd]$")


@pytest.fixture
async def fake_lark() -> AsyncIterator[FakeLark]:
    server = FakeLark()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def scrape(
    prefix: str, redis_client: aioredis.Redis, fake_lark: FakeLark, tmp_path: Path
) -> Scrape:
    """``/metrics`` of a replica after a console turn, a Lark turn over the long connection and
    a schedule fire, archived in a SQLite file."""
    cfg = base_config(prefix)
    cfg["archive"] = {"url": f"sqlite:///{tmp_path / 'archive.sqlite3'}", "leaseSeconds": 1}
    cfg["integrations"].append(
        lark_integration(
            fake_lark,
            connectionMode="long_connection",
            verificationToken=None,
            encryptKey=None,
            platformLimits={"callsPerMonth": 10_000},  # the quota's series
        )
    )
    cfg["schedules"] = [
        {"id": "tick", "integrationId": "console", "chatId": "team", "chatType": "group",
         "cron": "*/2 * * * * *", "text": "tick"},
    ]  # fmt: skip
    gw = InProcessGateway(cfg)
    await gw.start()
    base = f"http://127.0.0.1:{gw.port}"
    try:
        await gw.client.send("hello metrics")
        await gw.client.wait_cards()
        await eventually(lambda: fake_lark.sockets)
        frame = await fake_lark.push(message_event("over the socket", message_id="om_dash"))
        assert (await fake_lark.wait_ack(frame))["code"] == 200
        await gw.client.wait_cards("team")  # the schedule fired and its turn ran

        async def ready() -> Scrape | None:
            s = await scrape_of(base)
            turns = s.value("xgw_turns_total", outcome="done")
            lark = s.value("xgw_turns_total", integration=INTEGRATION)
            archived = s.value("xgw_archive_written_total") >= 3
            return s if turns >= 3 and lark >= 1 and archived else None

        return await eventually(ready, timeout=20)
    finally:
        await gw.stop()


def all_exprs() -> list[tuple[str, str]]:
    """(where, expr) of every query in the dashboard (panels, template variables) and rules."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = [("dashboard", e) for e in exprs_of_dashboard(dashboard)]
    for var in dashboard["templating"]["list"]:
        out.append((f"variable {var['name']}", var["query"]["query"]))
    for group in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]:
        out.extend((f"alert {r['alert']}", r["expr"]) for r in group["rules"])
    return out


def check_syntax(expr: str) -> None:
    """Balanced delimiters and known function names (what promtool would reject first)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in bare:
        if ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            assert stack and stack.pop() == pairs[ch], f"unbalanced {ch!r} in {expr!r}"
    assert not stack, f"unclosed {stack} in {expr!r}"
    for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", bare):
        assert name in FUNCTIONS | KEYWORDS, f"unknown function {name!r} in {expr!r}"


def matcher_labels(expr: str) -> dict[str, set[str]]:
    """Label names each selector of ``expr`` matches on: {metric: {label, …}}."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    found: dict[str, set[str]] = {}
    for metric, body in re.findall(r"(xgw_[A-Za-z0-9_:]*)\{([^}]*)\}", bare):
        names = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", body))
        found.setdefault(metric, set()).update(names)
    return found


def grouping_labels(expr: str) -> set[str]:
    out: set[str] = set()
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        out.update(n.strip() for n in clause.split(",") if n.strip())
    return out


async def test_every_series_the_dashboard_and_alerts_query_is_in_metrics(scrape: Scrape) -> None:
    exprs = all_exprs()
    assert len(exprs) > 30
    used: set[str] = set()
    for where, expr in exprs:
        check_syntax(expr)
        names = queried_metrics(expr)
        assert names, f"{where}: no xgw_ series in {expr!r}"
        labels_here: set[str] = set(EXTERNAL_LABELS)
        for name in names:
            base = histogram_base(name)
            if base != name:  # _bucket / _sum / _count: only of a histogram
                assert scrape.types.get(base) == "histogram", f"{where}: {name} is no histogram"
            samples = scrape.of(name)
            assert samples, f"{where}: {name} is not in /metrics"
            used.add(base if base != name else name)
            have = {k for s in samples for k in s.labels}
            labels_here |= have
            for label in matcher_labels(expr).get(name, set()):
                assert label in have | EXTERNAL_LABELS, f"{where}: {name} has no label {label}"
        for label in grouping_labels(expr):
            assert label in labels_here, f"{where}: grouping by {label!r}, which no series has"
    # And the other way: every series the gateway exports is on the dashboard or in a rule.
    exported = {histogram_base(s.name) if scrape.types.get(histogram_base(s.name)) == "histogram"
                else s.name for s in scrape.samples if s.name.startswith("xgw_")}  # fmt: skip
    assert exported - used == set()


async def test_the_long_connection_platform_calls_and_schedule_are_in_the_scrape(
    scrape: Scrape,
) -> None:
    """What the dashboard shows in the scrape above is real, not series at zero."""
    [up] = scrape.of("xgw_connection_state", integration=INTEGRATION, state="connected")
    assert up.value == 1 and up.labels["platform"] == "lark"
    assert scrape.value("xgw_connection_state", integration=INTEGRATION) == 1
    assert scrape.value("xgw_schedule_fires_total", integration="console") >= 1
    assert scrape.value("xgw_platform_api_calls_total", endpoint="reply", code="ok") >= 1
    assert scrape.value("xgw_card_updates_total", kind="update", result="ok") >= 2
    assert scrape.value("xgw_turn_first_card_seconds_count") >= 3
    assert scrape.value("xgw_redis_script_seconds_count") > 0


def test_the_dashboard_is_an_importable_grafana_dashboard() -> None:
    d = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert d["schemaVersion"] >= 36 and d["title"] and d["uid"] == "xpert-gateway"
    [ds] = d["__inputs"]
    assert ds == {**ds, "name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "prometheus"}
    source = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    ids: set[int] = set()
    cells: set[tuple[int, int]] = set()
    for panel in d["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        assert panel["id"] not in ids
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):  # no two panels overlap
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["datasource"] == source
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs)
        assert all(t["datasource"] == source and t["expr"].strip() for t in panel["targets"])
    for var in d["templating"]["list"]:
        assert var["datasource"] == source and var["name"] and var["query"]["query"]
        assert "$" + var["name"] in DASHBOARD.read_text(encoding="utf-8")


def test_the_alert_rules_are_a_valid_rule_file() -> None:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    assert set(doc) == {"groups"}
    names: set[str] = set()
    groups: set[str] = set()
    for group in doc["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"] not in groups
        groups.add(group["name"])
        assert group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"Xgw[A-Z][A-Za-z]+", rule["alert"]) and rule["alert"] not in names
            names.add(rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert "for" not in rule or DURATION.match(rule["for"]), rule["for"]
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]
            # Templates use only $labels and $value (what Prometheus gives an alert).
            for text in rule["annotations"].values():
                for ref in re.findall(r"\{\{(.*?)\}\}", text):
                    assert re.search(r"\$(labels|value)\b", ref), ref
    assert len(names) >= 10
