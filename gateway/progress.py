"""Progress: the one state a turn's card is rendered from, folded from run events."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Literal

from gateway.events import (
    ArtifactEvent,
    Clarification,
    Decision,
    Finished,
    Interrupt,
    RunEvent,
    StepEvent,
    TextDelta,
    ToolEvent,
    UsageEvent,
)

# "rejected": a confirmation the user rejected, and the run then ended as the expert chose; not
# a success ("done") and not a failure, so cards show it in a neutral colour.
Status = Literal["running", "waiting", "done", "rejected", "error", "cancelled", "ended"]
FINAL: frozenset[str] = frozenset({"done", "rejected", "error", "cancelled", "ended"})

# Action ids carried by card buttons; adapters map them to their platform's callback values.
ACTION_STOP = "stop"
ACTION_NEW = "new"
ACTION_CONFIRM = "confirm"
ACTION_REJECT = "reject"
ACTION_RETRY = "retry"
# An option of the agent's question (``Clarification``): ``answer_<n>``, n from 1.
ACTION_ANSWER = "answer_"
MAX_OPTIONS = 5  # option buttons on one card (WeCom cards take 6 buttons, New is one)
OPTION_LABEL_CHARS = 40
ASKING_TITLE = "A question for you"
# A routine said in plain words waits for these (gateway/triggers/routines.py).
ACTION_ROUTINE_CONFIRM = "routine_confirm"
ACTION_ROUTINE_CANCEL = "routine_cancel"

STATUS_TITLES: dict[str, str] = {
    "running": "Working on it…",
    "waiting": "Please confirm",
    "done": "Done",
    "rejected": "Rejected",
    "error": "Something went wrong",
    "cancelled": "Stopped",
    "ended": "Conversation ended",
}


@dataclass(frozen=True, slots=True)
class Step:
    id: str
    title: str
    status: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Button:
    action_id: str
    label: str
    style: Literal["default", "primary", "danger"] = "default"


@dataclass(frozen=True, slots=True)
class Media:
    """An image or a file the answer's Markdown names, fetched from an allowed origin for the
    final card (gateway/edge/media.py); ``url`` is where the answer named it."""

    kind: Literal["image", "file"]
    url: str
    data: bytes = field(repr=False)
    mime: str
    name: str
    alt: str = ""


@dataclass(frozen=True, slots=True)
class Progress:
    """Immutable; ``apply`` returns the next state so renderers can hold a consistent snapshot."""

    turn_id: str
    conversation: str = ""
    status: Status = "running"
    steps: tuple[Step, ...] = ()
    tools: tuple[Step, ...] = ()
    answer: str = ""
    error: str = ""
    prompt: str = ""
    artifacts: tuple[ArtifactEvent, ...] = ()
    media: tuple[Media, ...] = ()  # the answer's images and files, fetched for the final card
    input_tokens: int = 0
    output_tokens: int = 0
    version: int = 0
    decision: Decision | None = None  # set when a waiting turn is resumed (Confirm / Reject)
    # A card that is no turn's (a routine's confirmation): its own title and buttons.
    headline: str = ""
    actions: tuple[Button, ...] | None = None
    # The agent's question when the run ended asking one (its text is also in ``answer``),
    # and its options: buttons once the turn is done.
    question: str = ""
    options: tuple[str, ...] = ()
    trailer: int = 0  # characters at the answer's end a TextDelta's ``tail`` replaces

    @property
    def title(self) -> str:
        """The card's headline: the question while waiting, else the status."""
        if self.headline:
            return self.headline
        if self.status == "done" and self.question:
            return ASKING_TITLE
        return self.prompt if self.status == "waiting" and self.prompt else self.status_title

    @property
    def status_title(self) -> str:
        """The one word(s) a card shows for its status (the title is the question while waiting)."""
        return STATUS_TITLES[self.status]

    @property
    def final(self) -> bool:
        return self.status in FINAL

    @property
    def buttons(self) -> tuple[Button, ...]:
        if self.actions is not None:
            return self.actions
        if self.status == "running":
            return (Button(ACTION_STOP, "Stop", "danger"),)
        if self.status == "waiting":
            return (
                Button(ACTION_CONFIRM, "Confirm", "primary"),
                Button(ACTION_REJECT, "Reject", "danger"),
            )
        if self.status == "ended":
            return ()
        if self.status == "done" and self.options:
            return (*option_buttons(self.options), Button(ACTION_NEW, "New conversation"))
        if self.status == "error":
            return (
                Button(ACTION_RETRY, "Retry", "primary"),
                Button(ACTION_NEW, "New conversation"),
            )
        return (Button(ACTION_NEW, "New conversation"),)

    def apply(self, event: RunEvent) -> Progress:
        """The next state (its version one up), or this one when ``event`` changes nothing."""
        if isinstance(event, TextDelta):
            tail = event.tail or ""
            if event.replace:
                if event.text + tail == self.answer and len(tail) == self.trailer:
                    return self
                return self._next(answer=event.text + tail, trailer=len(tail))
            if event.tail is None:
                return (
                    self._next(answer=self.answer + event.text, trailer=0) if event.text else self
                )
            body = self.answer[: len(self.answer) - self.trailer]
            return self._next(answer=body + event.text + tail, trailer=len(tail))
        if isinstance(event, StepEvent):
            step = Step(event.id, event.title, event.status, event.detail)
            return self._next(steps=_upsert(self.steps, step))
        if isinstance(event, ToolEvent):
            tool = Step(event.id, event.name, event.status, event.summary)
            return self._next(tools=_upsert(self.tools, tool))
        if isinstance(event, Interrupt):
            return self._next(status="waiting", prompt=event.prompt)
        if isinstance(event, Clarification):
            # The model's own text after the question (XpertAI runs it once more, see
            # gateway/experts/xpert_clarify.py) already asks it: the options go as buttons
            # only. A run that ended at the question shows the question itself.
            answer = self.answer.rstrip()
            if not event.restated and event.question not in answer:
                answer = f"{answer}\n\n{asked_text(event)}" if answer else asked_text(event)
            return self._next(
                answer=answer,
                question=event.question,
                options=event.options[:MAX_OPTIONS],
                trailer=0,
            )
        if isinstance(event, UsageEvent):
            return self._next(
                input_tokens=self.input_tokens + event.input_tokens,
                output_tokens=self.output_tokens + event.output_tokens,
            )
        if isinstance(event, ArtifactEvent):
            return self._next(artifacts=(*self.artifacts, event))
        if isinstance(event, Finished):
            return self.finish(event.outcome, event.error)
        return self

    def _next(self, **changes: object) -> Progress:
        """This state with ``changes`` and the next version: ``dataclasses.replace`` without
        its per-call field introspection and keyword ``__init__`` (several times per turn)."""
        new = object.__new__(Progress)
        setter = object.__setattr__
        for name in _FIELDS:
            setter(new, name, changes[name] if name in changes else getattr(self, name))
        setter(new, "version", self.version + 1)
        return new

    def finish(self, outcome: str, error: str = "") -> Progress:
        """The terminal state: running steps are closed, so no spinner is left forever (done when
        the run succeeded, cancelled when it was stopped, failed when it failed). A run resumed
        with Reject that then ends well is "rejected", not "done"."""
        if outcome == "interrupted":
            return (
                replace(self, version=self.version + 1)
                if self.status == "waiting"
                else replace(self, status="waiting", version=self.version + 1)
            )
        status: Status
        if outcome == "success":
            status = "rejected" if self.decision == "reject" else "done"
        elif outcome == "cancelled":
            status = "cancelled"
        else:
            status = "error"
        closing = {"done": "done", "rejected": "done", "cancelled": "cancelled"}.get(
            status, "failed"
        )
        steps = tuple(
            replace(s, status=closing) if s.status == "running" else s for s in self.steps
        )
        tools = tuple(
            replace(s, status=closing) if s.status == "running" else s for s in self.tools
        )
        return replace(
            self,
            status=status,
            error=error,
            steps=steps,
            tools=tools,
            prompt="",
            version=self.version + 1,
        )

    def with_media(self, media: tuple[Media, ...]) -> Progress:
        """This state with the answer's fetched images and files (its version one up)."""
        return self._next(media=media)

    def resumed(self, decision: Decision) -> Progress:
        """The waiting card carrying on after Confirm / Reject: its steps, tools and answer so far
        stay; the question goes. Call it on the state the card showed while waiting."""
        return replace(
            self,
            status="running",
            prompt="",
            decision=decision,
            trailer=0,
            version=self.version + 1,
        )


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Progress))


