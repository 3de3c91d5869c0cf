"""What an adapter is to the core: a factory found by entry point, per-integration adapters,
and everything the core lends them (intake, record and timeline stores) with what these raise.

Adapters import only ``gateway.edge`` (this module, the webhook skeleton ``gateway.edge.webhook``,
leases and downloads) and the public core types (``gateway.envelope``, ``gateway.progress``,
``gateway.config.settings``, ``gateway.conversation``), never ``sessions`` or
``gateway.intake.pipeline``; the core never imports an adapter (DESIGN.md §2). (Over 300 lines: the
whole contract between the core and the adapters, kept in one module.)
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Generic, Literal, Protocol, TypeVar

import aiohttp
from aiohttp import web

from gateway.config.bases import IntegrationBase

# Downloads of URLs a platform hands out (redirects followed by hand, each checked): part of the
# adapter kit, kept in their own module.
from gateway.edge.downloads import LOCAL_HOSTS as LOCAL_HOSTS
from gateway.edge.downloads import Origin as Origin
from gateway.edge.downloads import RedirectRefused as RedirectRefused
from gateway.edge.downloads import get_checked as get_checked
from gateway.edge.downloads import local_origin as local_origin
from gateway.edge.downloads import origin as origin
from gateway.edge.leases import LeasedConnection, OwnerLease, holder_token
from gateway.envelope import Attachment, Envelope, asker_of
from gateway.errors import PlatformApiError as PlatformApiError
from gateway.policy.route import route_of
from gateway.progress import Progress
from sessions import StoreUnavailable

ENTRY_POINT_GROUP = "xpert_gateway.adapters"

__all__ = [
    "ENTRY_POINT_GROUP",
    "Adapter",
    "AdapterContext",
    "AdapterFactory",
    "ApiCalls",
    "FetchedFile",
    "Ingest",
    "IngestOutcome",
    "IngestUnavailable",
    "LeasedConnection",
    "LiveAdapters",
    "OwnerLease",
    "PlatformApiError",
    "RecordStore",
    "ShuttingDown",
    "StoreUnavailable",
    "TimelineStore",
    "answerers",
    "approvers_for",
    "body_type",
    "discover_adapters",
    "holder_token",
    "log_failure",
    "platform_refusal",
    "read_body",
]


# --- what can go wrong, as adapters see it ---------------------------------------------------
# ``StoreUnavailable`` (re-exported from ``sessions``): a record or timeline store could not reach
# Redis (down, read-only, out of memory). Nothing was written; what to do is the caller's call.


class IngestUnavailable(StoreUnavailable):
    """Intake did not make the event durable (storage unreachable, read-only or full, the local
    spool full): nothing was stored, so the platform must not be told it was. Raised by intake
    for every storage failure, whatever the client library raised; webhooks answer 503 and the
    platform delivers the event again."""


class ShuttingDown(IngestUnavailable):
    """The replica stopped taking new work; the platform retries, against another replica."""


def platform_refusal(exc: BaseException) -> dict[str, Any] | None:
    """The log fields of the platform API error that ``exc`` is or was raised from (its cause
    or context chain, a few links deep), else None."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        if isinstance(seen, PlatformApiError):
            return {"error": type(seen).__name__, **seen.log_fields()}
        seen = seen.__cause__ or seen.__context__
    return None


