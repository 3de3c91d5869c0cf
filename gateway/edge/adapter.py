"""What an adapter is to the core: the :class:`Adapter` base of each integration's platform
connection (lifecycle, readiness, what the platform can do), which hands its cards and replies to
its :class:`~gateway.edge.outbound.Outbound`; and the live view of a replica's adapters.

Adapters import only ``gateway.edge`` (this package: the contract, the stores and intake lent to
them, the webhook skeleton and bounded parsing, leases, downloads, the platform API base) and the
public core types (``gateway.envelope``, ``gateway.errors``, ``gateway.progress``,
``gateway.config.settings``, ``gateway.conversation``), never ``sessions`` or
``gateway.intake``; the core never imports an adapter (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from gateway.config.bases import IntegrationBase
from gateway.edge.call_budget import CallBudget
from gateway.edge.capabilities import Capability
from gateway.edge.chat_actions import (
    HISTORY,
    ChatMember,
    ChatMessage,
    Unsupported,
    post_envelope,
)
from gateway.edge.context import AdapterContext
from gateway.edge.downloads import FetchedFile
from gateway.edge.outbound import Outbound
from gateway.edge.platform_api import ApiCalls
from gateway.envelope import Attachment, Chat, Envelope
from gateway.progress import Media, Progress

__all__ = ["Adapter", "LiveAdapters"]


class Adapter:
    """One integration's platform connection: inbound wiring, and ``outbound`` (set by the
    subclass's ``__init__``), to which cards and replies go."""

    outbound: Outbound
    call_budget: CallBudget | None = None  # the app's platform budget (cards read its mode)
    # The states its long connection reports in readiness() (as "connection" or "state"), each
    # a 0/1 series of xgw_connection_state; a state it does not declare is counted as "other".
    connection_states: ClassVar[tuple[str, ...]] = ()
    # Whether the platform vouches for who sent a message (a signed event naming its sender);
    # False where the request itself names the sender (the console): a ``principals`` entry
    # then matches its turns only when it names the integration (issue 36).
    verifies_senders = True
    # Whether a card shows the turn's states as they come; False where only its last state can
    # be shown (WeCom app messages): the renderer then sends no intermediate update and the
    # final state waits for none (issue 38: finals within 2 s of the turn's end).
    live_updates = True

    def __init__(self, *, settings: IntegrationBase, context: AdapterContext) -> None:
        self.settings = settings
        self.context = context

    def platform_budget(self, app: str) -> CallBudget | None:
        """The platform budget of ``app`` (the platform's app id), kept as ``call_budget``."""
        self.call_budget = self.context.platform_budget(self.settings, app)
        return self.call_budget

    @property
    def integration_id(self) -> str:
        return self.settings.id

    def api_calls(self) -> ApiCalls:
        """The hook this integration's platform API clients report each call to."""
        return self.context.api_calls(self.integration_id, self.settings.platform)

    async def start(self) -> None:
        """Open long connections, fetch the bot's own identity."""

    async def stop(self) -> None:
        """Close long connections (each owned, so closed explicitly: docs/architecture.md)."""

    def readiness(self) -> dict[str, Any]:
        """Connection state for ``/readyz``; ``ready`` False makes the replica unready."""
        return {"ready": True}

    def reuses_card(self, handle: str) -> bool:
        """Whether a card an earlier turn sent can show a later turn in place (an external
        object's card, updated by each of its events: gateway/triggers/event_cards.py). False
        where updates are once-only messages (markdown replies), so each turn gets its own."""
        return False

    def card_handle(self, idempotency_key: str) -> str | None:
        """The handle ``send_card`` answers for ``idempotency_key`` where sending again with the
        same key finds the card already sent rather than a new one: a replica resuming the turn
        then needs no record of it. None (the default): a handle known only once sent."""
        return None

    @classmethod
    def declared(cls, settings: IntegrationBase) -> frozenset[Capability]:
        """What this platform, in the mode ``settings`` choose, can do for its users
        (gateway/edge/capabilities.py): the conformance suite holds it to each, README's "what
        works where" table is checked against it. None by default."""
        return frozenset()

    def capabilities(self) -> frozenset[Capability]:
        """This integration's :meth:`declared` capabilities."""
        return self.declared(self.settings)

    def answer_part_bytes(self) -> int | None:
        """Bytes of one part of a long answer here: an answer past ``maxAnswerParts`` of them
        goes as the file ``answer.md`` (gateway/edge/long_answer.py). None (the default): the
        platform mode takes no file from the bot, the answer goes in parts."""
        return None

    def answer_part_chars(self) -> int | None:
        """Characters one part holds at most where that is fewer than its bytes would allow
        (None: bytes alone bound a part)."""
        return None

    def posts_unprompted(self, chat_type: str) -> bool:
        """Whether the bot can post into a chat of ``chat_type`` with no message to answer
        (a scheduled turn's card); a platform mode that only answers says False."""
        return True

    def unprompted_chat_id(self, envelope: Envelope) -> str:
        """The chat id a schedule made from ``envelope`` (``/schedule`` or a routine said in
        that chat) posts its turns to; the envelope's own chat unless the platform says else."""
        return envelope.chat.id

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        """Download an attachment (image, file, …) for an expert that accepts it; None when
        the platform cannot; :class:`~gateway.edge.downloads.DownloadTooLarge` when it is
        larger than ``max_bytes``."""
        return None

    async def sender_email(self, envelope: Envelope) -> str | None:
        """The sender's email for ``sys.user_email``: the Envelope's own, or what the platform's
        directory tells (adapters that look it up cache it)."""
        return envelope.sender.email

    # --- what it answers with: its outbound's ------------------------------------------------
    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        """Send the turn's card in reply to ``reply_to``; returns the handle used to update it.

        The same ``idempotency_key`` must never produce a second message.
        """
        return await self.outbound.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        """Update the card in place to show ``progress``."""
        await self.outbound.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        """A plain reply (command answers, busy notices)."""
        await self.outbound.send_text(reply_to, text, idempotency_key=idempotency_key)

    # --- chat actions (the MCP server's tools, gateway/edge/chat_actions.py) -------------------
    def chat_tools(self) -> frozenset[str]:
        """The chat actions this platform (in this integration's mode) offers; by default the
        history, which is at least the gateway's own transcript of the chat."""
        return frozenset({HISTORY})

    def plain_mentions(self, text: str) -> str:
        """``text`` with the platform's mention syntax escaped, so it notifies nobody."""
        return text

    async def post_message(
        self, chat: Chat, text: str, *, mentions: bool, idempotency_key: str
    ) -> None:
        """Post ``text`` (Markdown) into ``chat`` with no message to answer, its mention syntax
        escaped unless ``mentions``: by default the outbound's plain reply, as a scheduled turn
        posts."""
        if not mentions:
            text = self.plain_mentions(text)
        env = post_envelope(self.integration_id, self.settings.platform, chat, idempotency_key)
        await self.send_text(env, text, idempotency_key=idempotency_key)

    async def post_file(self, chat: Chat, item: Media, *, idempotency_key: str) -> None:
        """Post an image or a file into ``chat`` as the answer's media are sent."""
        raise Unsupported("this platform sends no files here")

    async def chat_history(self, chat: Chat, limit: int) -> list[ChatMessage] | None:
        """The platform's history of ``chat``, newest last; None where it offers none."""
        return None

    async def chat_members(self, chat: Chat) -> list[ChatMember] | None:
        """The chat's members; None where the platform lists none."""
        return None


A = TypeVar("A", bound=Adapter)


class LiveAdapters(Mapping[str, A], Generic[A]):
    """A live, read-only view of the replica's adapters of one class.

    Route handlers hold this rather than a copy, so integrations added, changed or removed by a
    config reload (SIGHUP) are served at once.
    """

    def __init__(self, adapters: Mapping[str, Adapter], cls: type[A]) -> None:
        self._adapters = adapters
        self._cls = cls

    def __getitem__(self, key: str) -> A:
        adapter = self._adapters[key]
        if not isinstance(adapter, self._cls):
            raise KeyError(key)
        return adapter

    def __iter__(self) -> Iterator[str]:
        return (k for k, a in list(self._adapters.items()) if isinstance(a, self._cls))

    def __len__(self) -> int:
        return sum(1 for _ in self)
