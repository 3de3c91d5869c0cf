"""What the fuzz tests share: hypothesis settings (seeded), the check every answer meets, and
the strategies of malformed bodies, headers, queries and mutated payloads."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.support.hostile import Hostile

CASES = 1000  # per test; each endpoint meets two or three of them: the module takes ~1.5 min


fuzz = settings(
    max_examples=CASES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check(gw: Hostile, answer: tuple[int, bytes], what: Any) -> None:
    status, body = answer
    assert 200 <= status < 500, (status, body[:300], what)
    problems = gw.problems()
    assert problems == [], (problems, what)
    now = gw.writes()
    if status >= 400:
        assert now == gw.written, ("a refused request wrote to Redis", what)
    gw.written = now  # an accepted event (a fuzzer may make one valid) is stored: that is right


# --- strategies ---------------------------------------------------------------------------------
# Any text, lone surrogates included: they parse from "\ud800" but can never be stored.
any_text = st.text(st.characters() | st.sampled_from(["\ud800", "\udfff", "\x00"]), max_size=30)


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text


json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=10,
)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # ensure_ascii: a lone surrogate travels as "\ud800"


bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(_dumps),
    st.integers(20, 20_000).map(nested),
    st.sampled_from(
        [b"", b"{}", b"[]", b"null", b'{"encrypt": 5}', b'{"encrypt": "AAAA"}', b"<xml/>"]
    ),
)


header_value = st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b)


content_types = st.sampled_from(
    [
        b"application/json",
        b"application/json; charset=utf-8",
        b"application/json; charset=bogus",
        b"text/xml; charset=latin-1",
        b"multipart/form-data; boundary=x",
    ]
)


encodings = st.sampled_from([None, b"gzip", b"deflate", b"identity", b"x-nope"])


AUTH_HEADERS = [
    "X-Lark-Signature",
    "X-Lark-Request-Timestamp",
    "X-Lark-Request-Nonce",
    "timestamp",
    "sign",
    "Authorization",
    "X-Hub-Signature-256",
    "X-GitHub-Event",
    "X-GitHub-Delivery",
    "X-Gitlab-Token",
    "Idempotency-Key",
    "X-Signature-256",
    "X-Delivery-Id",
]


@st.composite
def junk_headers(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    headers = [("Content-Type", draw(content_types))]
    encoding = draw(encodings)
    if encoding is not None:
        headers.append(("Content-Encoding", encoding))
    for name in draw(st.lists(st.sampled_from(AUTH_HEADERS), max_size=4, unique=True)):
        headers.append((name, draw(header_value)))
    return headers


query_values = st.one_of(any_text, st.integers().map(str)).map(
    lambda v: quote(v.encode("utf-8", "surrogatepass"))
)


@st.composite
def junk_query(draw: st.DrawFn, names: list[str]) -> str:
    chosen = draw(st.lists(st.sampled_from(names), max_size=len(names), unique=True))
    return "&".join(f"{n}={draw(query_values)}" for n in chosen)


NASTY = ["\ud800", "a\udfffb", "\ud83d", "\x00", "", " ", "é" * 50, "<a>b</a>", "/new", "1e999"]


nasty_strings = st.sampled_from(NASTY) | any_text


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, node
    if isinstance(node, dict | list):
        for key, value in node.items() if isinstance(node, dict) else enumerate(node):
            yield from _paths(value, (*path, key))


@st.composite
def mutated(draw: st.DrawFn, template: Any) -> Any:
    """``template`` with up to three changes: a string made nasty (lone surrogates, NUL, tags),
    a value anywhere replaced by any JSON value, or a key removed."""
    result = json.loads(json.dumps(template))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(result))
        strings = [p for p, v in paths if isinstance(v, str)]
        op = draw(st.sampled_from(["nasty", "replace", "remove"] if strings else ["replace"]))
        path = draw(st.sampled_from(strings if op == "nasty" else [p for p, _ in paths]))
        if not path:
            result = draw(json_values)
            continue
        parent = result
        for key in path[:-1]:
            parent = parent[key]
        if op == "remove" and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(nasty_strings if op == "nasty" else json_values)
        if not isinstance(result, dict | list):
            break
    return result
