"""Run events: what an expert reports while it works (docs/architecture.md, "Experts")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

StepStatus = Literal["running", "done", "failed"]
Outcome = Literal["success", "error", "interrupted", "cancelled"]
# The user's answer to an ``Interrupt`` (Confirm / Reject): what ``Expert.resume`` is handed and
# what the resumed card (``Progress.decision``) remembers.
Decision = Literal["confirm", "reject"]


@dataclass(frozen=True, slots=True)
class Started:
    run_id: str = ""
    thread_id: str = ""
    # The identity the thread belongs to, where the session keeps one per identity (issue 36):
    # kept as the binding's ``thread:<key>``; None: the session's one thread.
    thread_key: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Answer text: appended, or (``replace``) the whole answer so far, for a backend whose
    parallel streams interleave. ``tail``: the answer's trailer from now on (a "Sources" list
    that stays at its end while the text grows above it, gateway/citations.py): the text goes
    in before the trailer, which ``tail`` then replaces. A delta without one appends after
    everything, trailer included (it is the answer's text from then on)."""

    text: str
    replace: bool = False
    tail: str | None = None


def joined(deltas: list[TextDelta]) -> list[TextDelta]:
    """Appending deltas as few as do the same: consecutive ones of a kind (with a trailer or
    without) as one, its text theirs and its trailer the last one's."""
    out: list[TextDelta] = []
    texts: list[str] = []
    for i, delta in enumerate(deltas):
        texts.append(delta.text)
        after = deltas[i + 1] if i + 1 < len(deltas) else None
        if after is None or (after.tail is None) != (delta.tail is None):
            out.append(TextDelta("".join(texts), tail=delta.tail))
            texts = []
    return out


@dataclass(frozen=True, slots=True)
class StepEvent:
    id: str
    title: str
    status: StepStatus
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ToolEvent:
    id: str
    name: str
    status: StepStatus
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Interrupt:
    prompt: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Clarification:
    """The agent asked the user before it goes on (XpertAI's ``ask_clarification``; the model
    usually restates the question in its text before the run ends): the card shows that text
    (else the question), each option a button whose click is the user's next message; a typed
    answer works as well."""

    question: str
    options: tuple[str, ...] = ()
    context: str = ""
    free_text: bool = True
    restated: bool = False  # the model wrote text after asking: that text asks it already


@dataclass(frozen=True, slots=True)
class VariablesEvent:
    """Conversation variables from the expert. ``write``: the agent wrote these, apply the
    declared reducers. ``backend``: the backend's own state after its reducers ran (authoritative:
    stored as they are). ``sent``: the values just handed to the backend, so they are not sent
    again while unchanged."""

    values: dict[str, Any]
    mode: Literal["write", "backend", "sent"] = "write"


@dataclass(frozen=True, slots=True)
class UsageEvent:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@dataclass(frozen=True, slots=True)
class ArtifactEvent:
    kind: Literal["image", "file", "link"]
    url: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Finished:
    outcome: Outcome
    error: str = ""


RunEvent = (
    Started
    | TextDelta
    | StepEvent
    | ToolEvent
    | Interrupt
    | Clarification
    | VariablesEvent
    | UsageEvent
    | ArtifactEvent
    | Finished
)
