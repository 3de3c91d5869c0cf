"""The group watch handler of the intake chain (``gateway.intake.router``): a group message
nobody addressed to the bot is offered to the integration's watches (the config's, then the
runtime ones by id).

The first enabled watch the message matches decides, so that a redelivered event meets the same
watch: its match becomes an Envelope of kind ``watch`` (the message itself, carrying the watch's
id, instruction and expert in ``trigger``) stored by one script with the watch's cooldown
(``sessions.watch``). ``fired``: the cooldown began and the message opens (or joins) its
conversation's burst like any message; ``merged``: the watch is cooling down but the burst its
match opened is still unclaimed, so the message joins it; ``cool``: the message is the chat's
chatter as before (``None``: the chain goes on with it).

The watch's conversation depends only on (integration, chat, watch): the chat's own under
``sessionScope: chat`` (a watch turn shares the chat's session), a chat-wide one under the other
scopes, and one of the watch's own when the watch names an expert (a bound session keeps its
expert, so a watch with ``xpertId`` needs a session of its own).

Runtime watches are read from Redis at most every ``cache_seconds`` (2 s) per integration and
replica; an admin change on this replica applies at once (``invalidate``), on the others within
that time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog
from pydantic import ValidationError

from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.config.watch import Watch
from gateway.conversation import ConversationId
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Envelope, Trigger
from gateway.errors import first_problem
from gateway.intake.burst import burst_write
from gateway.intake.router import Incoming
from sessions import SessionStore
from sessions.key_ids import id_part
from sessions.watch import WatchStore

log = structlog.get_logger("gateway.watch")


@dataclass(frozen=True)
class WatchEntry:
    """A watch as it applies now: the config's or a runtime one, with its enabled override."""

    watch: Watch
    source: Literal["config", "runtime"]
    enabled: bool


@dataclass
class _Runtime:
    loaded_at: float
    watches: dict[str, Watch] = field(default_factory=dict)
    enabled: dict[str, bool] = field(default_factory=dict)


def watch_conversation(integ: IntegrationBase, chat_id: str, watch: Watch) -> str:
    thread = f"watch:{id_part(watch.id)}" if watch.xpert_id else None
    return str(ConversationId(integ.id, "group", chat_id, None, thread))


def parse_runtime(integration_id: str, raw: dict[str, str], at: float) -> _Runtime:
    """The runtime hash read into watches and overrides; an entry that no longer validates
    (written by another version) is skipped with a warning."""
    runtime = _Runtime(loaded_at=at)
    for name, value in raw.items():
        kind, _, watch_id = name.partition(":")
        if kind == "on":
            runtime.enabled[watch_id] = value == "1"
        elif kind == "w":
            try:
                runtime.watches[watch_id] = Watch.model_validate_json(value)
            except ValidationError as exc:
                log.warning(
                    "runtime watch skipped: invalid",
                    integration_id=integration_id,
                    watch=watch_id,
                    error=first_problem(exc),
                )
    return runtime


