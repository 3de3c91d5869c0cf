"""What a turn leaves when it ends (``TurnResult``): made by the turn kinds
(``gateway.turns.kinds``), read by the runner, the audit record (``gateway.turns.audit``) and the
metrics."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.experts.base import TurnInput
from gateway.progress import Progress
from gateway.turns.records import TurnOutcome
from gateway.turns.snapshot import SessionSnapshot


@dataclass(frozen=True)
class TurnResult:
    session_id: str
    variables: dict[str, str]  # what the turn saw (kept for the admin API)
    outcome: TurnOutcome = "done"
    expert: str = ""  # the xpertId that ran it ("": none did)
    first_card: int | None = None  # when its card first showed (epoch ms)
    # For the audit record (gateway/turns/audit.py): the context handed to the expert, the
    # card's last state, the session's snapshot, or what the turn said instead of running.
    turn: TurnInput | None = None
    final: Progress | None = None
    snapshot: SessionSnapshot | None = None
    said: str = ""
    # A Confirm / Reject runs as the sender of the interrupted turn; the clicker approved it.
    sender_id: str = ""  # "": the last item's sender
    approver: str = ""
