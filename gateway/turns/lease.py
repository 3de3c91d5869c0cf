"""A turn's lease, renewed while the turn runs (``Runner`` starts one keeper per turn)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from gateway.turns.runner import Runner

log = structlog.get_logger("gateway.runner")


class LeaseKeeper:
    """Renews a turn's lease every third of its time. A lease that could not be renewed for its
    whole time (Redis stalled or unreachable) may already be another replica's: the local run
    stops rather than run alongside the one that resumes it. A timer waits between renewals (a
    turn shorter than a third of the lease costs no task)."""

    def __init__(self, runner: Runner, conv: str, owner: str, turn_id: str) -> None:
        self.runner, self.conv, self.owner, self.turn_id = runner, conv, owner, turn_id
        self.interval = runner.settings.runtime.lease_seconds / 3
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
        runner, conv = self.runner, self.conv
        try:
            # Bounded: a stalled Redis must not hold the renewal past the lease's time. Not
            # asyncio.wait_for: on Python 3.11 a cancel arriving as the renewal completes is
            # swallowed by it, and this keeper would then renew the lease of a finished turn
            # forever (its conversation stuck; seen in bench/chaos.py).
            async with asyncio.timeout(self.interval):
                held, cancel = await runner.store.renew(
                    conversation=conv,
                    owner=self.owner,
                    now_ms=runner.clock(),
                    lease_ms=runner.lease_ms,
                )
        except Exception as exc:
            log.warning("lease renewal failed", error=str(exc) or type(exc).__name__)
            if self.loop.time() - self.renewed >= runner.lease_ms / 1000:
                log.warning("lease not renewed for its whole time; stopping the local run")
                runner.stop_local(conv, self.turn_id, reason="lost")
                return
            self._again()
            return
        self.renewed = self.loop.time()
        if not held:
            log.warning("lease lost; stopping the local run")
            runner.stop_local(conv, self.turn_id, reason="lost")
            return
        if cancel == self.turn_id:
            runner.stop_local(conv, self.turn_id, reason="stop")
        self._again()

    def _again(self) -> None:
        self.task = None
        self.timer = self.loop.call_later(self.interval, self._due)
