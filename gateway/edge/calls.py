"""How a platform call is asked for, as ``gateway.edge.call_budget`` reads it: its priority,
the chat it sends to and its order among equals (``calls_as``, carried by context variables into
every task it spawns), its place while it waits (``Waiter``, ``next_batch``) and in the line
every replica shares (``rank``), what the budget tells of itself (``BudgetEvents``,
``CardMode``), its refusal (``BudgetExhausted``) and the quota month (``month_of``)."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Literal, Protocol

from gateway.errors import PlatformApiError
from sessions import Window

__all__ = [
    "LINE_SLACK_MS",
    "BudgetEvents",
    "BudgetExhausted",
    "CardMode",
    "Priority",
    "UpdateSlots",
    "Waiter",
    "api_windows",
    "asked",
    "calls_as",
    "line_after",
    "month_of",
    "next_batch",
    "quota_mode",
    "rank",
]

LEAN_AT, FINALS_AT = 0.80, 0.95  # shares of the month's quota
FORECAST_FROM = 0.05  # the forecast decides the mode once this share is spent

CardMode = Literal["normal", "lean", "finals"]

# Each window is kept this much longer than the platform's: a call granted here reaches the
# platform a little later, and not always equally late (the network, a busy event loop). It
# costs 1/(1 + margin) of a 1-s limit, which a platform may be run at (DingTalk: 300 turns over
# 15 s are 20 creates a second, its limit): 0.15 s cost 13 % and made finals queue (issue 38).
MARGIN_S = 0.05
UPDATE_SHARE = 0.75  # of each API window intermediate updates may fill
# Intermediate updates' share of a window longer than a second goes at most 1/SPREAD_PARTS at a
# time: in any twelfth of a minute (5 s), a twelfth of the minute's share (issue 38: 750 updates
# a minute spent in its first 25 s left the finals of 48-s turns waiting 7-11 s for the minute
# to turn).
SPREAD_PARTS = 12
SMOOTH_PARTS = 4  # a per-second limit of SMOOTH_FROM or more goes a quarter at a time
SMOOTH_FROM = 8
BATCH = 32  # waiting calls granted by one Redis call at most
PRIORITY_RANK = 1e13  # a rank: the priority first, then when the call asked (epoch ms)
# A replica yields its API's room to another only when that one's oldest waiting call asked over
# this long (ms) before its own: replicas whose queues are about as old take what they find
# (no room left idle for one a moment late), and none falls behind by more (issue 38: the
# replica whose calls asked a few ms late lost the race again and again; its first cards
# waited 1.5 s while the others' waited 0.3 s).
LINE_SLACK_MS = 100.0


def api_windows(api: list[tuple[int, float]], update: bool) -> list[Window]:
    """The budget's windows of one API with the platform's (limit, seconds) ``api``: each a
    margin longer; an intermediate update (``update``) sees ``UPDATE_SHARE`` of each, the rest
    kept for first cards and final states, spread over a window longer than a second (a window
    of their own, counting updates only); and a second's calls go out in quarters, not in one
    burst at its start that, reaching the platform late, meets the next second's (issue 38:
    DingTalk refused 1 call in 25 at 20 a second, its limit, on a loaded machine)."""
    share = UPDATE_SHARE if update else 1.0
    windows = [Window(max(1, int(n * share)), s + MARGIN_S) for n, s in api]
    if update:
        windows += [
            Window(max(1, int(n * share / SPREAD_PARTS)), s / SPREAD_PARTS + MARGIN_S)
            for n, s in api
            if s / SPREAD_PARTS >= 1.0
        ]
    windows += [
        Window(math.ceil(n * share / SMOOTH_PARTS), s / SMOOTH_PARTS)
        for n, s in api
        if s <= 1.0 and n * share >= SMOOTH_FROM
    ]
    return windows


class Priority(IntEnum):
    FIRST = 0  # the first card: the user sees the bot heard them
    FINAL = 1  # a card's final state
    CLICK = 2  # the answer to a button
    OTHER = 3  # texts, reactions, lookups, uploads
    UPDATE = 4  # an intermediate card update


_PRIORITY: ContextVar[Priority] = ContextVar("xgw_call_priority", default=Priority.OTHER)
_CHAT: ContextVar[str | None] = ContextVar("xgw_call_chat", default=None)
_ORDER: ContextVar[float | None] = ContextVar("xgw_call_order", default=None)


def rank(priority: int, asked_s: float) -> float:
    """A call's place in its API's line across replicas (``sessions.Line``): its priority
    first, then when it asked (``asked_s``: wall-clock seconds, which every replica shares)."""
    return priority * PRIORITY_RANK + asked_s * 1000


@dataclass(order=True)
class Waiter:
    """A call waiting in this replica's queue of one API: by priority, then ``order``."""

    priority: int
    order: float
    seq: int
    chat: str | None = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)
    rank: float = field(default=0.0, compare=False)  # its place in the line (``rank``)
    not_before: float = field(default=0.0, compare=False)


