"""Group watch state: an integration's runtime watches, and the intake of a matched message with
the watch's cooldown in one atomic step.

Runtime watches are one hash per integration (``KeyBuilder.watches``): field ``w:<id>`` holds a
watch made through the admin API (JSON this module does not interpret), ``on:<id>`` an enabled
override ("1"/"0") for any watch, one of the config's included.

The cooldown key lives in the slot of the watch's conversation, so ``watch_intake.lua`` (which
runs ``intake.lua`` inside it) checks the event's dedup key, then the cooldown (free: it is set,
with the time it ends and a PX of its length; held: the message may only join the burst the
cooldown's match opened), and stores the message, in one round trip: the decision is made
exactly once across replicas, and a redelivered event neither starts a second turn nor claims
the cooldown again. The gateway's clock decides when a cooldown ends (tests inject one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.results import BurstWrite
from sessions.scripts import lua
from sessions.store import SessionStore, StoreUnavailable


@dataclass(frozen=True, slots=True)
class WatchIntakeResult:
    status: Literal["fired", "merged", "cool", "dup", "full"]
    due_ms: int
    busy: bool


class WatchStore:
    def __init__(self, *, store: SessionStore) -> None:
        self.store = store  # read at use: nothing of it is touched before the first call
        self._script: AsyncScript | None = None

    @property
    def redis(self) -> RedisClient:
        return self.store.redis

    @property
    def keys(self) -> KeyBuilder:
        return self.store.keys

    @property
    def _intake(self) -> AsyncScript:
        if self._script is None:
            text = lua("watch_intake.lua").replace("--INTAKE--", lua("intake.lua"), 1)
            self._script = self.redis.register_script(text)
        return self._script

    # --- intake ----------------------------------------------------------------------------
    async def intake(
        self, write: BurstWrite, *, watch_id: str, cooldown_ms: int, cooldown_value: str
    ) -> WatchIntakeResult:
        """Store a matched message unless it is a duplicate or the watch is cooling down (and
        the burst its last match opened has been claimed); returns once it is durable."""
        store = self.store
        try:
            reply = await store.pipe.evalsha(
                self._intake,
                [
                    *store.intake_keys(write),
                    self.keys.watch_cooldown(write.conversation, watch_id),
                ],
                [*store.intake_args(write), watch_id, cooldown_ms, cooldown_value],
            )
            status, due, busy = reply[:3]
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc
        return WatchIntakeResult(status=status, due_ms=int(due), busy=bool(int(busy)))

    async def cooldowns(self, pairs: list[tuple[str, str]]) -> list[str | None]:
        """The cooldown record of each (conversation, watch id), None where there is none: one
        pipeline (on a cluster, one round trip per node involved)."""
        if not pairs:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for conversation, watch_id in pairs:
                pipe.get(self.keys.watch_cooldown(conversation, watch_id))
            return cast(list[str | None], await pipe.execute())

    # --- runtime watches -------------------------------------------------------------------
    async def runtime(self, integration_id: str) -> dict[str, str]:
        """The integration's hash: ``w:<id>`` watch JSON, ``on:<id>`` enabled overrides."""
        return cast(dict[str, str], await self.redis.hgetall(self.keys.watches(integration_id)))

    async def put(self, integration_id: str, watch_id: str, watch_json: str) -> None:
        """Create or replace a runtime watch (its own ``enabled`` replaces any override)."""
        key = self.keys.watches(integration_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, f"w:{watch_id}", watch_json)
            pipe.hdel(key, f"on:{watch_id}")
            await pipe.execute()

    async def set_enabled(self, integration_id: str, watch_id: str, enabled: bool) -> None:
        await self.redis.hset(
            self.keys.watches(integration_id), f"on:{watch_id}", "1" if enabled else "0"
        )

    async def delete(self, integration_id: str, watch_id: str) -> bool:
        """Remove a runtime watch and its override; False if there was no such runtime watch."""
        key = self.keys.watches(integration_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(key, f"w:{watch_id}")
            pipe.hdel(key, f"on:{watch_id}")
            removed, _ = await pipe.execute()
        return bool(removed)
