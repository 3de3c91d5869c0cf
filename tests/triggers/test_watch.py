"""Group watch without a running Redis: what a watch matches, how its config is checked, the
input a watch turn gives its expert, and a match while Redis is down."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.config.watch import Watch
from gateway.edge.ingest import IngestUnavailable
from gateway.envelope import Attachment, Chat, Envelope, Sender, Trigger
from gateway.runtime.cli import settings_model
from gateway.runtime.intake import build_intake
from gateway.turns.context import merge_input
from sessions import KeyBuilder, SessionRecords, SessionStore
from tests.support.configs import base_config
from tests.support.helpers import free_port


def message(
    text: str = "",
    *,
    sender: str = "bob",
    chat: str = "team",
    attachments: tuple[str, ...] = (),
    kind: str = "message",
    trigger: Trigger | None = None,
    event_id: str = "e1",
) -> Envelope:
    return Envelope(
        integration_id="console",
        platform="console",
        event_id=event_id,
        kind=kind,  # type: ignore[arg-type]
        chat=Chat(id=chat, type="group"),
        sender=Sender(id=sender, name=sender.title()),
        text=text,
        attachments=tuple(Attachment(kind=k, key=f"k-{k}") for k in attachments),  # type: ignore[arg-type]
        trigger=trigger,
    )


def watch(**fields: Any) -> Watch:
    return Watch.model_validate({"id": "w", **fields})


MATCHES: list[tuple[str, dict[str, Any], Envelope, bool]] = [
    ("keyword, exact", {"keywords": ["P0"]}, message("P0: checkout down"), True),
    ("keyword, other case", {"keywords": ["outage"]}, message("Big OUTAGE in eu-1"), True),
    ("keyword inside a word", {"keywords": ["deploy"]}, message("redeployed it"), True),
    ("any keyword", {"keywords": ["P0", "故障"]}, message("支付系统故障了"), True),
    ("no keyword", {"keywords": ["P0", "outage"]}, message("all good here"), False),
    ("keyword, German ß casefold", {"keywords": ["STRASSE"]}, message("die straße"), True),
    ("regex search", {"regex": r"\berror\s+5\d\d\b"}, message("got error 503 again"), True),
    ("regex, no match", {"regex": r"\berror\s+5\d\d\b"}, message("error 404"), False),
    ("regex is case-sensitive", {"regex": "Error"}, message("error"), False),
    ("regex with (?i)", {"regex": "(?i)error"}, message("ERROR"), True),
    ("regex anchored", {"regex": "^deploy"}, message("please deploy"), False),
    ("sender listed", {"senders": ["bob", "carol"]}, message("hi", sender="carol"), True),
    ("sender not listed", {"senders": ["bob"]}, message("hi", sender="alice"), False),
    ("text type", {"messageTypes": ["text"]}, message("hi"), True),
    ("blank text is no text", {"messageTypes": ["text"]}, message("  "), False),
    ("image type", {"messageTypes": ["image"]}, message("", attachments=("image",)), True),
    ("file, not image", {"messageTypes": ["image"]}, message("x", attachments=("file",)), False),
    (
        "one of the types",
        {"messageTypes": ["audio", "video"]},
        message("", attachments=("video",)),
        True,
    ),
    (
        "keyword AND sender: both hold",
        {"keywords": ["P0"], "senders": ["bob"]},
        message("P0 now", sender="bob"),
        True,
    ),
    (
        "keyword AND sender: sender fails",
        {"keywords": ["P0"], "senders": ["bob"]},
        message("P0 now", sender="alice"),
        False,
    ),
    (
        "regex AND type: type fails",
        {"regex": "down", "messageTypes": ["image"]},
        message("site down"),
        False,
    ),
    (
        "all four hold",
        {"keywords": ["down"], "regex": "site", "senders": ["bob"], "messageTypes": ["image"]},
        message("site down", attachments=("image",)),
        True,
    ),
]


@pytest.mark.parametrize(
    ("match", "envelope", "expected"), [m[1:] for m in MATCHES], ids=[m[0] for m in MATCHES]
)
def test_what_a_watch_matches(match: dict[str, Any], envelope: Envelope, expected: bool) -> None:
    assert watch(match=match).matches(envelope) is expected


def test_a_watch_on_one_chat_ignores_the_others() -> None:
    only_ops = watch(chatId="ops", match={"keywords": ["P0"]})
    assert only_ops.matches(message("P0", chat="ops"))
    assert not only_ops.matches(message("P0", chat="team"))


def test_a_regex_reads_only_the_start_of_a_huge_message() -> None:
    tail = watch(match={"regex": "needle"})
    assert tail.matches(message("x" * 100 + "needle"))
    assert not tail.matches(message("x" * 30_000 + "needle"))


def load(watches: list[dict[str, Any]], **integration: Any) -> Any:
    return load_settings(base_config("x", watches=watches, **integration), model=settings_model())


# Where a watch's problems are reported: the integration and the watch by id.
WATCHES = "integrations[console].watches: "
INC = "integrations[console].watches[inc]: watch 'inc': "


@pytest.mark.parametrize(
    ("watches", "integration", "problem"),
    [
        (
            [{"id": "inc", "match": {"regex": "P0("}}],
            {},
            INC + "match.regex: not a valid regular expression: "
            "missing ), unterminated subpattern at position 2",
        ),
        (
            [{"id": "inc", "match": {"regex": "a" * 501}}],
            {},
            INC + "match.regex: 501 characters long (at most 500)",
        ),
        (
            [{"id": "inc", "match": {}}],
            {},
            INC + "match: needs at least one of keywords, regex, senders, messageTypes",
        ),
        (
            [{"id": "inc", "match": {"keywords": []}}],
            {},
            INC + "match: needs at least one of keywords, regex, senders, messageTypes",
        ),
        (
            [{"id": "inc", "match": {"keywords": ["P0"]}, "cooldownSeconds": -1, "when": 1}],
            {},
            INC + "cooldownSeconds: Input should be greater than or equal to 0; when: unknown key",
        ),
        (
            [{"id": "inc", "match": {"keywords": [""]}}],
            {},
            INC + "match.keywords.0: String should have at least 1 character",
        ),
        (
            [{"id": "inc", "match": {"messageTypes": ["sticker"]}}],
            {},
            INC + "match.messageTypes.0: Input should be "
            "'text', 'image', 'file', 'audio' or 'video'",
        ),
        (
            [{"id": "inc", "match": {"keywords": ["P0"]}, "xpertId": "nobody"}],
            {},
            "integrations[console].watches[inc].xpertId: watch 'inc': 'nobody' names no expert",
        ),
        (
            [{"id": "inc", "match": {"keywords": ["a"]}}, {"id": "inc", "match": {"regex": "b"}}],
            {},
            WATCHES + "watch 'inc': duplicate id",
        ),
        (
            [{"id": "inc", "match": {"keywords": ["P0"]}}],
            {"groupReplyStrategy": "all_messages"},
            WATCHES + "watches apply only with groupReplyStrategy mention_only "
            "(with all_messages every group message starts a turn already)",
        ),
    ],
)
def test_a_bad_watch_is_a_config_error_naming_it(
    watches: list[dict[str, Any]], integration: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load(watches, **integration)
    assert raised.value.problems == [problem]


def test_a_watch_has_defaults_and_its_regex_is_compiled_once() -> None:
    settings = load([{"id": "inc", "match": {"regex": r"P\d"}}])
    [loaded] = settings.integrations[0].watches
    assert (loaded.cooldown_seconds, loaded.enabled, loaded.chat_id) == (300, True, None)
    assert loaded._pattern is not None and loaded._pattern.pattern == r"P\d"
    again = Watch.model_validate_json(loaded.model_dump_json(by_alias=True))
    assert again == loaded and again._pattern is not None


# --- the input of a watch turn -----------------------------------------------------------------
TRIAGE = Trigger(id="incidents", text="Triage this incident.")


def test_a_watch_turn_is_its_instruction_then_the_message_with_its_sender() -> None:
    matched = message("P0: checkout is down", kind="watch", trigger=TRIAGE)
    assert merge_input([matched]) == "Triage this incident.\n\nBob: P0: checkout is down"


def test_merged_matches_carry_the_instruction_once() -> None:
    items = [
        message("P0: checkout is down", kind="watch", trigger=TRIAGE),
        message("P0 still", sender="alice", kind="watch", trigger=TRIAGE, event_id="e2"),
        message("what happened?", sender="carol", event_id="e3"),  # mentioned, same burst
    ]
    assert merge_input(items) == (
        "Triage this incident.\n\nBob: P0: checkout is down\nAlice: P0 still\nCarol: what happened?"
    )


def test_a_watch_without_instruction_gives_the_message_with_its_sender() -> None:
    matched = message("P0", kind="watch", trigger=Trigger(id="bare"))
    assert merge_input([matched]) == "Bob: P0"
    assert merge_input([message("hello")]) == "hello"  # a plain message stays as it was


# --- storage trouble ---------------------------------------------------------------------------
async def test_a_match_while_redis_is_down_is_unavailable_so_the_platform_resends() -> None:
    settings = load([{"id": "inc", "match": {"keywords": ["P0"]}}])
    # nothing listens there; no retries, so the failure is immediate
    client = aioredis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    store = SessionStore(client=client, keys=KeyBuilder(prefix="x"))
    pipeline = build_intake(
        store=store,
        records=SessionRecords(client=client, keys=store.keys),
        settings=lambda: settings,
        adapters={},
        wake=lambda _due, _conv: None,
        spawn=lambda _coro: None,
    ).pipeline
    try:
        with pytest.raises(IngestUnavailable):
            await pipeline.ingest(message("P0: checkout is down"))
    finally:
        await store.close()
        await client.aclose()
