"""The chaos run (bench/chaos.py), smaller: 3 replica processes on a Redis of the test's own
(a redis-server, and a 3-primary cluster of tests/support/cluster.py),
every message delivered three times to different replicas, one replica SIGKILLed mid-turn and
restarted, Redis stopped (SIGSTOP) for 8 s mid-run; every accepted message answered exactly once,
in order, no card left running. And the rules that judge it, on transcripts made to fail them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.chaos import clean, parse_args, run
from bench.chaos_verdict import audit_checks, judge, misplaced

SENT = ["a", "b", "c", "d"]


def card(status: str, *lines: str) -> dict[str, Any]:
    answer = "You said:\n" + "\n".join(f"> {line}" for line in lines)
    return {"type": "card", "role": "bot", "card": {"status": status, "answer": answer}}


def user(text: str) -> dict[str, Any]:
    return {"type": "text", "role": "user", "text": text}


def test_a_clean_transcript_passes_and_a_merged_burst_is_fine() -> None:
    records = [user("a"), card("done", "a"), user("b"), user("c"), card("done", "b", "c")]
    records += [user("d"), card("done", "d")]
    v = judge([(SENT, set(SENT), records)])
    assert (v.lost, v.duplicated, v.out_of_order, v.stuck, v.cards) == (0, 0, 0, 0, 3)
    assert v.complete


def test_lost_doubled_reordered_and_stuck_are_each_counted() -> None:
    lost = judge([(SENT, set(SENT), [card("done", "a", "b", "d")])])
    assert (lost.lost, lost.complete) == (1, False)
    doubled = judge([(SENT, set(SENT), [card("done", "a", "b"), card("done", "b", "c", "d")])])
    assert (doubled.duplicated, doubled.lost) == (1, 0)
    reordered = judge([(SENT, set(SENT), [card("done", "b", "a"), card("done", "d", "c")])])
    assert reordered.out_of_order == 2
    stuck = judge([(SENT, set(SENT), [card("done", "a", "b", "c"), card("running", "d")])])
    assert (stuck.stuck, stuck.lost, stuck.complete) == (1, 1, False)
    failed = judge([(SENT, set(SENT), [card("done", "a", "b", "c"), card("error")])])
    assert (failed.error_cards, failed.lost) == (1, 1)
    unread = judge([(SENT, {"a", "b"}, None)])
    assert (unread.unreadable, unread.lost) == (1, 2)


def test_an_unaccepted_message_may_be_answered_but_not_twice() -> None:
    v = judge([(SENT, {"a", "b", "c"}, [card("done", "a", "b", "c", "d", "d")])])
    assert (v.lost, v.answered_unaccepted, v.duplicated) == (0, 1, 1)


def test_misplaced_counts_the_fewest_moves() -> None:
    assert misplaced([0, 1, 2, 3]) == 0
    assert misplaced([1, 0, 2, 3]) == 1
    assert misplaced([3, 0, 1, 2]) == 1
    assert misplaced([3, 2, 1, 0]) == 3


def test_audit_checks_find_a_turn_run_twice_and_overlaps() -> None:
    rows = [
        {"event": "turn", "turn": "t1", "conversation": "c", "start": "0", "end": "10"},
        {"event": "turn", "turn": "t2", "conversation": "c", "start": "10", "end": "20"},
        {"event": "turn", "turn": "t2", "conversation": "c", "start": "15", "end": "30"},
        {"event": "session-end", "conversation": "c"},
    ]
    checks = audit_checks(rows)
    assert (checks["turns"], checks["turns_recorded_twice"], checks["overlapping_turns"]) == (
        3,
        1,
        1,
    )


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("redis", ["standalone", "cluster"])
async def test_chaos_run_loses_and_doubles_nothing(tmp_path: Path, redis: str) -> None:
    opts = parse_args(
        [
            *("--redis", redis, "--conversations", "6", "--messages", "8", "--duration", "12"),
            *("--pause-seconds", "8", "--lease-seconds", "2", "--settle-timeout", "60"),
        ]
    )
    result = await run(opts, tmp_path)
    summary = {k: result[k] for k in ("sent", "accepted", "lost", "duplicated", "out_of_order")}
    assert clean(result), (summary, result)
    assert result["sent"] == 48 and result["stuck"] == 0
    faults = [f["fault"] for f in result["faults"]]
    assert faults == ["sigkill", "restarted", "redis paused", "redis resumed"]
    # The faults were felt: deliveries refused or timed out and retried, every message
    # delivered three times (two of them answered as duplicates), the killed one back.
    assert result["retries"] > 0
    assert result["intake"].get("duplicate", 0) >= 2 * 48
    assert result["replica_starts"] == 4
    assert result["user_record_dups"] == 0 and result["unknown_lines"] == 0
