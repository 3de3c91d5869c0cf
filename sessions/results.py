"""What the session store answers (``sessions.store``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import orjson


def _loads(text: str) -> Any:
    """JSON the gateway stored: orjson, or the stdlib where orjson refuses what the stdlib
    would take (an escaped lone surrogate in a platform's raw payload): never a turn lost to it."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def audit_fields(record: dict[str, Any]) -> dict[Any, Any]:
    """An audit record as stream fields: strings as they are, everything else as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in record.items()}


@dataclass(frozen=True, slots=True)
class IntakeResult:
    """``full``: over the conversation's buffer cap (``BufferCap``), nothing stored but the dedup
    record; ``told``: the first such refusal since the burst was last under its cap (the chat
    is told once)."""

    status: Literal["queued", "dup", "busy", "full"]
    due_ms: int
    busy: bool
    told: bool = False


@dataclass(frozen=True, slots=True)
class BufferCap:
    """The most a conversation's burst (its messages waiting for a turn) may hold: messages and
    bytes of their stored JSON (0: no cap). The intake step refuses a message past either."""

    messages: int = 0
    bytes: int = 0


NO_CAP = BufferCap()


@dataclass(frozen=True, slots=True)
class BurstWrite:
    """One envelope's write into its conversation's burst (intake.lua's ARGV, and the keys it
    touches): the stored JSON, when, the burst's windows, what it does while a turn runs, and
    the buffer cap. Built once by intake; the scripts that wrap intake.lua (budgets, group
    watch) take it as it is."""

    conversation: str
    event_id: str
    envelope_json: str
    now_ms: int
    window_ms: int  # due this long after the last message (0: at once)
    max_window_ms: int  # ... and at the latest this long after the first
    mode: Literal["collect", "reject", "urgent"] = "collect"
    cap: BufferCap = NO_CAP


@dataclass(frozen=True, slots=True)
class Binding:
    state: Literal["new", "continue"]
    fields: dict[str, str]

    @property
    def session_id(self) -> str:
        return self.fields["sessionId"]


@dataclass(frozen=True, slots=True)
class Claim:
    """A turn this replica now owns: new (from the burst) or resumed (a crashed replica's)."""

    conversation: str
    owner: str
    resumed: bool
    turn: dict[str, str]
    # The session this turn continues, bound by the claim itself (None: bind it as usual).
    bound: Binding | None = None

    @property
    def turn_id(self) -> str:
        return self.turn["id"]

    @classmethod
    def of_reply(cls, conversation: str, owner: str, reply: list[Any]) -> Claim | None:
        """claim.lua's reply: the claimed turn, or None (nothing due, another's lease, empty)."""
        if reply[0] not in ("new", "resume"):
            return None
        return cls(
            conversation=conversation,
            owner=owner,
            resumed=reply[0] == "resume",
            turn=_loads(reply[1]),
            bound=Binding(state="continue", fields=_loads(reply[2])) if len(reply) > 2 else None,
        )

    @property
    def attempts(self) -> int:
        return int(self.turn.get("attempts", "1"))

    @property
    def items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = _loads(self.turn.get("items", "[]"))
        return items


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """What a claim of a conversation's due turn needs (``SessionStore.claim``); also sent with
    a message's intake, to claim its turn in the same call when it is due at once."""

    owner: str
    turn_id: str
    now_ms: int
    lease_ms: int
    session_timeout_ms: int = 0
    # The turn takes one sender's messages (the expert acts as its sender: issue 36).
    split_by_sender: bool = False
