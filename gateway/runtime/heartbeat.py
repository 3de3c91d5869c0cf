"""The replica's heartbeat: every few seconds it writes who it is (pid, start time, active runs,
version) under its replica key with a short TTL, so the other replicas and an operator see which
replicas are alive; a replica that stops writing is gone once the key expires."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any, Protocol

from gateway import __version__

EVERY_S = 5.0
TTL_MS = 15_000  # three beats: one missed beat does not make a replica look gone


class HeartbeatStore(Protocol):
    """Where the beat is written (``sessions.SessionStore``)."""

    async def heartbeat(self, replica_id: str, info: dict[str, Any], ttl_ms: int) -> None: ...


class Heartbeat:
    def __init__(
        self,
        *,
        store: HeartbeatStore,
        replica_id: str,
        started_at: float,
        active_runs: Callable[[], int],
        every_s: float = EVERY_S,
    ) -> None:
        self.store = store
        self.replica_id = replica_id
        self.started_at = started_at
        self.active_runs = active_runs
        self.every_s = every_s
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """End :meth:`run` now (the replica shuts down); its key expires by itself."""
        self._stop.set()

    async def run(self) -> None:
        """Beat until stopped; a beat Redis did not take is skipped (the next one may be)."""
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                await self.store.heartbeat(
                    self.replica_id,
                    {
                        "pid": os.getpid(),
                        "started": self.started_at,
                        "active": self.active_runs(),
                        "version": __version__,
                    },
                    ttl_ms=TTL_MS,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.every_s):
                    await self._stop.wait()
