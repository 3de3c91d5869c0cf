"""Hostile input at ``POST /api/events/{integrationId}/{source}``: a 4xx and one log line, never
a 5xx or a traceback, and nothing stored, against the one gateway of tests.support.hostile (its own
Redis, whose whole key set and write counter are checked). The fuzzing is in test_fuzz.py."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support.hostile import Hostile, event_signed, hostile_gateway, request

SOURCES = ["github", "gitlab", "generic"]
DEEP = b"[" * 100_000 + b"]" * 100_000
SIGNATURE_HEADERS = {
    "github": "X-Hub-Signature-256",
    "gitlab": "X-Gitlab-Token",
    "generic": "X-Signature-256",
}


@pytest.fixture(scope="module")
def gw() -> Iterator[Hostile]:
    yield from hostile_gateway()


def refused(gw: Hostile, answer: tuple[int, bytes], status: int) -> None:
    got, body = answer
    assert got == status, (got, body[:200])
    assert gw.snapshot() == gw.keys and gw.writes() == gw.written
    assert gw.problems() == []


@pytest.mark.parametrize("source", SOURCES)
def test_signed_bodies_nested_too_deeply_are_400s(gw: Hostile, source: str) -> None:
    target, headers = event_signed(source, DEEP)
    refused(gw, request(gw.port, "POST", target, headers=headers, body=DEEP), 400)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("value", [b"\xff\xfe", "é".encode(), "签名".encode(), b""])
def test_signature_headers_that_are_not_ascii_or_empty_are_401s(
    gw: Hostile, source: str, value: bytes
) -> None:
    body = json.dumps({"key": "k", "title": "t", "status": "open"}).encode()
    target, headers = event_signed(source, body)
    sent = [(k, v.encode()) for k, v in headers.items() if k != SIGNATURE_HEADERS[source]]
    sent.append((SIGNATURE_HEADERS[source], value))
    refused(gw, request(gw.port, "POST", target, headers=sent, body=body), 401)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize(
    ("content", "body"),
    [
        ({"Content-Type": "application/json"}, b'{"title": "caf\xe9"}'),  # Latin-1, not UTF-8
        ({"Content-Type": "application/json; charset=bogus"}, b"{}"),
        ({"Content-Type": "application/json"}, b'{"key": "\\ud800", "status": "x"}'),
    ],
)
def test_signed_bodies_that_do_not_decode_are_400s(
    gw: Hostile, source: str, content: dict[str, str], body: bytes
) -> None:
    target, headers = event_signed(source, body)
    refused(gw, request(gw.port, "POST", target, headers={**headers, **content}, body=body), 400)


@pytest.mark.parametrize(
    "header",
    [("X-GitHub-Delivery", "a b"), ("X-GitHub-Delivery", "x" * 200), ("X-GitHub-Event", "Pull")],
)
def test_github_delivery_headers_that_are_not_ids_are_400s(
    gw: Hostile, header: tuple[str, str]
) -> None:
    body = b'{"action": "opened"}'
    target, headers = event_signed("github", body)
    headers[header[0]] = header[1]
    refused(gw, request(gw.port, "POST", target, headers=headers, body=body), 400)


def test_a_generic_key_with_control_characters_is_a_400(gw: Hostile) -> None:
    body = json.dumps({"key": "a\nb", "title": "t", "status": "open"}).encode()
    target, headers = event_signed("generic", body)
    refused(gw, request(gw.port, "POST", target, headers=headers, body=body), 400)
