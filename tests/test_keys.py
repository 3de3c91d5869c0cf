"""The key builder (sessions/keys.py): a conversation's keys are
``<prefix>:{<shard tag>}:<conversation>:<part>``, its shard's due index
``<prefix>:{<shard tag>}:due``, and the builders that make a message's keys from one look-up
(``intake``, ``budget_intake``) give exactly the keys of the one-key builders, in the scripts'
order, however many conversations the bounded cache has seen."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sessions import keys as keys_module
from sessions.keys import KeyBuilder, shard_of, shard_tag
from tests.helpers import brace_safe

IDS = st.text(min_size=1, max_size=40)


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
        spelled("xgw", shards, conv, f"dedup:{event_id}"),
        spelled("xgw", shards, conv, "burst"),
        spelled("xgw", shards, conv, "burstmeta"),
        f"xgw:{tag}:due",
        spelled("xgw", shards, conv, "turn"),
    ]
    expected_budget = [
        spelled("xgw", shards, conv, "bturns"),
        spelled("xgw", shards, conv, f"bsender:{brace_safe(sender)}"),
        spelled("xgw", shards, conv, f"btokens:{day}"),
        spelled("xgw", shards, conv, f"brefused:{day}"),
        f"xgw:{tag}:usage:{brace_safe(integration)}",
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