class GroupWatch:
    def __init__(
        self,
        *,
        store: SessionStore,
        settings: Callable[[], Settings],
        wake: Callable[[int, str], None],
        spawn: Callable[[Awaitable[Any]], None],
        clock: Callable[[], int],
        cache_seconds: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.watches = WatchStore(store=store)
        self.settings = settings
        self.wake = wake
        self.spawn = spawn
        self.clock = clock
        self.cache_seconds = cache_seconds
        self.monotonic = monotonic
        self._cache: dict[str, _Runtime] = {}

    def invalidate(self, integration_id: str) -> None:
        self._cache.pop(integration_id, None)

    async def _runtime(self, integration_id: str, *, fresh: bool = False) -> _Runtime:
        now = self.monotonic()
        cached = self._cache.get(integration_id)
        if fresh or cached is None or now - cached.loaded_at >= self.cache_seconds:
            raw = await self.watches.runtime(integration_id)
            cached = self._cache[integration_id] = parse_runtime(integration_id, raw, now)
        return cached

    async def entries(self, integ: IntegrationBase, *, fresh: bool = False) -> list[WatchEntry]:
        """The integration's watches in the order they are offered a message."""
        runtime = await self._runtime(integ.id, fresh=fresh)
        config = {w.id for w in integ.watches}
        entries = [
            WatchEntry(w, "config", runtime.enabled.get(w.id, w.enabled)) for w in integ.watches
        ]
        for watch_id in sorted(set(runtime.watches) - config):
            watch = runtime.watches[watch_id]
            entries.append(
                WatchEntry(watch, "runtime", runtime.enabled.get(watch_id, watch.enabled))
            )
        return entries

    async def cooldowns(
        self, integ: IntegrationBase, chat_id: str, watches: list[Watch]
    ) -> list[dict[str, Any] | None]:
        """Each watch's cooldown in ``chat_id`` as it stands (None: not cooling down)."""
        records = await self.watches.cooldowns(
            [(watch_conversation(integ, chat_id, w), w.id) for w in watches]
        )
        now, out = self.clock(), []
        for raw in records:
            record = json.loads(raw) if raw else {}
            until = int(record.get("until") or 0)
            out.append(
                {
                    "chatId": chat_id,
                    "remainingMs": until - now,
                    "firedAt": record.get("at"),
                    "eventId": record.get("eventId"),
                }
                if until > now
                else None
            )
        return out

    # --- the handler --------------------------------------------------------------------------
    def matches(self, incoming: Incoming) -> bool:
        return incoming.unaddressed and incoming.env.kind == "message"

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.offer(incoming.integ, incoming.env)

    async def offer(self, integ: IntegrationBase, env: Envelope) -> IngestOutcome | None:
        """Start (or join) a watch turn for an unaddressed group message; None when no watch
        takes it (none matches, or the one it matches is cooling down)."""
        if not integ.watches and not (await self._runtime(integ.id)).watches:
            return None
        entries = await self.entries(integ)
        watch = next((e.watch for e in entries if e.enabled and e.watch.matches(env)), None)
        if watch is None:
            return None
        if watch.xpert_id is not None and self.settings().expert(watch.xpert_id) is None:
            log.warning("watch names an expert that is not configured", watch=watch.id)
            return None
        conv = watch_conversation(integ, env.chat.id, watch)
        now, cooldown_ms = self.clock(), watch.cooldown_seconds * 1000
        trigger = Trigger(id=watch.id, text=watch.text, xpert_id=watch.xpert_id)
        matched = env.model_copy(update={"kind": "watch", "trigger": trigger})
        incoming = Incoming(matched, integ, conv)
        result = await self.watches.intake(
            burst_write(incoming, "collect", now_ms=now, cap=True),
            watch_id=watch.id,
            cooldown_ms=cooldown_ms,
            cooldown_value=json.dumps(
                {"at": now, "until": now + cooldown_ms, "eventId": env.event_id}
            ),
        )
        if result.status == "dup":
            return IngestOutcome("duplicate")
        if result.status == "cool":
            log.debug("watch matched while cooling down", watch=watch.id)
            return None
        if result.status == "full":  # the watch's burst is full (issue 25): chatter, as cool
            log.warning("watch matched with its buffer full: not taken", watch=watch.id)
            return None
        if not result.busy:
            self.wake(result.due_ms, conv)
        if result.status == "fired":
            log.info("watch fired", watch=watch.id, conversation=conv)
            self.spawn(
                self.store.audit(
                    {
                        "event": "watch.fire",
                        "watch": watch.id,
                        "conversation": conv,
                        "eventId": env.event_id,
                        "sender": env.sender.id,
                        "at": now,
                    }
                )
            )
        return IngestOutcome("queued", f"watch {watch.id} {result.status}")
