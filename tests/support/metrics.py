"""Reading ``/metrics`` in tests: the scrape parsed by prometheus_client's own text parser, and
the metric names a PromQL expression queries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    """One scrape: every sample, by series name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[Sample] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples.append(Sample(s.name, dict(s.labels), float(s.value)))

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def of(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the matching samples (0 when none match)."""
        return sum(s.value for s in self.of(name, **labels))

    def label_values(self) -> set[str]:
        return {v for s in self.samples for v in s.labels.values()}


async def scrape(base_url: str) -> Scrape:
    async with aiohttp.ClientSession() as http, http.get(base_url + "/metrics") as resp:
        assert resp.status == 200, resp.status
        assert resp.headers["Content-Type"].startswith("text/plain")
        return Scrape(await resp.text())


# A metric selector in PromQL: an ``xgw_`` identifier followed by "{", "[", " ", ")", "," or the
# end, never by "(" (a function). Label names and values are inside braces or quotes, which are
# blanked first.
_SELECTOR = re.compile(r"(?<![A-Za-z0-9_:])(xgw_[A-Za-z0-9_:]*)(?=[{\[ ),]|$)")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^{}]*\}")


def queried_metrics(expr: str) -> set[str]:
    """The ``xgw_*`` series a PromQL expression selects (string literals and label matchers
    removed first, so a label value such as ``"xgw_x"`` is not taken for one)."""
    bare = _BRACES.sub("{}", _STRINGS.sub('""', expr))
    return set(_SELECTOR.findall(bare))


def histogram_base(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def exprs_of_dashboard(dashboard: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append(target["expr"])
        for inner in panel.get("panels", []):  # collapsed rows keep their panels inside
            out.extend(t["expr"] for t in inner.get("targets", []))
    return out
