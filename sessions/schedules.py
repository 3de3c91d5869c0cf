"""Schedule state in Redis: runtime schedules, the last fire of each schedule, fire claims and
routines waiting for their Confirm.

Every call is one command on one key (or a script on one key), so each runs on a Redis Cluster
as on a single server (keys.py). Schedules are stored as JSON this module does not interpret.
"""

from __future__ import annotations

from typing import cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder

# Move a schedule's last fire forward, never back; returns the previous value ('' if none) when
# it moved, nil when it was already there or further.
_ADVANCE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and tonumber(cur) >= tonumber(ARGV[2]) then return false end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return cur or ''
"""

# Delete a claim only while it is still ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class ScheduleStore:
    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys
        self._advance = client.register_script(_ADVANCE)
        self._release = client.register_script(_RELEASE)

    # --- runtime schedules -------------------------------------------------------------------
    async def runtime(self) -> dict[str, str]:
        """Every runtime schedule: id -> JSON."""
        return cast(dict[str, str], await self.redis.hgetall(self.keys.schedules()))

    async def add(self, schedule_id: str, data: str, *, start_ms: int) -> bool:
        """Store a new runtime schedule (False: the id is taken); it fires after ``start_ms``."""
        if not await self.redis.hsetnx(self.keys.schedules(), schedule_id, data):
            return False
        await self.redis.hset(self.keys.schedule_fires(), schedule_id, str(start_ms))
        return True

    async def remove(self, schedule_id: str) -> bool:
        removed = bool(await self.redis.hdel(self.keys.schedules(), schedule_id))
        if removed:
            await self.redis.hdel(self.keys.schedule_fires(), schedule_id)
        return removed

    # --- fires -------------------------------------------------------------------------------
    async def last_fires(self) -> dict[str, int]:
        """The last fire (epoch ms) of every schedule that has one."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.schedule_fires()))
        return {k: int(v) for k, v in raw.items() if v.isdigit()}

    async def begin(self, schedule_id: str, start_ms: int) -> None:
        """A schedule seen for the first time fires after ``start_ms`` (nothing retroactive)."""
        await self.redis.hsetnx(self.keys.schedule_fires(), schedule_id, str(start_ms))

    async def advance(self, schedule_id: str, fire_ms: int) -> int | None:
        """Record ``fire_ms`` as the schedule's last fire unless a later one is. Returns the
        previous last fire (0 for none) when this call moved it, None when it did not: of all
        replicas, one sees it move."""
        previous = await self._advance(
            keys=[self.keys.schedule_fires()], args=[schedule_id, fire_ms]
        )
        if previous is None:
            return None
        text = previous.decode() if isinstance(previous, bytes) else str(previous)
        return int(text) if text.isdigit() else 0

    async def claim(self, schedule_id: str, fire_ms: int, owner: str, *, ttl_ms: int) -> bool:
        """Claim one fire; True for the one caller that gets it (until ``ttl_ms`` passes)."""
        key = self.keys.schedule_claim(schedule_id, fire_ms)
        return bool(await self.redis.set(key, owner, nx=True, px=ttl_ms))

    async def release(self, schedule_id: str, fire_ms: int, owner: str) -> None:
        """Give a claimed fire back (its turn could not be stored), so it is tried again."""
        key = self.keys.schedule_claim(schedule_id, fire_ms)
        await self._release(keys=[key], args=[owner])

    # --- routines waiting for Confirm --------------------------------------------------------
    async def put_routine(
        self, token: str, data: str, *, ttl_ms: int, only_if_there: bool = False
    ) -> None:
        """Keep a routine for its Confirm; ``only_if_there``: update one not yet answered."""
        await self.redis.set(self.keys.routine(token), data, px=ttl_ms, xx=only_if_there)

    async def routine(self, token: str) -> str | None:
        value = await self.redis.get(self.keys.routine(token))
        return cast(str | None, value)

    async def take_routine(self, token: str) -> str | None:
        """The routine, removed: of several clicks, only one gets it."""
        value = await self.redis.getdel(self.keys.routine(token))
        return cast(str | None, value)
