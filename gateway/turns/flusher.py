"""The flusher: finds conversations whose burst is due (or whose owner died) and has the runner
claim and start them.

A local message due at once (window 0) has its turn claimed by its own intake call when there is
room here (``gateway.turns.claims.RidingClaims``: the runner starts the turn, or the flusher
reads the conversation's shard); any other local intake wakes the flusher at once;
otherwise it sleeps until the next due time or ``pollIntervalMs``, whichever is sooner, to pick
up work other replicas scheduled.
A look at every due shard (``runtime.dueShards``) is one pipelined round trip per Redis server;
between those, a conversation a local intake made due now is claimed at once (the claim script
checks the due index itself), and one due later has only its shard read when it is due.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from gateway.clock import now_ms
from gateway.turns.claims import Claims
from gateway.turns.runner import Runner
from sessions import SessionStore

log = structlog.get_logger("gateway.turns.flusher")


class Flusher:
    def __init__(
        self,
        *,
        store: SessionStore,
        runner: Runner,
        claims: Claims,
        poll_ms: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.runner = runner
        self.claims = claims  # shared with the runner and intake; its room bounds the runs here
        self.poll_ms = poll_ms
        self.clock = clock
        self._event = asyncio.Event()
        # Per due shard, the soonest time known to be due there (from the last read of it, or a
        # local intake since); shards woken by a local intake; when every shard was last read.
        self._next: dict[int, int] = {}
        self._woken: set[int] = set()
        self._direct: dict[str, None] = {}  # due now by a local intake: claimed without a read
        self._read_all_at: int | None = None
        self._stopping = False
        self._ticking = False

    def wake(self, due_ms: int, conversation: str | None = None) -> None:
        """A local intake scheduled ``conversation`` at ``due_ms`` (without it: look everywhere)."""
        if conversation is None:
            self._read_all_at = None
        elif due_ms <= self.clock() + 1:
            self._direct[conversation] = None
        else:
            shard = self.store.keys.shard(conversation)
            self._woken.add(shard)
            if due_ms < self._next.get(shard, due_ms + 1):
                self._next[shard] = due_ms
        if due_ms <= self.clock() + 1:
            self._event.set()

    def missed(self, conversation: str) -> None:
        """A claim that rode with an intake took nothing: the conversation's shard is read."""
        self._woken.add(self.store.keys.shard(conversation))
        self._event.set()

    def busy(self) -> bool:
        """A tick is under way, or one is due now (a local intake's claim, a woken shard, a
        shard whose soonest work is due): Gateway.idle reads it."""
        now = self.clock()
        return (
            self._ticking
            or self._event.is_set()
            or bool(self._direct or self.claims.riding or self._woken)
            or any(at <= now for at in self._next.values())
        )

    def stop(self) -> None:
        self._stopping = True
        self.claims.close()
        self._event.set()

    async def run(self) -> None:
        backoff = 0.1
        # Any Redis error (in the tick or in the sleep's look-up) backs off and retries: the
        # flusher must never die, or this replica would stop claiming work.
        while not self._stopping:
            try:
                self._ticking = True
                try:
                    await self._tick()
                finally:
                    self._ticking = False
                await self._sleep()
                backoff = 0.1
            except Exception as exc:
                self._read_all_at = None  # what the failed read would have told: look again
                log.warning("flusher tick failed", error=str(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _tick(self) -> None:
        """Every ``pollIntervalMs`` read every shard (work other replicas scheduled); between
        those, only the shards a local intake woke or that hold something due by now. A
        conversation a local intake made due now is claimed first, without a read."""
        now = self.clock()
        room = self.claims.room()
        if room <= 0:  # busy: a run ending or the next poll looks again
            return
        if self._direct:
            await self._claim_direct(room)
            room = self.claims.room()
            if room <= 0:
                return
        every = self._read_all_at is None or now - self._read_all_at >= self.poll_ms
        shards = None if every else self._woken | {s for s, t in self._next.items() if t <= now}
        if shards is not None and not shards:
            return
        self._woken.clear()
        due, soonest = await self.store.due_in(now, limit=room, shards=shards)
        if every:
            self._read_all_at = now
            self._next.clear()
        for shard, at in soonest.items():
            if at is None:
                self._next.pop(shard, None)
            else:
                self._next[shard] = at
        for conv in due:
            if self._stopping or len(self.runner.active) >= self.claims.max_runs:
                return
            if conv in self.runner.active:
                continue
            if await self.runner.claim(conv) is not None:
                self.claims.made += 1

    async def _claim_direct(self, room: int) -> None:
        """Claim the conversations local intakes made due now, at once (one claim each, sent
        together); those there is no room for, or that could not be claimed now (not due by
        Redis's reckoning, or another replica's lease), have their shard read instead."""
        active = self.runner.active
        convs = [c for c in self._direct if c not in active]
        # One running here (it was not when the intake asked, so its run is ending): its shard
        # is read, in case the run let go before it saw this intake.
        rest = [c for c in self._direct if c in active] + convs[room:]
        self._direct.clear()
        take = convs[:room]
        for conv in rest:
            self._woken.add(self.store.keys.shard(conv))
        if len(take) == 1:
            runs = [await self.runner.claim(take[0])]
        else:
            runs = list(await asyncio.gather(*(self.runner.claim(c) for c in take)))
        for conv, run in zip(take, runs, strict=True):
            if run is None:
                self._woken.add(self.store.keys.shard(conv))
            else:
                self.claims.made += 1

    async def _sleep(self) -> None:
        now = self.clock()
        read_all = (now if self._read_all_at is None else self._read_all_at) + self.poll_ms
        timeout = max(0.0, (min([read_all, *self._next.values()]) - now) / 1000)
        if timeout <= 0:
            # Due again already (a burst's window just closed): yield briefly, then look.
            timeout = 0.005 if len(self.runner.active) < self.claims.max_runs else 0.05
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()
        self._event.clear()
