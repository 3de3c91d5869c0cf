"""One card per external object, in its parts: the record of an open object's card (real Redis,
the test's own prefix) and the first showing of a turn in a card an earlier turn left, which
falls back to a new card when the platform no longer lets that one be edited."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.config.file import load_settings
from gateway.edge.adapter import Adapter
from gateway.envelope import Chat, Envelope, Sender, Subject
from gateway.progress import Progress
from gateway.runtime.cli import settings_model
from gateway.turns.event_cards import EventCards
from gateway.turns.kinds import TurnKinds
from gateway.turns.render import CardRenderer
from sessions import EventCardStore, KeyBuilder
from tests.support.configs import base_config

CONV = "console|group:team:t:github:pr:o/r#1"


def event(final: bool = False, kind: str = "event") -> Envelope:
    return Envelope(
        integration_id="console",
        platform="console",
        event_id="github:d1",
        kind=kind,  # type: ignore[arg-type]
        chat=Chat(id="team", type="group"),
        sender=Sender(id="event:github"),
        subject=Subject(source="github", key="pr:o/r#1", final=final),
    )


class StaleCardAdapter(Adapter):
    """A platform on which the old card can no longer be edited (deleted, too old)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.updated: list[str] = []

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        self.sent.append(idempotency_key)
        return f"new-{idempotency_key}"

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        self.updated.append(handle)
        if handle.startswith("old"):
            raise RuntimeError("message can no longer be edited")

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        raise AssertionError("no text expected")


async def test_a_card_that_can_no_longer_be_edited_gives_way_to_a_new_one() -> None:
    adapter = StaleCardAdapter()
    handles: list[str] = []

    async def remember(handle: str) -> None:
        handles.append(handle)

    renderer = CardRenderer(
        adapter=adapter,
        reply_to=event(),
        interval_ms=100,
        idempotency_key="turn-2",
        handle="old-card",
        on_handle=remember,
    )
    progress = Progress(turn_id="turn-2", conversation=CONV)
    await TurnKinds._reuse(renderer, progress)
    await renderer.close(progress.finish("success"))
    assert adapter.updated[0] == "old-card" and adapter.sent == ["turn-2"]
    assert renderer.handle == "new-turn-2" and handles == ["new-turn-2"]


async def test_an_open_objects_card_is_kept_and_a_final_event_lets_go_of_it(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = base_config(prefix)
    cfg["integrations"][0]["events"] = [
        {"source": "github", "secret": "s", "chatId": "team", "cardTtlHours": 2}
    ]
    settings = load_settings(cfg, model=settings_model())
    keys = KeyBuilder(prefix=prefix)
    cards = EventCards(
        store=EventCardStore(client=redis_client, keys=keys), settings=lambda: settings
    )
    assert await cards.live(CONV, event()) is None
    await cards.settle(CONV, event(), "card-1")
    assert await cards.live(CONV, event()) == "card-1"
    ttl = await redis_client.pttl(keys.event_card(CONV))
    assert 2 * 3_600_000 - 60_000 < ttl <= 2 * 3_600_000  # cardTtlHours
    # a message of the same conversation (a click, a command) has no object's card
    assert await cards.live(CONV, event(kind="message")) is None
    await cards.settle(CONV, event(final=True), "card-1")
    assert await cards.live(CONV, event()) is None
    assert await redis_client.exists(keys.event_card(CONV)) == 0
