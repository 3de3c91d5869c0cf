"""The key builder (sessions/keys.py): a conversation's keys are
``<prefix>:{<shard tag>}:<conversation>:<part>``, its shard's due index
``<prefix>:{<shard tag>}:due``, and the builders that make a message's keys from one look-up
(``intake``, ``budget_intake``) give exactly the keys of the one-key builders, in the scripts'
order, however many conversations the bounded cache has seen; and no two conversations (or two
of a conversation's keys) share a key, whatever their ids hold (issue 25). An app's platform
budget keys are ``<prefix>:pb:{<app>}:<part>``: one slot per app, one key per thing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from gateway.conversation import ConversationId
from sessions import keys as keys_module
from sessions.keys import KeyBuilder, shard_of, shard_tag
from tests.support.helpers import id_encoded

IDS = st.text(min_size=1, max_size=40)
PARTS = ("dedup", "burst", "burstmeta", "turn", "lease", "binding", "cancel", "evcard", "watch")
PARTS += ("bturns", "bsender", "btokens", "brefused")


def arg(value: str) -> str:
    """A key's argument (event, sender, watch id, day): an encoded id part that is never a
    part's name (its first letter then encoded too)."""
    part = id_encoded(value)
    return f"%{ord(part[0]):02X}{part[1:]}" if part in PARTS else part


def spelled(prefix: str, shards: int, conv: str, part: str) -> str:
    """A conversation's key, spelled out from the layout rather than by the builder."""
    return f"{prefix}:{{{shard_tag(shard_of(conv, shards), shards)}}}:{conv}:{part}"


@settings(max_examples=200, deadline=None)
@given(
    conv=IDS,
    event_id=IDS,
    sender=IDS,
    integration=IDS,
    day=st.sampled_from(["2026-12-01", "2027-01-31"]),
    shards=st.sampled_from([1, 16, 1024]),
)
def test_a_messages_keys_are_the_layouts(
    conv: str, event_id: str, sender: str, integration: str, day: str, shards: int
) -> None:
    k = KeyBuilder(prefix="xgw", shards=shards)
    tag = "{" + shard_tag(shard_of(conv, shards), shards) + "}"
    expected_intake = [
        spelled("xgw", shards, conv, f"dedup:{arg(event_id)}"),
        spelled("xgw", shards, conv, "burst"),
        spelled("xgw", shards, conv, "burstmeta"),
        f"xgw:{tag}:due",
        spelled("xgw", shards, conv, "turn"),
    ]
    expected_budget = [
        spelled("xgw", shards, conv, "bturns"),
        spelled("xgw", shards, conv, f"bsender:{arg(sender)}"),
        spelled("xgw", shards, conv, f"btokens:{day}"),
        spelled("xgw", shards, conv, f"brefused:{day}"),
        f"xgw:{tag}:usage:{id_encoded(integration)}",
    ]
    for _ in range(2):  # built, then from the cache
        assert k.intake(conv, event_id) == expected_intake
        assert k.budget_intake(conv, sender, day, integration) == expected_budget
        assert [
            k.dedup(conv, event_id),
            k.burst(conv),
            k.burst_meta(conv),
            k.due_of(conv),
            k.turn(conv),
        ] == expected_intake
        assert [
            k.budget_turns(conv),
            k.budget_sender_turns(conv, sender),
            k.budget_tokens(conv, day),
            k.budget_refused(conv, day),
            k.usage_of(conv, integration),
        ] == expected_budget
        assert k.shard(conv) == shard_of(conv, shards)
        assert k.lease(conv) == spelled("xgw", shards, conv, "lease")
        assert k.due_of(conv) == k.due(k.shard(conv))


def test_the_cache_is_bounded_and_stays_right_when_cleared() -> None:
    k = KeyBuilder(prefix="p", shards=16)
    first = "console|p2p:first"
    before = k.intake(first, "e")
    for i in range(keys_module._CONVS_KEPT + 10):  # more conversations than it keeps
        conv = f"console|p2p:c{i}"
        assert k.burst(conv) == spelled("p", 16, conv, "burst")
    assert len(k._convs) <= keys_module._CONVS_KEPT
    assert k.intake(first, "e") == before  # built again after the clear: the same keys


# Ids made of the characters that matter (separators, escapes, part names) so they meet often.
PIECES = st.sampled_from([":", "|", "%", "%3A", "{", "a", "dedup", "turn", "t", "u"])
HOSTILE = st.lists(PIECES, min_size=1, max_size=3).map("".join)
CONVS = st.builds(
    lambda integ, chat, kind, extra, key: str(
        ConversationId(
            integ, "p2p", chat, extra if kind == "u" else None, thread_of(kind, extra, key)
        )
    ),
    st.sampled_from(["i", "i:t", "i|p2p"]),
    HOSTILE,
    st.sampled_from(["chat", "u", "thread", "subject"]),
    HOSTILE,
    HOSTILE,
)


