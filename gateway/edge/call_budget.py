"""One app's platform budget on this replica: every platform call waits here for its turn
(``PlatformApi.exchange``), in front of the budget every replica shares in Redis
(``sessions.PlatformBudgets``: each API's windows, each chat's, pauses, the month's ledger).

- **Priorities.** A call waits in its API's queue by its caller's priority (``calls_as``): a
  first card, a final state, a click's answer, other calls, an intermediate update. Several
  waiting calls are granted by one Redis call. Intermediate updates fill at most 3/4 of a
  window, spread evenly over it (``calls.SPREAD_PARTS``: at most 1/12 of their share in any 1/12 of
  a window longer than a second, so a minute's share is not spent in its first seconds and the
  cards live now find room for their finals at its end), and wait while any first card waits
  (``holding_back``).
- **Coalescing and fairness.** An intermediate update first takes an update slot
  (``update_slot``), the card shown longest ago first, then picks the latest state. Across
  replicas, the one whose oldest waiting call asked over ``calls.LINE_SLACK_MS`` before
  another's gets the API's room first (``sessions.Line``), so none keeps losing the race.
- **Throttle answers** (429 / 99991400, 230020, QpsLimit, 45009) pause the API, the chat or the
  app for the reset the platform named, for every replica (``throttled``).
- **The month's quota** (``platformLimits.callsPerMonth``): counted with each grant, a refused
  call taken back; its forecast sets the card mode (``calls.quota_mode``); a spent month fails
  calls at once (``BudgetExhausted``).
The store failing opens the budget (calls go out unpaced; one warning a minute).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal, TypeVar

import structlog

from gateway.config.platform_limits import PlatformLimits
from gateway.edge.calls import (
    LINE_SLACK_MS,
    MARGIN_S,
    BudgetEvents,
    BudgetExhausted,
    CardMode,
    Priority,
    UpdateSlots,
    Waiter,
    api_windows,
    asked,
    calls_as,
    line_after,
    month_of,
    next_batch,
    quota_mode,
    rank,
)
from gateway.errors import unwatched
from sessions import STORE_FAILED, Line, PlatformBudgets, Take, Window

__all__ = [
    "BudgetEvents",
    "BudgetExhausted",
    "CallBudget",
    "CardMode",
    "Priority",
    "calls_as",
    "month_of",
]

log = structlog.get_logger("gateway.edge.call_budget")

UPDATE_SLOTS = 4  # intermediate card updates on their way at once, per app and replica
MAX_SLEEP_S = 1.0  # a denied queue looks again at least this often
STORE_WAIT_S = 1.0  # a budget call waits this long for the store at most
UNPACED_S = 10.0  # after the store failed, calls go out unpaced this long before it is asked again
UNANSWERED: tuple[type[Exception], ...] = (TimeoutError, *STORE_FAILED)
T = TypeVar("T")


class CallBudget:
    """One app's budget, as this replica's calls see it (module docstring)."""

    def __init__(
        self,
        *,
        store: PlatformBudgets,
        app: str,
        integration_id: str,
        limits: PlatformLimits,
        events: BudgetEvents | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        update_slots: int = UPDATE_SLOTS,
    ) -> None:
        self.store = store
        self.app = app
        self.integration_id = integration_id
        self.limits = limits
        self.events = events
        self.clock = clock
        self.wall = wall
        self.month_used: int | None = None  # the ledger, as the last grant told
        self.mode: CardMode = "normal"
        self.forecast_s: float | None = None  # seconds until the quota runs out at this rate
        self._month: tuple[str, float, float] = month_of(wall(), limits.month_utc_offset_hours)
        self._queues: dict[str, list[Waiter]] = {}
        self._pumps: dict[str, asyncio.Task[None]] = {}
        self._blocked: dict[str, float] = {}  # endpoint -> until (clock), from a denial
        # Tasks waiting for their turn: nothing of theirs is on its way, so a card whose turn
        # ended may cancel its intermediate update there (gateway.turns.render).
        self.waiting: set[asyncio.Task[object]] = set()
        self._firsts = 0  # first cards waiting for their turn
        self._holding: dict[str, int] = {}  # endpoint -> the priority its pump was denied
        self._wakes: dict[str, asyncio.Event] = {}
        self._seq = itertools.count()
        self.update_slots = UpdateSlots(update_slots)
        self.update_slot = self.update_slots.take  # (shown_at) -> async context manager
        self._warned_at = -math.inf
        self._open_until = -math.inf  # the store failed: unpaced until then

    # --- what is read of it (metrics, cards) ---------------------------------------------------
    def queued(self) -> int:
        """Calls waiting for the budget now, slots for intermediate updates included."""
        return sum(len(q) for q in self._queues.values()) + self.update_slots.waiting()

    def holding_back(self) -> bool:
        """Whether intermediate updates wait: some first card waits for its turn, so the app is
        past its limits and spends them on showing cards and finishing them first."""
        return self._firsts > 0

    def interval_factor(self) -> float | None:
        """How much longer a card waits between intermediate updates in this mode; None: no
        intermediate updates at all."""
        return {"normal": 1.0, "lean": 4.0, "finals": None}[self.mode]

    # --- a call's turn -------------------------------------------------------------------------
    def _buckets(
        self, endpoint: str, chat: str | None, update: bool = False
    ) -> list[tuple[str, Sequence[Window]]]:
        """The buckets a call takes from: its API's windows (``calls.api_windows``: an
        intermediate update sees only its share, spread out), and its chat's."""
        buckets: list[tuple[str, Sequence[Window]]] = []
        windows = api_windows(self.limits.api_windows(endpoint), update)
        buckets.append((f"api:{endpoint}", windows))  # no windows: its pause still holds
        if chat is not None and (per_chat := self.limits.chat_windows()):
            buckets.append((f"chat:{chat}", [Window(n, s + MARGIN_S) for n, s in per_chat]))
        return buckets

    @staticmethod
    def _line(endpoint: str, first: float, after: float | None = None) -> Line:
        """This replica's place in the line for the API's room (``calls.LINE_SLACK_MS``)."""
        return Line(f"api:{endpoint}", first, after, slack=LINE_SLACK_MS)

    async def take(self, endpoint: str, *, chat_send: bool = False) -> None:
        """Wait for this call's turn under the budget (module docstring); raises
        ``BudgetExhausted`` when the month is spent or the wait ran past ``maxWaitSeconds``."""
        chat = asked()[1] if chat_send else None
        update = asked()[0] == Priority.UPDATE
        buckets = self._buckets(endpoint, chat, update)
        began, its_rank = self.clock(), rank(asked()[0], self.wall())
        queue = self._queues.setdefault(endpoint, [])
        if not queue and self._blocked_until(endpoint, update) <= began:
            took = await self._take(buckets, 1, self._line(endpoint, its_rank))
            if took is None or took.granted:
                if self.events is not None:
                    self.events.budget_waited(self.integration_id, endpoint, 0.0)
                return
            if took.denied_by == "month":
                raise BudgetExhausted("month quota spent", endpoint)
            self._denied(endpoint, took, began, update)
        loop = asyncio.get_running_loop()
        order = asked()[2]
        waiter = Waiter(
            asked()[0], began if order is None else order, next(self._seq), chat,
            loop.create_future(), its_rank,
        )  # fmt: skip
        heapq.heappush(queue, waiter)
        if waiter.priority < self._holding.get(endpoint, Priority.UPDATE + 1):
            self._wakes.setdefault(endpoint, asyncio.Event()).set()  # before what was denied
        if endpoint not in self._pumps:
            self._pumps[endpoint] = asyncio.create_task(
                self._pump(endpoint, queue), name=f"budget:{self.app}:{endpoint}"
            )
        task = asyncio.current_task()
        if task is not None:
            self.waiting.add(task)
        first = waiter.priority == Priority.FIRST
        self._firsts += first
        try:
            async with asyncio.timeout(self.limits.max_wait_seconds):
                await waiter.future
        except TimeoutError:
            raise BudgetExhausted("waited past maxWaitSeconds", endpoint) from None
        finally:
            if task is not None:
                self.waiting.discard(task)
            self._firsts -= first
            waiter.future.cancel()  # no-op when granted; a pump skips it otherwise
            if self.events is not None:
                self.events.budget_waited(self.integration_id, endpoint, self.clock() - began)

    def _denied(self, endpoint: str, took: Take, now: float, update: bool) -> None:
        """Fast paths wait in the queue until then (an update's share apart from the rest)."""
        if took.denied_by is None or not took.denied_by.startswith("chat:"):
            self._blocked[endpoint + "#u" * update] = now + took.wait_s

    def _blocked_until(self, endpoint: str, update: bool) -> float:
        until = self._blocked.get(endpoint, 0.0)
        return max(until, self._blocked.get(endpoint + "#u", 0.0)) if update else until

    async def _pump(self, endpoint: str, queue: list[Waiter]) -> None:
        """Grant the queue's waiters in priority order, as the shared budget allows."""
        try:
            while queue:
                now = self.clock()
                batch, parked = next_batch(queue, now)
                for waiter in parked:
                    heapq.heappush(queue, waiter)
                if not batch:
                    if queue:
                        soonest = min(w.not_before for w in queue)
                        await asyncio.sleep(min(max(soonest - now, 0.001), MAX_SLEEP_S))
                    continue
                update = batch[0].priority == Priority.UPDATE
                buckets = self._buckets(endpoint, batch[0].chat, update)
                first = min(w.rank for w in batch)
                line = self._line(endpoint, first, line_after(queue, now))
                took = await self._take(buckets, len(batch), line)
                granted = len(batch) if took is None else took.granted
                for waiter in batch[:granted]:
                    if not waiter.future.done():
                        waiter.future.set_result(None)
                rest = batch[granted:]
                if took is None or not rest:
                    continue
                if took.denied_by == "month":
                    for waiter in rest:
                        if not waiter.future.done():
                            waiter.future.set_exception(
                                BudgetExhausted("month quota spent", endpoint)
                            )
                    continue
                wait = max(took.wait_s, 0.001)
                if took.denied_by is not None and took.denied_by.startswith("chat:"):
                    for waiter in rest:  # only this chat waits; the others go on
                        waiter.not_before = now + wait
                        heapq.heappush(queue, waiter)
                    continue
                for waiter in rest:
                    heapq.heappush(queue, waiter)
                self._denied(endpoint, took, now, update)
                await self._hold(endpoint, batch[0].priority, min(wait, MAX_SLEEP_S))
        finally:
            self._pumps.pop(endpoint, None)

    async def _hold(self, endpoint: str, priority: int, seconds: float) -> None:
        """Sleep after a denial, woken early by a call of higher priority than the one denied
        (an intermediate update's share may be spent while a final state's is not)."""
        wake = self._wakes.setdefault(endpoint, asyncio.Event())
        wake.clear()
        self._holding[endpoint] = priority
        try:
            async with asyncio.timeout(seconds):
                await wake.wait()
        except TimeoutError:
            pass
        finally:
            self._holding.pop(endpoint, None)

    async def _take(
        self, buckets: Sequence[tuple[str, Sequence[Window]]], n: int, line: Line | None = None
    ) -> Take | None:
        """One Redis call: ``n`` calls asked for, in the API's ``line`` across replicas; None
        when the store failed (go unpaced)."""
        wall = self.wall()
        if wall >= self._month[2]:
            self._month = month_of(wall, self.limits.month_utc_offset_hours)
        label, _start, end = self._month
        took = await self._ask(
            self.store.take(
                self.app,
                buckets,
                n,
                month=label,
                month_limit=self.limits.calls_per_month,
                month_left_s=max(end - wall, 1.0),
                line=line,
            )
        )
        if took is not None:
            self._quota(took.month_used, wall)
        return took

    async def _ask(self, call: Coroutine[Any, Any, T]) -> T | None:
        """Every call to the store: None when it failed or took over ``STORE_WAIT_S`` (then
        the budget stays open ``UNPACED_S``, asking nothing, with one warning a minute)."""
        if self.clock() < self._open_until:
            call.close()
            return None
        asked = asyncio.ensure_future(call)
        asked.add_done_callback(unwatched)
        try:
            # Shielded: a store slow to answer is waited for no longer, its call not cut.
            return await asyncio.wait_for(asyncio.shield(asked), STORE_WAIT_S)
        except UNANSWERED as exc:
            self._open_until = self.clock() + UNPACED_S
            if self.clock() - self._warned_at > 60:
                self._warned_at = self.clock()
                log.warning(
                    "platform budget unavailable: calls go out unpaced",
                    integration_id=self.integration_id,
                    error=str(exc) or type(exc).__name__,
                )
            return None

    # --- what the platform answered ------------------------------------------------------------
    async def throttled(
        self,
        endpoint: str,
        retry_after: float | None,
        scope: Literal["api", "chat", "app"],
        *,
        chat_send: bool = False,
    ) -> bool:
        """The platform refused a call for its rate: pause ``scope`` for every replica, for the
        reset the platform named (1 s when it named none). A chat's limit pauses that chat's
        sends; one that is not a chat send's (Lark's 230020 on one message's PATCH) pauses
        nothing shared: False, and the caller backs off by itself."""
        seconds = min(retry_after if retry_after and retry_after > 0 else 1.0, 300.0)
        if self.events is not None:
            self.events.budget_throttled(self.integration_id, endpoint, scope)
        bucket: str | None
        if scope == "chat":
            chat = asked()[1]
            if not chat_send or chat is None or not self.limits.chat_windows():
                return False
            bucket = f"chat:{chat}"
        else:
            bucket = f"api:{endpoint}" if scope == "api" else None
            self._blocked[endpoint] = max(self._blocked.get(endpoint, 0.0), self.clock() + seconds)
        log.info(
            "platform throttled: paused",
            integration_id=self.integration_id,
            endpoint=endpoint,
            scope=scope,
            seconds=round(seconds, 3),
        )
        await self._ask(self.store.pause(self.app, bucket, seconds))
        return True

    async def refused(self) -> None:
        """A call the platform refused does not count against the month (Lark and DingTalk
        count only calls they served)."""
        if self.month_used is None:
            return
        await self._ask(self.store.uncount(self.app, self._month[0]))
        self.month_used = max(0, self.month_used - 1)

    def _quota(self, used: int, wall: float) -> None:
        """The forecast and card mode from this month's ledger."""
        self.month_used = used
        if self.limits.calls_per_month is None:
            return
        mode, self.forecast_s = quota_mode(used, self.limits.calls_per_month, self._month, wall)
        if mode != self.mode:
            self.mode = mode
            log.warning(
                "platform quota: card mode changed",
                integration_id=self.integration_id,
                mode=mode,
                used=used,
                limit=self.limits.calls_per_month,
                forecast_hours=None if self.forecast_s is None else round(self.forecast_s / 3600),
            )
            if self.events is not None:
                self.events.card_mode_changed(self.integration_id, mode)
