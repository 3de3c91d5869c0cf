"""The flusher: finds conversations whose burst is due (or whose owner died) and has the runner
claim and start them.

Local intake wakes it at once (window 0 => no polling delay); otherwise it sleeps until the next
due time or ``pollIntervalMs``, whichever is sooner, to pick up work other replicas scheduled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from gateway.clock import now_ms
from gateway.turns import Runner
from sessions import SessionStore

log = structlog.get_logger("gateway.flusher")


class Flusher:
    def __init__(
        self,
        *,
        store: SessionStore,
        runner: Runner,
        poll_ms: int,
        max_runs: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.runner = runner
        self.poll_ms = poll_ms
        self.max_runs = max_runs
        self.clock = clock
        self._event = asyncio.Event()
        self._soonest: int | None = None
        self._next_due: int | None = None
        self._stopping = False
        self.claims = 0

    def wake(self, due_ms: int) -> None:
        if self._soonest is None or due_ms < self._soonest:
            self._soonest = due_ms
        if due_ms <= self.clock() + 1:
            self._event.set()

    def stop(self) -> None:
        self._stopping = True
        self._event.set()

    async def run(self) -> None:
        backoff = 0.1
        # Any Redis error (in the tick or in the sleep's look-up) backs off and retries: the
        # flusher must never die, or this replica would stop claiming work.
        while not self._stopping:
            try:
                await self._tick()
                await self._sleep()
                backoff = 0.1
            except Exception as exc:
                log.warning("flusher tick failed", error=str(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _tick(self) -> None:
        now = self.clock()
        self._soonest = None
        due, self._next_due = await self.store.due_and_next(now, limit=self.max_runs)
        if len(self.runner.active) >= self.max_runs:
            return
        for conv in due:
            if self._stopping or len(self.runner.active) >= self.max_runs:
                return
            if conv in self.runner.active:
                continue
            if await self.runner.claim(conv) is not None:
                self.claims += 1

    async def _sleep(self) -> None:
        timeout = self.poll_ms / 1000
        for candidate in (self._next_due, self._soonest):
            if candidate is not None:
                timeout = min(timeout, max(0.0, (candidate - self.clock()) / 1000))
        if timeout <= 0:
            # Due again already (a burst's window just closed): yield briefly, then look.
            timeout = 0.005 if len(self.runner.active) < self.max_runs else 0.05
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            pass
        self._event.clear()
