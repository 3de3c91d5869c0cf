"""Owner leases: one holder, among all workers and replicas, for what each could do but only one
should - a bot's long connection, which the platform would otherwise see once per process.

A lease is one record in the shared record store (``AdapterContext.records``) holding its owner's
token: taken with set-if-absent, renewed with extend-if-mine, released with delete-if-mine (each
one atomic command or script). The owner renews every third of the lease; an owner that dies
stops renewing and the record expires; a standby tries every fifth of the lease. So another
process takes over at most 1.2 lease times after the owner died, and at once after a graceful
stop (which releases). While Redis is unreachable an owner keeps what it holds (no one else can
take the lease meanwhile) and a standby stays one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import structlog

from gateway.edge.stores import RecordStore, StoreUnavailable

log = structlog.get_logger("gateway.edge.leases")

CONNECTION_NS = "conn-lease"  # the namespace of the long-connection leases (not WeCom's)
STOP_WAIT_S = 5.0

Role = Literal["starting", "owner", "standby", "stopped"]


def holder_token() -> str:
    """A lease holder's token: unique, and telling an operator where the holder runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class OwnerLease:
    """One named lease in the record store; ``me`` is this holder's token."""

    def __init__(
        self,
        records: RecordStore,
        *,
        namespace: str,
        key: str,
        ttl_ms: int,
        me: str | None = None,
    ) -> None:
        self.records = records
        self.namespace = namespace
        self.key = key
        self.ttl_ms = ttl_ms
        self.me = me or holder_token()

    @classmethod
    def for_connection(
        cls, records: RecordStore, *, platform: str, account: str, ttl_ms: int
    ) -> OwnerLease:
        """The lease of a platform account's long connection (one per app / client id)."""
        return cls(records, namespace=CONNECTION_NS, key=f"{platform}:{account}", ttl_ms=ttl_ms)

    @property
    def renew_s(self) -> float:
        return self.ttl_ms / 3000

    @property
    def standby_s(self) -> float:
        return self.ttl_ms / 5000

    async def take(self) -> bool:
        """Take the lease or renew it; True while it is ours. Raises ``StoreUnavailable``."""
        if await self.records.put_new(self.namespace, self.key, self.me, ttl_ms=self.ttl_ms):
            return True
        return await self.records.renew(self.namespace, self.key, self.me, ttl_ms=self.ttl_ms)

    async def holder(self) -> str | None:
        return await self.records.get(self.namespace, self.key)

    async def release(self) -> None:
        await self.records.release(self.namespace, self.key, self.me)


class LeasedConnection:
    """Keeps a connection open on the one process holding its lease: ``connect`` once the lease
    is ours, ``disconnect`` once it is lost or we stop. ``role`` says which (for ``/readyz``).
    ``connect`` must return at once (start the connection in the background): the renewals wait
    for it, and a lease not renewed in time passes to another process."""

    def __init__(
        self,
        lease: OwnerLease,
        *,
        connect: Callable[[], Awaitable[None]],
        disconnect: Callable[[], Awaitable[None]],
        integration_id: str,
    ) -> None:
        self.lease = lease
        self._open = connect
        self._close = disconnect
        self.integration_id = integration_id
        self.role: Role = "starting"
        self.holder: str | None = None  # the owner, as a standby last saw it
        self.opened = False
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._storage_down = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"lease:{self.integration_id}")

    async def stop(self) -> None:
        """The loop ends at its next pause (never cancelled inside a Redis call, which would
        leak the pooled connection; cancelling is the fallback); then close and release."""
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), STOP_WAIT_S)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self._drop()
        try:
            await self.lease.release()  # another process may take over at once
        except StoreUnavailable as exc:  # the lease simply runs out
            log.warning("lease not released", integration_id=self.integration_id, error=str(exc))
        self.role = "stopped"

    def readiness(self) -> dict[str, Any]:
        state: dict[str, Any] = {"lease": self.role}
        if self.role == "standby" and self.holder:
            state["leaseHolder"] = self.holder
        return state

    async def _run(self) -> None:
        while not self._stopping.is_set():
            mine = await self._take()
            if self._stopping.is_set():
                return
            if mine and not self.opened:
                try:
                    await self._open()
                except Exception:
                    log.exception("connection not opened", integration_id=self.integration_id)
                    with contextlib.suppress(StoreUnavailable):
                        await self.lease.release()
                    mine = False
                else:
                    self.opened, self.role = True, "owner"
                    log.info("connection lease taken", integration_id=self.integration_id)
            elif not mine:
                if self.opened:
                    log.warning(
                        "connection lease lost; closing", integration_id=self.integration_id
                    )
                    await self._drop()
                self.role = "standby"
            await self._pause(self.lease.renew_s if mine else self.lease.standby_s)

    async def _take(self) -> bool:
        """Take or renew; with Redis unreachable, keep what we hold."""
        try:
            mine = await self.lease.take()
            self.holder = None if mine else await self.lease.holder()
        except Exception as exc:  # StoreUnavailable, or anything else: same answer
            if not self._storage_down:
                log.warning(
                    "connection lease not renewed (storage unavailable)",
                    integration_id=self.integration_id,
                    keeping=self.opened,
                    error=str(exc),
                )
            self._storage_down = True
            return self.opened
        self._storage_down = False
        return mine

    async def _drop(self) -> None:
        if not self.opened:
            return
        self.opened = False
        try:
            await self._close()
        except Exception:
            log.exception("connection not closed cleanly", integration_id=self.integration_id)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
