"""Small namespaced records with an expiry, for adapters' own state (reply handles, stream
sequences, cached tokens shared by replicas): adapters never spell a Redis key themselves.
Every call raises ``StoreUnavailable`` when Redis cannot serve it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

from redis.exceptions import RedisError

from sessions.autopipe import ScriptPipe
from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.scripts import lua
from sessions.store import StoreUnavailable


@contextlib.contextmanager
def unavailable() -> Iterator[None]:
    """Whatever the client raises when Redis cannot serve a call (unreachable, read-only, out of
    memory) leaves ``sessions`` as :class:`StoreUnavailable`: callers catch one exception."""
    try:
        yield
    except (RedisError, OSError) as exc:
        raise StoreUnavailable(str(exc)) from exc


class RecordStore:
    """With ``pipe`` (the session store's auto-pipeline), ``put``, ``get`` and ``delete`` go
    out with the other script calls made meanwhile: a turn makes several of them (its card as
    last rendered after every update, its typing reaction), and each through the client paid
    for a pool checkout, a retry wrapper and a write of its own - while webhooks came in, as
    much CPU as all of intake's own Redis calls (issue 27, docs/performance.md)."""

    def __init__(
        self, *, client: RedisClient, keys: KeyBuilder, pipe: ScriptPipe | None = None
    ) -> None:
        self.redis = client
        self.keys = keys
        self.pipe = pipe
        self._put = client.register_script(lua("record_put.lua"))
        self._get = client.register_script(lua("record_get.lua"))
        self._delete = client.register_script(lua("record_delete.lua"))

    async def put(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> None:
        name = self.keys.record(namespace, key)
        with unavailable():
            if self.pipe is not None:
                await self.pipe.evalsha(self._put, [name], [value, ttl_ms])
            else:
                await self.redis.set(name, value, px=ttl_ms)

    async def put_new(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> bool:
        """Store only if absent (a claim / dedup); True when this call stored it."""
        with unavailable():
            return bool(
                await self.redis.set(self.keys.record(namespace, key), value, px=ttl_ms, nx=True)
            )

    async def renew(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> bool:
        """Extend the expiry only while the record still holds ``value`` (an owner lease),
        atomically; False when it expired or someone else holds it."""
        with unavailable():
            return bool(
                await self.redis.eval(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                    "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end",
                    1,
                    self.keys.record(namespace, key),
                    value,
                    ttl_ms,
                )
            )

    async def release(self, namespace: str, key: str, value: str) -> bool:
        """Delete the record only while it still holds ``value``, atomically."""
        with unavailable():
            return bool(
                await self.redis.eval(
                    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
                    "return redis.call('DEL', KEYS[1]) else return 0 end",
                    1,
                    self.keys.record(namespace, key),
                    value,
                )
            )

    async def get(self, namespace: str, key: str) -> str | None:
        name = self.keys.record(namespace, key)
        with unavailable():
            if self.pipe is None:
                return cast(str | None, await self.redis.get(name))
            value = await self.pipe.evalsha(self._get, [name], [])
        return value.decode() if isinstance(value, bytes) else cast(str | None, value)

    async def delete(self, namespace: str, key: str) -> None:
        name = self.keys.record(namespace, key)
        with unavailable():
            if self.pipe is not None:
                await self.pipe.evalsha(self._delete, [name], [])
            else:
                await self.redis.delete(name)

    async def incr(self, namespace: str, key: str, *, ttl_ms: int) -> int:
        """A strictly increasing counter shared by all replicas (e.g. a card's update sequence)."""
        with unavailable():
            name = self.keys.record(namespace, key)
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.incr(name)
                pipe.pexpire(name, ttl_ms)
                value, _ = await pipe.execute()
            return int(value)
