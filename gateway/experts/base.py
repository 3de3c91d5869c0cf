"""The expert interface every backend implements (docs/architecture.md, "Experts")."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.bases import ExpertBase, ExpertKind
from gateway.events import Decision, RunEvent
from sessions import HistoryStore, PrincipalStore


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What a turn hands the expert: the merged input and where it comes from."""

    turn_id: str
    session_id: str
    integration_id: str
    xpert_id: str
    text: str
    chat_id: str
    chat_type: str
    sender_id: str
    sender_name: str | None = None
    # False where the platform does not vouch for the sender (the console: the request names
    # it): a ``principals`` entry matches such a turn only when it names the integration.
    sender_verified: bool = True
    # Every sender whose message the input holds (a merged burst), the one it acts as first.
    senders: tuple[str, ...] = ()
    thread_id: str | None = None
    attachments: tuple[dict[str, Any], ...] = ()
    state: dict[str, Any] = field(default_factory=dict)  # conversation variables, as we hold them
    variables: dict[str, str] = field(default_factory=dict)  # sys.*, memory.*, var.* as text
    backend_state: dict[str, Any] = field(default_factory=dict)  # what the backend last had
    # The session's declared conversation variables and their reducers (replace|append|merge).
    declared_variables: Mapping[str, str] = field(default_factory=dict)
    expert_thread_id: str | None = None  # the backend's conversation, kept with the session
    # The backend's conversations per identity the session's turns acted as (a group whose turns
    # act as their senders keeps one per backend user: issue 36), kept with the session.
    expert_threads: Mapping[str, str] = field(default_factory=dict)
    group_history: tuple[dict[str, Any], ...] = ()  # recent group messages not sent to the bot
    notices: tuple[str, ...] = ()  # what the card tells of the input (attachments left out)
    memory_rules: int = 0  # how many items of the chat's memory memory.rules holds
    # What the session's previous turn saw of ``variables`` (sys.*, memory.rules), as stored: the
    # turn's end stores only what changed.
    seen_before: Mapping[str, str] = field(default_factory=dict)
    project_id: str | None = None  # the integration's projectId (an XpertAI project)


@dataclass(frozen=True, slots=True)
class ExpertContext:
    """What the core lends an expert when it is built."""

    history: HistoryStore | None = None  # for backends that keep no conversation themselves
    principals: PrincipalStore | None = None  # runtime sender -> backend user entries (xpert)
    # The current config's expert of an id (a session keeps its snapshot, but who a sender
    # acts as is read from the config in force at each turn, as secrets are: issue 36).
    current: Callable[[str], ExpertBase | None] | None = None


BUNDLE_OPTIONS = ("model", "tools")  # what a route may set on its expert (Expert.bundle_options)


class Expert(ExpertKind, abc.ABC):
    """A backend. ``run`` and ``resume`` stream events and end with exactly one ``Finished``.

    Each subclass is an expert kind: registered under the ``xpert_gateway.experts`` entry point
    group by its ``kind`` (gateway/experts/registry.py), it brings ``settings_model`` (what a
    config's ``experts`` entry of this kind holds) and builds itself from it in ``create``;
    what it can do is declared on the class (``gateway.config.bases.ExpertKind``).
    """

    @classmethod
    @abc.abstractmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> Expert:
        """The expert for ``settings`` (an instance of ``settings_model``)."""

    @abc.abstractmethod
    def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]: ...

    @abc.abstractmethod
    def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]: ...

    accepts_images = False  # the runner fetches image attachments through the adapter for it
    # ... and other files (PDF, Word, text: kind "file") for it, as data URLs; ``refuses_file``
    # may still turn one away by its type. Without it, the card says it reads no files.
    accepts_files = False

    @classmethod
    async def probe(cls, settings: ExpertBase) -> str | None:
        """Try the backend's URL and key as ``settings`` name them, without running a turn
        (``xpert-gateway check --probe``): what answered, or None for a kind with nothing to
        reach; an ``ExpertHttpError`` (gateway/experts/http.py) says what failed."""
        return None

    def refuses_file(self, mime: str) -> str | None:
        """Why this expert cannot take a fetched file of type ``mime`` (the card shows it and
        the turn runs without the file), or None when it takes it."""
        return None

    def refuses_kind(self, kind: str) -> str | None:
        """Why this expert cannot take an ``audio`` or ``video`` attachment at all (the card
        shows it by the attachment's name and the turn runs without it), or None: it then goes
        along as its key, as the platform sent it."""
        return None

    def media_sources(self) -> tuple[str, ...]:
        """Where an answer's images and files may be fetched from (gateway/edge/media.py): the
        expert's own origin (its ``base_url``, when it has one) and its ``mediaHosts``."""
        settings = getattr(self, "settings", None)
        if not isinstance(settings, ExpertBase):
            return ()
        base = getattr(settings, "base_url", None)
        own: tuple[str, ...] = ()
        if isinstance(base, str) and "://" in base:
            scheme, rest = base.split("://", 1)
            own = (f"{scheme}://{rest.split('/', 1)[0]}",)
        return (*own, *settings.media_hosts)

    async def steer(
        self, turn: TurnInput, text: str, attachments: tuple[dict[str, Any], ...] = ()
    ) -> tuple[RunEvent, ...]:
        """Hand a follow-up message (and its attachments, fetched as for a turn) to the running
        run (busyPolicy steer); what it answers is shown on the run's card (steps)."""
        raise NotImplementedError(f"{self.kind} experts cannot be steered")

    async def cancel(self, turn: TurnInput) -> None:
        """Ask the backend to stop the run; the runner cancels the local stream itself."""

    async def close(self) -> None:
        """Release connections."""
