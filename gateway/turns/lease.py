"""A turn's lease, renewed while the turn runs (``Runner`` starts one keeper per turn; the keeper
is given what it uses: the store, the lease's time and how to stop the local run)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from sessions import SessionStore

log = structlog.get_logger("gateway.runner")


class LeaseKeeper:
    """Renews a turn's lease every third of its time. A lease that could not be renewed for its
    whole time (Redis stalled or unreachable) may already be another replica's: the local run
    stops rather than run alongside the one that resumes it. A timer waits between renewals (a
    turn shorter than a third of the lease costs no task)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        clock: Callable[[], int],
        lease_ms: int,
        conversation: str,
        owner: str,
        turn_id: str,
        stop: Callable[[str, str, str], object],
    ) -> None:
        self.store, self.clock, self.lease_ms = store, clock, lease_ms
        self.conv, self.owner, self.turn_id = conversation, owner, turn_id
        self.stop_local = stop  # (conversation, turn id, reason): the runner's stop_local
        self.interval = lease_ms / 3000
        self.loop = asyncio.get_running_loop()
        self.renewed = self.loop.time()
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = self.loop.call_later(self.interval, self._due)

    def _due(self) -> None:
        self.timer = None
        self.task = self.loop.create_task(self._renew())

    async def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if (task := self.task) is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew(self) -> None:
        conv = self.conv
        try:
            # Bounded: a stalled Redis must not hold the renewal past the lease's time. Not
            # asyncio.wait_for: on Python 3.11 a cancel arriving as the renewal completes is
            # swallowed by it, and this keeper would then renew the lease of a finished turn
            # forever (its conversation stuck; seen in bench/chaos.py).
            async with asyncio.timeout(self.interval):
                held, cancel = await self.store.renew(
                    conversation=conv,
                    owner=self.owner,
                    now_ms=self.clock(),
                    lease_ms=self.lease_ms,
                )
        except Exception as exc:
            log.warning("lease renewal failed", error=str(exc) or type(exc).__name__)
            if self.loop.time() - self.renewed >= self.lease_ms / 1000:
                log.warning("lease not renewed for its whole time; stopping the local run")
                self.stop_local(conv, self.turn_id, "lost")
                return
            self._again()
            return
        self.renewed = self.loop.time()
        if not held:
            log.warning("lease lost; stopping the local run")
            self.stop_local(conv, self.turn_id, "lost")
            return
        if cancel == self.turn_id:
            self.stop_local(conv, self.turn_id, "stop")
        self._again()

    def _again(self) -> None:
        self.task = None
        self.timer = self.loop.call_later(self.interval, self._due)
