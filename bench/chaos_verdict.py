"""What a chaos run's transcripts and audit trail say: lost, doubled, out of order, stuck.

Pure functions over what the console API and the audit stream return, so the rules are tested on
their own (tests/runtime/test_chaos.py) and the harness only gathers the data.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Card statuses that end a card (gateway/progress.py FINAL); anything else is still going.
FINAL = frozenset({"done", "rejected", "error", "cancelled", "ended"})


@dataclass
class Verdict:
    lost: int = 0  # accepted, quoted by no finished card
    duplicated: int = 0  # quoted more than once
    out_of_order: int = 0  # messages out of place in their conversation's answers
    stuck: int = 0  # cards not final
    cards: int = 0
    error_cards: int = 0  # error or cancelled cards
    unknown_lines: int = 0  # quoted lines that match no message sent
    answered_unaccepted: int = 0  # answered though no delivery got a 202 (fine, counted)
    user_record_dups: int = 0  # a message shown twice in the transcript
    unreadable: int = 0  # conversations whose transcript could not be read
    lost_in: list[int] = field(default_factory=list)  # conversations (by index) with a loss

    @property
    def complete(self) -> bool:
        return self.stuck == 0 and self.lost == 0 and self.unreadable == 0


def quoted(card: dict[str, Any]) -> list[str]:
    """The messages an echo card answers, one per ``> `` line, in the order it quotes them."""
    answer = str(card.get("answer", ""))
    return [line[2:] for line in answer.splitlines() if line.startswith("> ")]


def misplaced(positions: list[int]) -> int:
    """How many items must move for ``positions`` to be increasing: n - longest increasing run."""
    tails: list[int] = []
    for p in positions:
        i = bisect.bisect_left(tails, p)
        if i == len(tails):
            tails.append(p)
        else:
            tails[i] = p
    return len(positions) - len(tails)


def judge(
    conversations: Iterable[tuple[list[str], set[str], list[dict[str, Any]] | None]],
) -> Verdict:
    """Each conversation: the texts sent in order, those accepted, and its transcript records
    (``None`` when unreadable)."""
    v = Verdict()
    for n, (sent, accepted, records) in enumerate(conversations):
        if records is None:
            v.unreadable += 1
            v.lost += len(accepted)
            v.lost_in.append(n)
            continue
        cards = [r["card"] for r in records if r.get("type") == "card"]
        v.cards += len(cards)
        v.stuck += sum(1 for c in cards if c.get("status") not in FINAL)
        v.error_cards += sum(1 for c in cards if c.get("status") in ("error", "cancelled"))
        lines = [line for c in cards if c.get("status") == "done" for line in quoted(c)]
        count = Counter(lines)
        index = {text: i for i, text in enumerate(sent)}
        v.unknown_lines += sum(n for text, n in count.items() if text not in index)
        lost = sum(1 for text in accepted if count[text] == 0)
        v.lost += lost
        if lost:
            v.lost_in.append(n)
        v.duplicated += sum(1 for text in sent if count[text] > 1)
        v.answered_unaccepted += sum(1 for text in sent if count[text] and text not in accepted)
        firsts = [index[t] for t in dict.fromkeys(lines) if t in index]
        v.out_of_order += misplaced(firsts)
        users = Counter(r.get("text") for r in records if r.get("role") == "user")
        v.user_record_dups += sum(n - 1 for n in users.values() if n > 1)
    return v


def audit_checks(rows: list[dict[str, str]]) -> dict[str, Any]:
    """From the audit stream's turn records: turns, resumed ones, a turn recorded twice (its
    expert ran to the end twice), and overlapping turns of one conversation."""
    turns = [r for r in rows if r.get("event") == "turn"]
    per_turn = Counter(r.get("turn") for r in turns)
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in turns:
        spans[str(r.get("conversation"))].append((int(r["start"]), int(r["end"])))
    overlaps = 0
    for intervals in spans.values():
        ordered = sorted(intervals)
        overlaps += sum(1 for (_, e1), (s2, _) in itertools.pairwise(ordered) if s2 < e1)
    twice = [t for t, n in per_turn.items() if n > 1][:2]
    examples = [
        [
            {k: r.get(k) for k in ("replica", "start", "end", "resumed")}
            for r in turns
            if r["turn"] == t
        ]
        for t in twice
    ]
    return {
        "turns": len(turns),
        "resumed_turns": sum(1 for r in turns if r.get("resumed") == "1"),
        "turns_recorded_twice": sum(1 for n in per_turn.values() if n > 1),
        "overlapping_turns": overlaps,
        "replicas_ran_turns": len({r.get("replica") for r in turns}),
        "recorded_twice_examples": examples,
    }
