"""Everything the core lends an adapter, in one value: intake, the stores, a task spawner, the
public URL, the long-connection lease time and the hook its API clients count calls to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.config.bases import IntegrationBase
from gateway.config.platform_limits import platform_defaults
from gateway.edge.call_budget import BudgetEvents, CallBudget
from gateway.edge.ingest import Ingest
from gateway.edge.platform_api import ApiCalls
from gateway.edge.stores import RecordStore, TimelineStore
from sessions import PlatformBudgets

__all__ = ["AdapterContext", "budgets_for"]


def _uncounted(integration_id: str, platform: str) -> ApiCalls:
    return lambda endpoint, code, seconds: None


def _unpaced(settings: IntegrationBase, app: str) -> CallBudget | None:
    return None


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
    a long connection (``OwnerLease.for_connection``; ``runtime.connectionLeaseSeconds``).
    ``platform_budget``: (integration, its app's id) -> the budget its API clients wait on
    (``gateway.edge.call_budget``), shared with every replica; None when not paced."""

    ingest: Ingest
    ingest_or_spool: Ingest
    timeline: TimelineStore
    records: RecordStore
    spawn: Callable[[Awaitable[Any]], None]
    public_url: str | None = None
    connection_lease_ms: int = 15_000
    # (integrationId, platform) -> the hook its API clients report each call to (metrics).
    api_calls: Callable[[str, str], ApiCalls] = _uncounted
    platform_budget: Callable[[IntegrationBase, str], CallBudget | None] = _unpaced
    # Whether the admin API (/v1.0) is on now (admin.token set; a reload may change it).
    admin_api: Callable[[], bool] = lambda: False


def budgets_for(
    store: PlatformBudgets, events: BudgetEvents | None
) -> Callable[[IntegrationBase, str], CallBudget | None]:
    """``AdapterContext.platform_budget``: each integration's budget over ``store``, from its
    ``platformLimits`` over its platform's published figures; None when it is not paced."""

    def budget(settings: IntegrationBase, app: str) -> CallBudget | None:
        limits = settings.platform_limits.over(platform_defaults(settings))
        if not limits.enabled:
            return None
        return CallBudget(
            store=store,
            app=f"{settings.platform}:{app}",
            integration_id=settings.id,
            limits=limits,
            events=events,
        )

    return budget