def thread_of(kind: str, extra: str, key: str) -> str | None:
    if kind == "thread":
        return id_encoded(extra)
    if kind == "subject":
        return f"{id_encoded(extra)}:{':'.join(id_encoded(k) for k in key.split(':'))}"
    return None


def every_key(k: KeyBuilder, conv: str, argument: str) -> dict[str, tuple[str, str, str]]:
    """Each of a conversation's keys -> what it is (conversation, part, argument)."""
    plain = {
        "burst": k.burst,
        "burstmeta": k.burst_meta,
        "turn": k.turn,
        "lease": k.lease,
        "binding": k.binding,
        "cancel": k.cancel,
        "evcard": k.event_card,
        "bturns": k.budget_turns,
    }
    with_arg = {
        "dedup": k.dedup,
        "watch": k.watch_cooldown,
        "bsender": k.budget_sender_turns,
        "btokens": k.budget_tokens,
        "brefused": k.budget_refused,
    }
    keys = {build(conv): (conv, part, "") for part, build in plain.items()}
    keys |= {build(conv, argument): (conv, p, argument) for p, build in with_arg.items()}
    return keys


@settings(max_examples=1500, deadline=None)
@given(first=CONVS, second=CONVS, a=HOSTILE, b=HOSTILE)
def test_no_two_conversations_or_keys_share_a_key(first: str, second: str, a: str, b: str) -> None:
    k = KeyBuilder(prefix="xgw", shards=1)  # one hash tag: every key could meet every other
    mine, theirs = every_key(k, first, a), every_key(k, second, b)
    assert len(mine) == 13 and len(theirs) == 13
    for key in mine.keys() & theirs.keys():
        assert mine[key] == theirs[key]


def test_the_issues_ids_have_keys_of_their_own() -> None:
    k = KeyBuilder(prefix="xgw", shards=1)
    assert k.dedup("lark|p2p:team2", "y34:turn") != k.turn("lark|p2p:team2:dedup:y34")
    assert k.dedup("lark|p2p:team2", "turn") == "xgw:{0.0}:lark|p2p:team2:dedup:%74urn"
    assert k.dedup("lark|p2p:team2", "y34:turn") == "xgw:{0.0}:lark|p2p:team2:dedup:y34%3Aturn"
    assert k.dedup("lark|p2p:oc_1", "om_1") == "xgw:{0.0}:lark|p2p:oc_1:dedup:om_1"  # as before


@settings(max_examples=200, deadline=None)
@given(app=IDS, bucket=IDS, month=IDS, window_ms=st.integers(1, 10**9))
def test_an_apps_platform_budget_keys_are_the_layouts_in_one_slot(
    app: str, bucket: str, month: str, window_ms: int
) -> None:
    k = KeyBuilder(prefix="xgw")
    base = f"xgw:pb:{{{id_encoded(app)}}}"
    keys = [
        k.platform_window(app, bucket, window_ms),
        k.platform_pause(app),
        k.platform_pause(app, bucket),
        k.platform_month(app, month),
        k.platform_line(app, bucket),
    ]
    assert keys == [
        f"{base}:w:{id_encoded(bucket)}:{window_ms}",
        f"{base}:pause",
        f"{base}:bpause:{id_encoded(bucket)}",
        f"{base}:month:{id_encoded(month)}",
        f"{base}:line:{id_encoded(bucket)}",
    ]
    assert {key_slot(key.encode()) for key in keys} == {key_slot(id_encoded(app).encode())}


def platform_keys(k: KeyBuilder, app: str, bucket: str, month: str) -> dict[str, tuple[str, ...]]:
    """Each of an app's platform budget keys -> what it is."""
    return {
        k.platform_window(app, bucket, 1000): (app, "w", bucket, "1000"),
        k.platform_window(app, bucket, 60_000): (app, "w", bucket, "60000"),
        k.platform_pause(app): (app, "pause"),
        k.platform_pause(app, bucket): (app, "bpause", bucket),
        k.platform_month(app, month): (app, "month", month),
        k.platform_line(app, bucket): (app, "line", bucket),
    }


@settings(max_examples=500, deadline=None)
@given(first=st.tuples(HOSTILE, HOSTILE, HOSTILE), second=st.tuples(HOSTILE, HOSTILE, HOSTILE))
def test_no_two_platform_budgets_or_their_keys_share_a_key(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    k = KeyBuilder(prefix="xgw")
    mine, theirs = platform_keys(k, *first), platform_keys(k, *second)
    assert len(mine) == 6 and len(theirs) == 6
    for key in mine.keys() & theirs.keys():
        assert mine[key] == theirs[key]
