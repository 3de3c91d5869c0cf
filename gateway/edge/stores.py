"""The shared stores the core lends an adapter: small expiring records (reply handles, card
state, leases) and chat timelines, each raising ``StoreUnavailable`` when Redis cannot be
reached (nothing was written; what to do is the caller's call)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

# The one storage error adapters see; re-exported here as adapters never import ``sessions``.
from sessions import StoreUnavailable as StoreUnavailable

__all__ = ["RecordStore", "StoreUnavailable", "TimelineStore"]


class RecordStore(Protocol):
    """Small namespaced records with an expiry, shared by the replicas (reply handles, card
    state, leases): adapters never spell a Redis key. Raises ``StoreUnavailable``."""

    async def put(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> None: ...

    async def put_new(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> bool:
        """Store only if absent (a claim); True when this call stored it."""
        ...

    async def renew(self, namespace: str, key: str, value: str, *, ttl_ms: int) -> bool:
        """Extend the expiry while the record still holds ``value`` (an owner lease)."""
        ...

    async def release(self, namespace: str, key: str, value: str) -> bool:
        """Delete the record while it still holds ``value``."""
        ...

    async def get(self, namespace: str, key: str) -> str | None: ...

    async def delete(self, namespace: str, key: str) -> None: ...

    async def incr(self, namespace: str, key: str, *, ttl_ms: int) -> int:
        """A strictly increasing counter shared by all replicas."""
        ...


class TimelineStore(Protocol):
    """Chat transcripts with every change published to all replicas (the console's "platform
    server"). Raises ``StoreUnavailable``."""

    async def put(
        self,
        integration_id: str,
        chat_id: str,
        record: dict[str, Any],
        *,
        mode: Literal["create", "upsert"] = "upsert",
    ) -> bool: ...

    async def get(
        self, integration_id: str, chat_id: str, record_id: str
    ) -> dict[str, Any] | None: ...

    async def list(self, integration_id: str, chat_id: str) -> list[dict[str, Any]]: ...

    def changes(self) -> AsyncIterator[dict[str, Any]]:
        """Every change published by any replica, until the consumer stops iterating."""
        ...
