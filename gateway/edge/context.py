"""Everything the core lends an adapter, in one value: intake, the stores, a task spawner, the
public URL, the long-connection lease time and the hook its API clients count calls to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.edge.ingest import Ingest
from gateway.edge.platform_api import ApiCalls
from gateway.edge.stores import RecordStore, TimelineStore

__all__ = ["AdapterContext"]


def _uncounted(integration_id: str, platform: str) -> ApiCalls:
    return lambda endpoint, code, seconds: None


@dataclass(frozen=True, slots=True)
class AdapterContext:
    """Everything the core lends an adapter.

    ``ingest`` makes an event durable in Redis or raises ``IngestUnavailable`` (storage
    unavailable, shutting down): the adapter then refuses the event, and the platform delivers
    it again. ``ingest_or_spool`` is for paths whose platform never delivers an event again
    (long connections such as DingTalk stream and WeCom ``aibot_ws``): where ``ingest`` would
    raise, it keeps the event in the local spool and returns ``spooled`` (ack it); it raises
    ``IngestUnavailable`` only when the spool is full. ``timeline`` and ``records`` raise
    ``StoreUnavailable`` when Redis cannot be reached. ``connection_lease_ms``: the owner lease of
    a long connection (``OwnerLease.for_connection``; ``runtime.connectionLeaseSeconds``)."""

    ingest: Ingest
    ingest_or_spool: Ingest
    timeline: TimelineStore
    records: RecordStore
    spawn: Callable[[Awaitable[Any]], None]
    public_url: str | None = None
    connection_lease_ms: int = 15_000
    # (integrationId, platform) -> the hook its API clients report each call to (metrics).
    api_calls: Callable[[str, str], ApiCalls] = _uncounted
    # Whether the admin API (/v1.0) is on now (admin.token set; a reload may change it).
    admin_api: Callable[[], bool] = lambda: False
