"""What a steer (busyPolicy steer) hands the running run: the burst's first messages that may go
into it, and their attachments. A message goes only into the run of its own sender where the
expert acts as the sender (issue 36: another sender's message waits for a turn of its own, run
as them), and its files go along (issue 37)."""

from __future__ import annotations

from typing import Any

from gateway.config.bases import IntegrationBase
from gateway.edge.adapter import Adapter
from gateway.envelope import Envelope
from gateway.turns.attachments import collect
from gateway.turns.drive import ActiveRun


def steerable(run: ActiveRun, items: list[dict[str, Any]]) -> list[Envelope]:
    """The burst's first messages that may go into ``run``, up to the first click or trigger;
    in a group whose expert acts as the sender, up to the first message of another sender."""
    if run.turn is None or run.expert is None:
        return []
    settings = getattr(run.expert, "settings", None)
    own = (
        run.turn.chat_type == "group"
        and settings is not None
        and run.expert.acts_as_sender(settings)
    )
    take: list[Envelope] = []
    for item in items:
        envelope = Envelope.from_json(item)
        if envelope.kind != "message" or (own and envelope.sender.id != run.turn.sender_id):
            break
        take.append(envelope)
    return take


async def steer_files(
    run: ActiveRun,
    take: list[Envelope],
    adapter: Adapter | None,
    integ: IntegrationBase | None,
) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """The steered messages' attachments, fetched as a turn's are (for an expert that takes
    them, within the integration's caps), and what the card says of those left out."""
    if not any(e.attachments for e in take) or run.expert is None:
        return (), ()
    if adapter is None or integ is None:
        return (), ()
    return await collect(
        adapter,
        run.expert,
        tuple(take),
        max_count=integ.max_attachments_per_turn,
        max_bytes=integ.max_attachment_bytes_per_turn,
    )
