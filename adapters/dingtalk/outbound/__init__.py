"""How a DingTalk integration answers (the adapter's ``Outbound``): the turn's AI card when a
template is configured and it reached a chat (``ai_card``), else markdown messages (``robot``),
whose Confirm / Reject links go privately, in a group, to each person who may answer. The
answer's images show as links, and once it is final its fetched images and files follow as
image and file messages (``media``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from adapters.dingtalk.cards import (
    Message,
    as_messages,
    fit,
    link_line,
    phase,
    private_message,
    render_messages,
)
from adapters.dingtalk.crypto import sign_action
from adapters.dingtalk.outbound.ai_card import CardOutbound
from adapters.dingtalk.outbound.media import DingTalkMedia
from adapters.dingtalk.outbound.robot import Sender, reply_extras, target
from adapters.dingtalk.settings import DingTalkIntegration
from gateway.edge.approvers import answerers
from gateway.edge.context import AdapterContext
from gateway.edge.media import shown
from gateway.envelope import Envelope
from gateway.progress import (
    ACTION_ANSWER,
    ACTION_CONFIRM,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_ROUTINE_CANCEL,
    ACTION_ROUTINE_CONFIRM,
    Progress,
)

__all__ = ["DingTalkOutbound"]

# Buttons only certain people may answer (gateway/turns/approval.py, triggers/routines.py): a
# Retry too, as it runs as the asker (issue 36). A link acts as the person its token names, so
# in a group these links never go into the chat: each person who may answer gets their own,
# signed for them, in a 1:1 robot message.
ANSWERS = frozenset({ACTION_CONFIRM, ACTION_REJECT})
ROUTINE_ANSWERS = frozenset({ACTION_ROUTINE_CONFIRM, ACTION_ROUTINE_CANCEL})
PRIVATE = ANSWERS | ROUTINE_ANSWERS | {ACTION_RETRY}


def withheld_in_group(progress: Progress) -> frozenset[str]:
    """The buttons a group chat's message never carries as links: the private ones, and the
    options of the agent's question (a link would answer as the asker whoever opened it; the
    answer lists them numbered, to type: issue 36)."""
    options = {b.action_id for b in progress.buttons if b.action_id.startswith(ACTION_ANSWER)}
    return PRIVATE | options


def typed_options(progress: Progress) -> str:
    """The options of the agent's question as text to type (a group shows no option links),
    unless the answer lists them already; "" without options."""
    listed = [f"{i}. {option}" for i, option in enumerate(progress.options, 1)]
    if not listed or progress.status != "done" or all(o in progress.answer for o in listed):
        return ""
    return "Reply with one of:\n\n" + "\n".join(listed)


class DingTalkOutbound:
    """One integration's cards and replies: ``cards`` (None with ``cards: markdown``) and
    ``sender``; button links need the context's ``public_url``."""

    def __init__(
        self,
        *,
        settings: DingTalkIntegration,
        sender: Sender,
        cards: CardOutbound | None,
        context: AdapterContext,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.sender = sender
        self.cards = cards
        self.context = context
        self.clock = clock
        self.media = DingTalkMedia(sender=sender, api=sender.api)
        # The public card's link line per card handle, kept while its buttons stay the same (a
        # link's token changes with the clock: a new line would be a card update each render).
        self._link_lines: dict[str, tuple[tuple[str, ...], str]] = {}

    @staticmethod
    def _shown(progress: Progress) -> Progress:
        """The answer's images as links: robot markdown and AI cards show only images DingTalk
        can fetch itself, and the fetched ones follow as image messages (``media``)."""
        answer = shown(progress.answer)
        return progress if answer == progress.answer else replace(progress, answer=answer)

    async def _after(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if progress.final and progress.media:
            await self.media.send(reply_to, f"{handle}:{progress.turn_id}", progress)

    def _card_links(self, reply_to: Envelope, progress: Progress, handle: str) -> str:
        """The public card's buttons as markdown links (Stop, Retry, New conversation; Confirm /
        Reject go as a message: ``update_card``); "" without publicUrl or another card."""
        links = self._links(reply_to, progress, handle)
        if self.cards is None or not self.cards.public or links is None:
            return ""
        group = target(reply_to)[0]
        hidden = withheld_in_group(progress) if group else PRIVATE
        shown = tuple(b.action_id for b in progress.buttons if b.action_id not in hidden)
        kept = self._link_lines.get(handle)
        if kept is None or kept[0] != shown:
            labels = {b.action_id: b.label for b in progress.buttons}
            line = link_line([(labels[a], links(a)) for a in shown])
            kept = self._link_lines[handle] = (shown, line)
        if progress.final:
            self._link_lines.pop(handle, None)
        typed = typed_options(progress) if group else ""
        return f"{typed}\n\n{kept[1]}".strip() if typed else kept[1]

    def _links(
        self, reply_to: Envelope, progress: Progress, handle: str, user: str | None = None
    ) -> Callable[[str], str] | None:
        """Button links to ``/api/dingtalk/action/…`` with a signed token (needs publicUrl),
        acting as the asker, or as ``user`` (the person a private link is sent to)."""
        base = self.context.public_url
        if not base:
            return None
        extras = reply_extras(reply_to)
        claims = {
            "c": progress.conversation,
            "tu": progress.turn_id,
            "ch": str(extras.get("conversationId") or reply_to.chat.id),
            "g": 1 if reply_to.chat.type == "group" else 0,
            "u": user or str(extras.get("senderStaffId") or reply_to.sender.id),
            "m": handle,
        }
        secret = self.settings.client_secret.get_secret_value()
        expires = int(self.clock()) + self.settings.action_token_ttl_seconds
        url = f"{base.rstrip('/')}/api/dingtalk/action/{self.settings.id}?t="
        return lambda action: url + sign_action(secret, {**claims, "a": action}, expires_at=expires)

    async def _messages(
        self, reply_to: Envelope, progress: Progress, handle: str, key: str
    ) -> list[Message]:
        """The markdown message(s) of one state, sent under ``key``. In a group, Confirm /
        Reject go privately to each person who may answer (``_ask_privately``), and the group
        is told who was asked; Stop, Retry and New stay, as anyone there may /stop or /new."""
        links = self._links(reply_to, progress, handle)
        group = target(reply_to)[0]
        if links is None or not group:
            return render_messages(progress, links)
        hidden = withheld_in_group(progress)
        private = PRIVATE & {b.action_id for b in progress.buttons}
        if not private:
            return render_messages(progress, links, withheld=hidden, note=typed_options(progress))
        note = await self._ask_privately(reply_to, progress, handle, key, frozenset(private))
        return render_messages(progress, links, withheld=hidden, note=note)

    async def _ask_privately(
        self,
        reply_to: Envelope,
        progress: Progress,
        handle: str,
        key: str,
        actions: frozenset[str],
    ) -> str:
        """Send ``actions``' links to each person who may answer, each signed for them; the
        group's note saying who was asked, or that it could not be delivered."""
        people = answerers(self.settings, reply_to, routine=bool(actions & ROUTINE_ANSWERS))
        if not people:
            return "*Nobody in this chat may answer this: approvers are set in the config.*"
        asker = reply_to.sender.id if reply_to.kind not in ("schedule", "event") else None
        name = {asker: reply_to.sender.name or asker} if asker else {}
        chat = reply_to.chat.name
        asked_in = f"the group chat “{chat}”" if chat else "a group chat"
        reached: list[str] = []
        missed: list[str] = []
        for person in people:
            links = self._links(reply_to, progress, handle, user=person)
            assert links is not None
            message = private_message(progress, links, actions=actions, asked_in=asked_in)
            ok = await self.sender.to_user_once(f"{key}:dm:{person}", person, message)
            (reached if ok else missed).append(name.get(person, person))
        answer = (
            "Confirm or Reject"
            if actions & ANSWERS
            else "Retry"
            if ACTION_RETRY in actions
            else "Confirm or Cancel"
        )
        if reached and not missed:
            who = " or ".join(reached)
            return f"*Waiting for {who} to {answer} (sent to them privately).*"
        failed = (
            f"*{answer} could not be sent privately to {', '.join(missed)}: DingTalk refused "
            "the direct message. To answer, open a direct chat with this bot (so it may write "
            "to you), then ask again here; if that does not help, its admin may check the "
            "bot's permission to send direct messages.*"
        )
        if not reached:
            return failed
        return f"*Waiting for {' or '.join(reached)} to {answer} (sent privately).* {failed}"

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        progress = self._shown(progress)
        if self.cards is not None:
            links = self._card_links(reply_to, progress, self.cards.handle_of(idempotency_key))
            card = await self.cards.create(reply_to, progress, idempotency_key, links=links)
            if card is not None:
                await self._after(reply_to, card, progress)
                return card
            # The card reached no chat: this turn is told in markdown messages instead.
        handle = f"md:{idempotency_key}"
        # A first state that is already final (a turn given up) is claimed as "final", so the
        # update with the same state that follows sends nothing more.
        key = f"{idempotency_key}:{phase(progress) or 'start'}"
        messages = await self._messages(reply_to, progress, handle, key)
        await self.sender.once(key, messages, reply_to)
        await self._after(reply_to, handle, progress)
        return handle

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        progress = self._shown(progress)
        if handle.startswith("card:") and self.cards is not None:
            links = self._card_links(reply_to, progress, handle)
            rest = await self.cards.update(handle, progress, links=links)
            key = handle.removeprefix("card:")
            if rest:  # a long answer's parts past the card's: markdown messages, in order
                title = fit(progress.title, 200)
                await self.sender.once(f"{key}:more", [Message(title, p) for p in rest], reply_to)
            step = phase(progress)
            asks = step is not None and step.startswith("waiting")
            retry = any(b.action_id == ACTION_RETRY for b in progress.buttons)
            if self.cards.public and step is not None and (asks or (retry and target(reply_to)[0])):
                # The public card has no buttons: Confirm / Reject go as a markdown message
                # (privately in a group), as without a card; so does a group's Retry.
                ask = replace(progress, answer="")
                messages = await self._messages(reply_to, ask, handle, f"{key}:{step}")
                await self.sender.once(f"{key}:{step}", messages, reply_to)
            await self._after(reply_to, handle, progress)
            return
        step = phase(progress)
        if step is None:  # messages can't be edited: intermediate states are not sent
            return
        key = f"{handle.removeprefix('md:')}:{step}"
        messages = await self._messages(reply_to, progress, handle, key)
        await self.sender.once(key, messages, reply_to)
        await self._after(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        title = text.splitlines()[0][:30] if text else "Xpert"
        await self.sender.once(f"text:{idempotency_key}", as_messages(title, text), reply_to)
