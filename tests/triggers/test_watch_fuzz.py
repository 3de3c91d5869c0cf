"""The watches admin routes fuzzed (hypothesis, derandomized): malformed and ill-typed bodies,
ids and queries get a 4xx (or a 200 for what happens to be a valid watch), never a 5xx, an error
log or a traceback; a refused request writes nothing to Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fuzzing import (
    bodies,
    check,
    fuzz,
    json_values,
    junk_query,
    mutated,
    nasty_strings,
)
from tests.support.hostile import ADMIN_TOKEN, Hostile, hostile_gateway, request

BASE = "/v1.0/integrations/console/watches"
AUTH = [("Authorization", f"Bearer {ADMIN_TOKEN}".encode())]
JSON = [*AUTH, ("Content-Type", b"application/json")]
TEMPLATE = {
    "chatId": "team",
    "match": {"keywords": ["P0", "故障"], "regex": "(?i)down", "senders": ["bob"]},
    "text": "Triage this.",
    "xpertId": "echo",
    "cooldownSeconds": 300,
    "enabled": True,
}
some = settings(parent=fuzz, max_examples=300)


@pytest.fixture(scope="module")
def gw() -> Iterator[Hostile]:
    yield from hostile_gateway()


def test_fuzz_watch_bodies(gw: Hostile) -> None:
    @some
    @given(
        body=st.one_of(bodies, mutated(TEMPLATE).map(lambda v: json.dumps(v).encode())),
        method=st.sampled_from(["PUT", "PATCH"]),
    )
    def run(body: bytes, method: str) -> None:
        answer = request(gw.port, method, f"{BASE}/fz", headers=JSON, body=body)
        check(gw, answer, (method, body[:200]))

    run()


def test_fuzz_watch_ids_and_queries(gw: Hostile) -> None:
    ids = nasty_strings.map(lambda v: quote(v.encode("utf-8", "surrogatepass"), safe=""))

    @some
    @given(
        watch_id=ids,
        method=st.sampled_from(["GET", "PUT", "PATCH", "DELETE"]),
        query=junk_query(["chatId"]),
        body=json_values.map(lambda v: json.dumps(v).encode()),
    )
    def run(watch_id: str, method: str, query: str, body: bytes) -> None:
        target = f"{BASE}?{query}" if method == "GET" else f"{BASE}/{watch_id or 'x'}"
        answer = request(gw.port, method, target, headers=JSON, body=body)
        check(gw, answer, (method, target, body[:200]))

    run()