def next_batch(queue: list[Waiter], now: float) -> tuple[list[Waiter], list[Waiter]]:
    """The next waiters to ask for together (those without a chat, or one with its chat),
    and those set aside until their chat has room."""
    batch: list[Waiter] = []
    parked: list[Waiter] = []
    while queue and len(batch) < BATCH:
        waiter = queue[0]
        if waiter.future.done():
            heapq.heappop(queue)
        elif waiter.not_before > now:
            parked.append(heapq.heappop(queue))
        elif batch and (
            waiter.chat is not None
            or batch[0].chat is not None
            or (waiter.priority == Priority.UPDATE) != (batch[0].priority == Priority.UPDATE)
        ):
            break
        else:
            batch.append(heapq.heappop(queue))
            if waiter.chat is not None:
                break
    return batch, parked


def line_after(queue: list[Waiter], now: float) -> float | None:
    """The best rank among the waiters left that may ask now (None: none)."""
    ranks = (w.rank for w in queue if not w.future.done() and w.not_before <= now)
    return min(ranks, default=None)


@contextlib.contextmanager
def calls_as(
    priority: Priority, chat: str | None = None, order: float | None = None
) -> Iterator[None]:
    """The platform calls made within run at ``priority``, for ``chat`` (its per-chat limit),
    ordered by ``order`` among equals (default: when they asked)."""
    tokens = (_PRIORITY.set(priority), _CHAT.set(chat), _ORDER.set(order))
    try:
        yield
    finally:
        _ORDER.reset(tokens[2])
        _CHAT.reset(tokens[1])
        _PRIORITY.reset(tokens[0])


class BudgetExhausted(PlatformApiError):
    """The month's quota is spent, or a call waited past ``maxWaitSeconds``: not sent."""

    def __init__(self, reason: str, endpoint: str) -> None:
        super().__init__(f"platform budget: {reason} ({endpoint})")
        self.reason = reason
        self.endpoint = endpoint

    def log_fields(self) -> dict[str, object]:
        return {"budget": self.reason, "endpoint": self.endpoint}


class BudgetEvents(Protocol):
    """``/metrics``: each wait for the budget, each throttle answer, each card mode change."""

    def budget_waited(self, integration_id: str, endpoint: str, seconds: float) -> None: ...

    def budget_throttled(self, integration_id: str, endpoint: str, scope: str) -> None: ...

    def card_mode_changed(self, integration_id: str, mode: CardMode) -> None: ...


def month_of(wall_s: float, offset_h: float) -> tuple[str, float, float]:
    """The quota month at ``wall_s`` (epoch seconds) in the UTC offset: its label, and its start
    and end as epoch seconds."""
    shift = timedelta(hours=offset_h)
    local = datetime.fromtimestamp(wall_s, UTC) + shift
    start = datetime(local.year, local.month, 1, tzinfo=UTC)
    end = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=UTC)
    return (
        f"{local.year:04d}-{local.month:02d}",
        (start - shift).timestamp(),
        (end - shift).timestamp(),
    )


def asked() -> tuple[Priority, str | None, float | None]:
    """The priority, chat and order the current call was asked with."""
    return _PRIORITY.get(), _CHAT.get(), _ORDER.get()


def quota_mode(
    used: int, limit: int, month: tuple[str, float, float], wall: float
) -> tuple[CardMode, float | None]:
    """The card mode of a month's quota ``used`` of ``limit`` at ``wall`` (``month_of``), and
    the seconds until it runs out at this month's rate (None: no calls yet). ``lean`` from 80 %,
    or from 5 % when the forecast falls before the month's end; ``finals`` from 95 %."""
    _label, start, end = month
    rate = used / max(wall - start, 1.0)
    forecast = (limit - used) / rate if rate > 0 else None
    share = used / limit
    early = forecast is not None and forecast < end - wall
    if share >= FINALS_AT:
        return "finals", forecast
    if share >= LEAN_AT or (early and share >= FORECAST_FROM):
        return "lean", forecast
    return "normal", forecast


class UpdateSlots:
    """The few intermediate card updates of an app on their way at once on this replica: a
    card waits for a slot, the one shown longest ago first, and only then picks its state."""

    def __init__(self, slots: int) -> None:
        self._slots_free = slots
        self._slot_waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def waiting(self) -> int:
        return len(self._slot_waiters)

    @contextlib.asynccontextmanager
    async def take(self, shown_at: float) -> AsyncIterator[None]:
        """Wait for one of the few slots of intermediate updates, the card shown longest ago
        (``shown_at``, on ``clock``) first; its calls run at ``Priority.UPDATE`` in that order."""
        if self._slots_free > 0 and not self._slot_waiters:
            self._slots_free -= 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._slot_waiters, (shown_at, next(self._seq), future))
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # granted as it was cancelled: hand it on
                raise
        try:
            with calls_as(Priority.UPDATE, order=shown_at):
                yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._slot_waiters:
            _at, _seq, future = heapq.heappop(self._slot_waiters)
            if not future.done():
                future.set_result(None)
                return
        self._slots_free += 1
