"""What an adapter answers with: the :class:`Outbound` protocol the ``Adapter`` base hands its
cards and replies to, one implementation per platform (or per connection mode)."""

from __future__ import annotations

from typing import Protocol

from gateway.envelope import Envelope
from gateway.progress import Progress

__all__ = ["Outbound"]


class Outbound(Protocol):
    """Sends and updates one integration's cards and plain replies. The core reaches it through
    the adapter (``Adapter.send_card`` …), whose renderer shields each card call from a cancel
    (gateway/turns/render.py): an implementation needs no protection of its own."""

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        """Send the turn's card in reply to ``reply_to``; returns the handle used to update it.
        The same ``idempotency_key`` must never produce a second message."""
        ...

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        """Update the card in place to show ``progress``."""
        ...

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        """A plain reply (command answers, busy notices)."""
        ...