def log_failure(logger: Any, event: str, exc: BaseException, **ids: Any) -> None:
    """``exc`` logged under ``event``: one warning with the platform's code when a platform API
    refused or did not answer (``platform_refusal``), else with its traceback."""
    refusal = platform_refusal(exc)
    if refusal is None:
        logger.exception(event, **ids)
    else:
        logger.warning(f"{event}: a platform API call failed", **ids, **refusal)


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What became of an inbound event; adapters ack the platform only after this returns.

    ``spooled``: Redis was unreachable, so the event went into the replica's local spool (on
    disk); it goes into intake as soon as Redis answers again (``ingest_or_spool`` only).
    ``refused``: over a budget (``reason``: which limit); nothing stored, the chat was told when
    it can ask again (gateway/policy/budgets.py), or a click on a Confirm / Reject that is not the
    clicker's to answer (gateway/turns/approval.py). ``notice``: a short answer for the clicker
    alone, which adapters show where the platform can (a callback's toast, the action page)."""

    status: Literal["queued", "duplicate", "ignored", "busy", "handled", "spooled", "refused"]
    reason: str = ""
    notice: str = ""


class Ingest(Protocol):
    """Makes an event durable; raises :class:`IngestUnavailable` when it could not."""

    async def __call__(self, envelope: Envelope) -> IngestOutcome: ...


class ApiCalls(Protocol):
    """Counts an adapter's platform API calls for ``/metrics``: one call per HTTP exchange, a
    retry included. ``endpoint``: a fixed short name per API method (``reply``, ``patch``, never
    a URL with ids in it); ``code``: ``ok``, or the platform's error code, or ``http_<status>``,
    or the exception's name when no answer came."""

    def __call__(self, endpoint: str, code: str, seconds: float) -> None: ...


def _uncounted(integration_id: str, platform: str) -> ApiCalls:
    return lambda endpoint, code, seconds: None


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


@dataclass(frozen=True, slots=True)
class AdapterContext:
    """Everything the core lends an adapter.

    ``ingest`` makes an event durable in Redis or raises :class:`IngestUnavailable` (storage
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


def approvers_for(integ: IntegrationBase, asked: Envelope) -> list[str]:
    """The approvers of the chat a question was asked in: those of the first route that holds
    for the interrupted turn's message (when it sets them), else the integration's."""
    matched = route_of(integ.routes, asked)
    if matched is not None and matched[1].approvers is not None:
        return matched[1].approvers
    return integ.approvers


def answerers(integ: IntegrationBase, asked: Envelope, *, routine: bool = False) -> list[str]:
    """Who may answer the Confirm / Reject of the turn ``asked`` started: its asker
    (``asker_of``), then the chat's approvers (gateway/turns/approval.py); with ``routine``, a
    routine's Confirm / Cancel: its asker, then the schedule admins (triggers/routines.py).
    Adapters that hand such buttons to each person privately (DingTalk's group links) send
    them to these."""
    asker = asked.sender.id if routine else asker_of(asked)
    others = integ.schedule_admins if routine else approvers_for(integ, asked)
    return list(dict.fromkeys([*([asker] if asker is not None else []), *others]))


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """An attachment's content, fetched from the platform on demand."""

    data: bytes
    mime: str
    name: str | None = None


def body_type(resp: aiohttp.ClientResponse) -> str:
    """A download's media type, without parameters."""
    return resp.headers.get("Content-Type", "application/octet-stream").split(";")[0]


async def read_body(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    """A download's whole body, or None once it is longer than ``max_bytes`` (the rest is not
    read). ``StreamReader.read(n)`` would return only what has arrived so far."""
    if (resp.content_length or 0) > max_bytes:
        return None
    data = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        data += chunk
        if len(data) > max_bytes:
            return None
    return bytes(data)


class Adapter(abc.ABC):
    """One integration's platform connection: inbound wiring plus outbound rendering."""

    def __init__(self, *, settings: IntegrationBase, context: AdapterContext) -> None:
        self.settings = settings
        self.context = context

    @property
    def integration_id(self) -> str:
        return self.settings.id

    def api_calls(self) -> ApiCalls:
        """The hook this integration's platform API clients report each call to."""
        return self.context.api_calls(self.integration_id, self.settings.platform)

    async def start(self) -> None:  # noqa: B027 - adapters without connections need nothing
        """Open long connections, fetch the bot's own identity."""

    async def stop(self) -> None:  # noqa: B027
        """Close long connections (DESIGN: connections are owned and closed explicitly)."""

    def readiness(self) -> dict[str, Any]:
        """Connection state for ``/readyz``; ``ready`` False makes the replica unready."""
        return {"ready": True}

    def reuses_card(self, handle: str) -> bool:
        """Whether a card an earlier turn sent can show a later turn in place (an external
        object's card, updated by each of its events: gateway/triggers/event_cards.py). False
        where updates are once-only messages (markdown replies), so each turn gets its own."""
        return False

    def card_handle(self, idempotency_key: str) -> str | None:
        """The handle ``send_card`` answers for ``idempotency_key`` where sending again with the
        same key finds the card already sent rather than a new one: a replica resuming the turn
        then needs no record of it. None (the default): a handle known only once sent."""
        return None

    def posts_unprompted(self, chat_type: str) -> bool:
        """Whether the bot can post into a chat of ``chat_type`` with no message to answer
        (a scheduled turn's card); a platform mode that only answers says False."""
        return True

    def unprompted_chat_id(self, envelope: Envelope) -> str:
        """The chat id a schedule made from ``envelope`` (``/schedule`` or a routine said in
        that chat) posts its turns to; the envelope's own chat unless the platform says else."""
        return envelope.chat.id

    async def fetch_attachment(
        self, envelope: Envelope, attachment: Attachment, *, max_bytes: int
    ) -> FetchedFile | None:
        """Download an attachment (image, file, …) for an expert that accepts files; None when
        the platform cannot, or it is larger than ``max_bytes``."""
        return None

    async def sender_email(self, envelope: Envelope) -> str | None:
        """The sender's email for ``sys.user_email``: the Envelope's own, or what the platform's
        directory tells (adapters that look it up cache it)."""
        return envelope.sender.email

    @abc.abstractmethod
    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        """Send the turn's card in reply to ``reply_to``; returns the handle used to update it.

        The same ``idempotency_key`` must never produce a second message.
        """

    @abc.abstractmethod
    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        """Update the card in place to show ``progress``."""

    @abc.abstractmethod
    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        """A plain reply (command answers, busy notices)."""


A = TypeVar("A", bound=Adapter)


class LiveAdapters(Mapping[str, A], Generic[A]):
    """A live, read-only view of the replica's adapters of one class.

    Route handlers hold this rather than a copy, so integrations added, changed or removed by a
    config reload (SIGHUP) are served at once.
    """

    def __init__(self, adapters: Mapping[str, Adapter], cls: type[A]) -> None:
        self._adapters = adapters
        self._cls = cls

    def __getitem__(self, key: str) -> A:
        adapter = self._adapters[key]
        if not isinstance(adapter, self._cls):
            raise KeyError(key)
        return adapter

    def __iter__(self) -> Iterator[str]:
        return (k for k, a in list(self._adapters.items()) if isinstance(a, self._cls))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class AdapterFactory(Protocol):
    """Registered under the ``xpert_gateway.adapters`` entry point group."""

    platform: str
    settings_model: type[IntegrationBase]

    def create(self, *, settings: IntegrationBase, context: AdapterContext) -> Adapter: ...

    def setup_routes(self, app: web.Application, adapters: Mapping[str, Adapter]) -> None:
        """Add the platform's HTTP routes; ``adapters`` is the live map of integrationId to
        adapter (wrap it in ``LiveAdapters``; a copy would miss reloads)."""
        ...


def discover_adapters() -> dict[str, AdapterFactory]:
    """Installed adapter factories by platform name."""
    found: dict[str, AdapterFactory] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        factory_cls = ep.load()
        factory: AdapterFactory = factory_cls()
        found[factory.platform] = factory
    return found
