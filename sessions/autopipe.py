"""Auto-pipelined script calls: the session state machine's, intake first of all.

Every inbound event costs one EVALSHA before its ack, and every turn about eight more. Sent one
by one through the client, each call pays for a pool checkout, a retry wrapper, its own write and
its own wake-up on the reply - about a third of the daemon's CPU per event under load
(``bench/lark_ingest.py``). Here the calls made while a write is in flight queue up and go out
together: one write per server on one dedicated connection, replies read back in order (the idea
of ioredis' ``enableAutoPipelining``). Each call still gets its own script run and its own reply;
one caller's error reply touches no other caller.

On a Redis Cluster each call goes to the primary owning its keys' slot (every script's keys share
one slot, ``sessions.keys``): a batch is split by node, the parts written in parallel, and the
next batch waits for all replies. Redirections (the cluster spec, "Redirection and resharding"):
MOVED updates the slot map and sends the call again to the new owner; ASK sends it once more to
the node named, preceded by ASKING; TRYAGAIN (a script whose keys are split by a migration in
progress) and CLUSTERDOWN wait a little and try again, for up to ``retry_budget_s``. A call that
needed any of these goes out again before every later call of its slot, and that slot's calls
are then sent one at a time until one goes through: a conversation's calls keep their order
while its slot moves.

Recovery: a NOSCRIPT reply (Redis restarted, flushed its scripts, a node new to the slot, a
replica just promoted by Sentinel) sends the call again as EVAL with the script's text, on the
same connection: the server that refused runs it and keeps it for the EVALSHAs after (the Redis
docs, "Scripting with Lua", "Script cache"). A SCRIPT LOAD through the client instead could
reach another server - during a Sentinel failover the client's pool may still be told the old
master - and the call would be refused again (issue 15's CI run). A lost connection is re-opened
and the calls without a reply are sent once more, as redis-py's own retry does - the intake
script deduplicates, so a call that did land answers ``dup`` the second time and is never stored
twice; a resent claim at worst finds its own lease and waits for it to expire (a delay, never a
double turn). A second failure reaches the callers (the platforms retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from sessions.autopipe_links import Call, Link, Links, Lost

log = structlog.get_logger("sessions.autopipe")

MAX_REDIRECTS = 16  # as redis-py's RedisClusterRequestTTL


@dataclass(slots=True)
class PipeStats:
    """Counters for tests and the bench: how many calls went out in how many writes."""

    calls: int = 0
    writes: int = 0
    largest_batch: int = 0
    reconnects: int = 0
    script_reloads: int = 0  # calls sent again as EVAL after a NOSCRIPT
    moved: int = 0
    asked: int = 0
    tryagain: int = 0


class ScriptPipe:
    """Queues script calls and sends those made meanwhile in one write per server."""

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        *,
        name: str = "",
        max_batch: int = 512,
        retry_budget_s: float = 10.0,
        on_exchange: Callable[[float, int], None] | None = None,
    ) -> None:
        # CLIENT SETNAME of the pipe's connections (no spaces allowed), so CLIENT LIST shows them.
        self.name = "".join(c if c.isprintable() and not c.isspace() else "_" for c in name)
        self.max_batch = max_batch
        self.retry_budget_s = retry_budget_s
        self.stats = PipeStats()
        # Told the time of each exchange (one write per server and its replies) and how many
        # calls it carried: the gateway's Redis latency histogram. Must not raise or block.
        self.on_exchange = on_exchange
        self._links = Links(client, self.name)
        self._queue: deque[Call] = deque()
        self._careful: set[int] = set()  # slots whose calls go one at a time (see above)
        self._drainer: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[None] | None = None  # set while the drainer waits for work
        self._closed = False

    async def evalsha(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script`` (already loaded, or loaded on NOSCRIPT); returns its reply."""
        return await self.submit(script, keys, args)

    def submit(
        self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]
    ) -> asyncio.Future[Any]:
        """Queue a call of ``script``; its reply (or error) comes as the future's result. Calls
        submitted in one tick go out in one write, without a task each (``await`` the futures,
        or ``asyncio.gather`` them, which retrieves every error)."""
        if self._closed:
            raise RedisConnectionError("script pipe is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(Call(script, keys, args, future, slot=self._links.slot(keys)))
        # The drainer runs after this tick, so every call made in the same tick joins one write.
        if self._idle is not None:
            if not self._idle.done():
                self._idle.set_result(None)
        elif self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        return future

    async def close(self) -> None:
        self._closed = True
        if self._idle is not None and not self._idle.done():
            self._idle.set_result(None)
        if self._drainer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._drainer), 5)
        for call in self._queue:
            if not call.future.done():
                call.future.set_exception(RedisConnectionError("script pipe is closed"))
        self._queue.clear()
        await self._links.close()

    # --- the drain loop ----------------------------------------------------------------------
    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if self._closed and not self._queue:
                    return
                batch, wait = self._take(loop.time())
                if batch:
                    try:
                        await self._send(batch)
                    except BaseException as exc:  # a bug or a cancel: the batch is answered too
                        for call in batch:
                            if not call.future.done():
                                call.future.set_exception(exc)
                        raise
                    continue
                if self._closed and wait is None:
                    return
                # Waits for work (or a held call's time) rather than exiting: waking a future is
                # cheaper than starting a task.
                self._idle = loop.create_future()
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._idle
                finally:
                    self._idle = None
        except BaseException as exc:  # never leave a caller waiting
            for call in self._queue:
                if not call.future.done():
                    call.future.set_exception(exc)
            self._queue.clear()
            raise
        finally:
            self._drainer = None

    def _take(self, now: float) -> tuple[list[Call], float | None]:
        """The next batch, in queue order; a call waiting for TRYAGAIN holds back its slot's
        later calls, and a careful slot sends one call. Also how long until a held call may go
        (None: nothing held)."""
        batch: list[Call] = []
        kept: list[Call] = []
        held: set[int] = set()
        wait: float | None = None
        while self._queue and len(batch) < self.max_batch:
            call = self._queue.popleft()
            if call.future.done():  # a caller that gave up
                continue
            if call.slot in held or call.not_before > now:
                held.add(call.slot)
                kept.append(call)
                if call.not_before > now:
                    left = call.not_before - now
                    wait = left if wait is None else min(wait, left)
                continue
            if call.slot in self._careful:
                held.add(call.slot)
            batch.append(call)
        self._queue.extendleft(reversed(kept))
        return batch, wait

    async def _send(self, batch: list[Call]) -> None:
        stats = self.stats
        stats.calls += len(batch)
        stats.largest_batch = max(stats.largest_batch, len(batch))
        groups: dict[Link, list[Call]] = {}
        unrouted: list[Call] = []
        refresh = False
        now = asyncio.get_running_loop().time()
        await self._links.ready()
        for call in batch:
            call.first_sent = call.first_sent or now
            try:
                link = self._links.route(call)
            except (SlotNotCoveredError, KeyError):  # read the slot map, then try again
                refresh = True
                self._hold(call, now)
                unrouted.append(call)
                continue
            groups.setdefault(link, []).append(call)
        stats.writes += len(groups)
        outcomes: dict[int, Any] = {}
        began = time.perf_counter()
        if len(groups) == 1:  # a single server: no task per write
            [(link, calls)] = groups.items()
            outcomes = await link.exchange(calls, self.stats)
        else:
            for part in await asyncio.gather(
                *(k.exchange(c, self.stats) for k, c in groups.items())
            ):
                outcomes.update(part)
        if groups and self.on_exchange is not None:
            self.on_exchange(time.perf_counter() - began, len(batch) - len(unrouted))
        moved: list[Any] = []
        retry: list[Call] = []
        for call in unrouted:
            self._redirected(call, now, retry)
        for call in batch:
            if call.future.done() or id(call) not in outcomes:
                continue
            reply = outcomes[id(call)]
            was_asked, call.ask = call.ask, None
            if not isinstance(reply, BaseException | Lost):  # the usual case, first
                if not was_asked:  # an answer from the slot's owner: the slot is settled
                    self._careful.discard(call.slot)
                call.future.set_result(reply)
            elif isinstance(reply, NoScriptError) and not call.body:
                stats.script_reloads += 1
                call.body = True
                retry.append(call)
            elif isinstance(reply, MovedError):
                stats.moved += 1
                moved.append(reply)
                self._redirected(call, now, retry)
            elif isinstance(reply, AskError):
                stats.asked += 1
                call.ask = f"{reply.host}:{reply.port}"
                self._redirected(call, now, retry)
            elif isinstance(reply, TryAgainError | ClusterDownError):
                stats.tryagain += 1
                refresh = refresh or isinstance(reply, ClusterDownError)
                self._hold(call, now)
                self._redirected(call, now, retry)
            elif isinstance(reply, Lost):
                if call.attempts >= 1:
                    call.future.set_exception(reply.error)
                else:
                    retry.append(call)
                refresh = refresh or self._links.cluster is not None
            else:
                call.future.set_exception(reply)
        if moved:
            await self._links.moved(moved)
        if refresh:
            await self._links.refresh()
        if not retry:
            return
        order = {id(c): i for i, c in enumerate(batch)}
        retry.sort(key=lambda c: order[id(c)])  # in the order they were made
        for call in retry:
            if isinstance(outcomes.get(id(call)), Lost):
                call.attempts += 1
        self._queue.extendleft(reversed([c for c in retry if not c.future.done()]))

    def _hold(self, call: Call, now: float) -> None:
        call.not_before = now + min(0.01 * 2 ** min(call.redirects, 5), 0.25)

    def _redirected(self, call: Call, now: float, retry: list[Call]) -> None:
        call.redirects += 1
        self._careful.add(call.slot)
        if call.redirects > MAX_REDIRECTS and now - call.first_sent > self.retry_budget_s:
            call.future.set_exception(
                RedisConnectionError(f"slot {call.slot} kept moving for {self.retry_budget_s} s")
            )
            return
        retry.append(call)