def asked_text(event: Clarification) -> str:
    """The question as the card's answer shows it: its context, the question, the options
    that get no button (past ``MAX_OPTIONS``: type one) and, unless the agent allows only its
    options, that a reply in one's own words works too. The others are the card's buttons
    (links on DingTalk), shown once."""
    parts = [event.context] if event.context else []
    parts.append(f"**{event.question}**")
    more = event.options[MAX_OPTIONS:]
    if more:
        parts.append("\n".join(f"{i}. {o}" for i, o in enumerate(more, MAX_OPTIONS + 1)))
    if event.free_text:
        parts.append("_You can also reply in your own words._")
    return "\n\n".join(parts)


def option_buttons(options: tuple[str, ...]) -> tuple[Button, ...]:
    def label(text: str) -> str:
        return text if len(text) <= OPTION_LABEL_CHARS else text[: OPTION_LABEL_CHARS - 1] + "…"

    return tuple(
        Button(f"{ACTION_ANSWER}{i}", label(o), "primary" if i == 1 else "default")
        for i, o in enumerate(options[:MAX_OPTIONS], 1)
    )


def option_of(action_id: str, options: list[str] | tuple[str, ...]) -> str | None:
    """The option an ``answer_<n>`` click chose, None when it names none."""
    if not action_id.startswith(ACTION_ANSWER):
        return None
    digits = action_id[len(ACTION_ANSWER) :]
    if not digits.isdigit() or not 1 <= int(digits) <= min(len(options), MAX_OPTIONS):
        return None
    return options[int(digits) - 1]


def _upsert(items: tuple[Step, ...], step: Step) -> tuple[Step, ...]:
    for i, existing in enumerate(items):
        if existing.id == step.id:
            return (*items[:i], step, *items[i + 1 :])
    return (*items, step)
