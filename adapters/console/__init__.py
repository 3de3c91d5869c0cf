"""The web console: a local IM emulator that is an adapter like the others
(docs/architecture.md)."""

from __future__ import annotations

from adapters.console.inbound import ChatAdapter, setup_routes
from adapters.console.outbound import PART_BYTES, ConsoleOutbound
from adapters.console.settings import ConsoleIntegration
from gateway.edge.chat_actions import TOOLS, ChatMember, ChatMessage
from gateway.edge.context import AdapterContext
from gateway.edge.factory import Factory
from gateway.envelope import Chat
from gateway.progress import Media


class ConsoleAdapter(ChatAdapter):
    outbound: ConsoleOutbound
    stopped = False  # by the gateway (shutting down, or gone on a reload): Redis may go next
    verifies_senders = False  # the console's request names its sender (docs/security.md)

    def __init__(self, *, settings: ConsoleIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.outbound = ConsoleOutbound(
            integration_id=settings.id, timeline=context.timeline, records=context.records
        )

    def card_handle(self, idempotency_key: str) -> str | None:
        return self.outbound.card_handle(idempotency_key)

    def reuses_card(self, handle: str) -> bool:
        return True  # a card is a timeline record, upserted whatever turn shows in it

    def answer_part_bytes(self) -> int:
        """Past ``maxAnswerParts`` of these an answer is the file answer.md, downloaded from
        the transcript (outbound.py), its head in the card."""
        return PART_BYTES

    # --- chat actions: the timeline is the console's whole platform ---------------------------
    def chat_tools(self) -> frozenset[str]:
        return frozenset(TOOLS)

    async def post_file(self, chat: Chat, item: Media, *, idempotency_key: str) -> None:
        await self.outbound.send_file(chat.id, item, idempotency_key=idempotency_key)

    async def chat_history(self, chat: Chat, limit: int) -> list[ChatMessage] | None:
        records = await self.context.timeline.list(self.settings.id, chat.id)
        out = []
        for r in records[-limit:]:
            card = r.get("card") if r.get("type") == "card" else None
            text = str(r.get("text") or (card or {}).get("answer") or "")
            sender = str(r.get("senderId") or "bot") if r.get("role") == "user" else "bot"
            out.append(
                ChatMessage(sender=sender, text=text, at_ms=r.get("at"), id=str(r.get("id", "")),
                            sender_name=r.get("senderName"), kind=str(r.get("type", "text")))
            )  # fmt: skip
        return out

    async def chat_members(self, chat: Chat) -> list[ChatMember] | None:
        known = {c.id: c for c in self.settings.chats()}
        found = known.get(chat.id)
        users = self.settings.users
        if found is not None and found.user_id is not None:
            users = [u for u in users if u.id == found.user_id]
        bot = ChatMember(id="bot", name=self.settings.bot_name, is_bot=True)
        return [*(ChatMember(id=u.id, name=u.name) for u in users), bot]

    async def stop(self) -> None:
        self.stopped = True  # the events' pump then ends quietly when Redis closes
        await super().stop()


factory = Factory(
    platform="console",
    adapter=ConsoleAdapter,
    settings_model=ConsoleIntegration,
    routes=setup_routes,
)


__all__ = ["ConsoleAdapter", "ConsoleIntegration", "factory"]
