"""Which chats a client may act in, and the governance every call goes through: a chat counts
when it has a live or recent session of one of the client's experts (the session the call acts
for); each client has a budget of calls per minute shared by all replicas; every call leaves one
row in the audit trail (``GET /v1.0/audit/events?event=mcp.call``) and one count in
``/metrics`` (``xgw_mcp_calls_total``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.config.mcp import McpClient, McpSettings
from gateway.config.settings import Settings
from gateway.edge.media import MediaSources
from gateway.envelope import Chat
from gateway.errors import GatewayError
from sessions import RecordStore, SessionRecords, SessionStore

log = structlog.get_logger("gateway.actions")

RATE_NS = "mcp-rate"  # records store namespace of the per-client minute counters
HOUR_MS = 3_600_000
OUTCOMES = ("ok", "refused", "unsupported", "rate_limited", "budget", "platform", "error")


class ToolRefused(GatewayError):
    """A call answered with a tool error (the agent reads ``reason``), nothing sent;
    ``outcome`` is what the audit trail and /metrics count it as."""

    def __init__(self, reason: str, outcome: str = "refused") -> None:
        super().__init__(reason)
        self.reason = reason
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class ActedFor:
    """The chat a call acts in and the session it acts for."""

    chat: Chat
    session_id: str
    xpert_id: str
    person: str  # who the session runs for (its first sender): a direct chat's other end


@dataclass(slots=True)
class CallRecord:
    """What the audit trail keeps of one call."""

    client: str
    tool: str
    integration_id: str
    chat_id: str
    at_ms: int
    session_id: str = ""
    bytes: int = 0
    outcome: str = "error"
    reason: str = ""

    def fields(self, ms: float) -> dict[str, Any]:
        return {
            "event": "mcp.call",
            "client": self.client,
            "tool": self.tool,
            "integrationId": self.integration_id,
            "chatId": self.chat_id,
            "sessionId": self.session_id,
            "bytes": self.bytes,
            "outcome": self.outcome,
            "reason": self.reason[:300],
            "at": self.at_ms,
            "ms": round(ms, 1),
        }


class CallMetrics:
    """``xgw_mcp_calls_total{client,tool,outcome}`` and ``xgw_mcp_call_seconds{tool}``; clients
    and tools come from the config and the fixed tool list (bounded labels). One per registry
    (``of``): a replica's app may be built again on the same metrics."""

    @classmethod
    def of(cls, registry: CollectorRegistry) -> CallMetrics:
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "xgw_mcp_calls",
            "MCP tool calls, by client, tool and outcome",
            ["client", "tool", "outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "xgw_mcp_call_seconds",
            "MCP tool calls' time, platform calls and budget waits included",
            ["tool"],
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

    def observe(self, record: CallRecord, seconds: float) -> None:
        self.calls.labels(record.client, record.tool, record.outcome).inc()
        self.seconds.labels(record.tool).observe(seconds)


_BY_REGISTRY: WeakKeyDictionary[CollectorRegistry, CallMetrics] = WeakKeyDictionary()


def expert_sources(settings: Settings, xpert_id: str) -> MediaSources:
    """Where a file an agent names by URL may be fetched from: its expert's own origin and its
    ``mediaHosts``, as for the answer's media (gateway/edge/media.py)."""
    expert = settings.expert(xpert_id)
    if expert is None:
        return MediaSources()
    base = getattr(expert, "base_url", None)
    own: tuple[str, ...] = ()
    if isinstance(base, str) and "://" in base:
        scheme, rest = base.split("://", 1)
        own = (f"{scheme}://{rest.split('/', 1)[0]}",)
    return MediaSources.of((*own, *expert.media_hosts))


class Governor:
    """The chat check, the rate and the audit of the calls of every client."""

    def __init__(
        self, *, records: SessionRecords, store: SessionStore, limits: RecordStore
    ) -> None:
        self.records = records
        self.store = store
        self.limits = limits

    async def acted_for(
        self, client: McpClient, mcp: McpSettings, integration_id: str, chat_id: str, now_ms: int
    ) -> ActedFor:
        """The newest session of ``chat_id`` that runs one of the client's experts and was
        active within ``mcp.recentHours``; ToolRefused when there is none."""
        since = now_ms - int(mcp.recent_hours * HOUR_MS)
        ids = await self.records.of_chat(integration_id, chat_id, limit=50)
        infos = await self.records.audit.session_infos(integration_id, ids)
        for session_id in ids:  # newest first
            info = infos.get(session_id)
            if info is None or info.get("xpertId") not in client.experts:
                continue
            if int(info.get("lastActiveAt") or 0) < since:
                break
            kind = "group" if info.get("chatType") == "group" else "p2p"
            person = (await self.records.get(session_id)).get("senderId", "")
            chat = Chat(id=chat_id, type=kind)
            return ActedFor(chat, session_id, str(info["xpertId"]), str(person))
        raise ToolRefused(
            "no live or recent session of this client's experts in that chat: nothing sent"
        )

    async def count(self, client: McpClient, per_minute: int, now_ms: int) -> None:
        """One call of ``client`` this minute, across replicas; over the bound: ToolRefused."""
        minute = now_ms // 60_000
        used = await self.limits.incr(RATE_NS, f"{client.id}:{minute}", ttl_ms=120_000)
        if used > per_minute:
            raise ToolRefused(
                f"over {per_minute} calls per minute for this client: try again in a minute",
                "rate_limited",
            )

    async def audit(self, record: CallRecord, ms: float) -> None:
        try:
            await self.store.audit(record.fields(ms))
        except Exception as exc:  # Redis away: the call stands, its row is lost (logged)
            log.warning("mcp call not audited", client=record.client, error=str(exc))
