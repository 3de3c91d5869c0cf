"""Platform budgets shared by every replica: the calls an app (``lark:cli_a1b2``) may make to its
platform in sliding windows per bucket (``api:reply``: 50 a second and 1000 a minute), pauses
of the app or of a bucket (a platform that said "slow down"), and the app's month ledger.

Every key of an app carries its hash tag (``KeyBuilder.platform_*``), so a take - check the
pauses, the month and every window, then record the calls granted in each - is one script call
(``platform_budget.lua``) on one slot, through the store's auto-pipeline: replicas racing for
the last call cannot both get it. Each window is an exact sliding log (a sorted set of the calls
of its last ``seconds``, trimmed on use, expiring just after its window), timed by Redis's
clock (``TIME`` in the script), on which every replica agrees. A bucket's line (``Line``) keeps
its room for the replica holding the oldest waiting call, so a replica whose calls happen to ask
a moment late is not passed over again and again (issue 38).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript

from sessions.keys import KeyBuilder
from sessions.records import unavailable
from sessions.scripts import lua
from sessions.store import SessionStore

DAY_MS = 86_400_000
LEDGER_TTL_MS = 40 * DAY_MS  # a month's ledger outlives its month (read after it ends)
MIN_WAIT_S = 0.001  # a denial always says to wait a little


@dataclass(frozen=True, slots=True)
class Window:
    """At most ``limit`` calls in any ``seconds``-long sliding window (``limit`` <= 0: none)."""

    limit: int
    seconds: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"a window lasts more than 0 seconds, not {self.seconds!r}")

    @property
    def ms(self) -> int:
        return max(1, round(self.seconds * 1000))


@dataclass(frozen=True, slots=True)
class Take:
    """``granted`` of the calls asked (0..n), recorded in every bucket and the ledger. Short of
    them: ``wait_s`` until the denying pause, bucket or month has room again, ``denied_by``
    ``"pause"``, the bucket's name or ``"month"`` (None when all were granted)."""

    granted: int
    wait_s: float
    denied_by: str | None
    month_used: int  # this month's ledger after the take


@dataclass(frozen=True, slots=True)
class Line:
    """A replica's place in the line for ``bucket``'s room: ``first`` the rank of the first call
    it asks for now, ``next`` the rank of its next waiting call after those (None: none). Lower
    ranks go first: a replica whose first waiting call ranks lower by more than ``slack`` is
    owed a call of the room before any other takes one, while it is due back (its wait and
    ``grace_s`` not over). Within the slack, whoever asks first takes it (no room left idle
    for a replica a moment late)."""

    bucket: str
    first: float
    next: float | None = None
    slack: float = 0.0
    grace_s: float = 0.25


@dataclass(frozen=True, slots=True)
class MonthUsage:
    used: int
    label: str  # "2026-12"


class PlatformBudgets:
    """Raises ``StoreUnavailable`` when Redis cannot serve a call, ``ValueError`` for a negative
    length or an empty name."""

    def __init__(self, *, store: SessionStore) -> None:
        self.store = store
        self._script: AsyncScript | None = None
        # Calls' log members: this instance's random id and a counter, with Redis's time.
        self._token = os.urandom(6).hex()
        self._calls = itertools.count()

    @property
    def keys(self) -> KeyBuilder:
        return self.store.keys

    async def _run(self, keys: list[str], args: list[Any]) -> Any:
        if self._script is None:
            self._script = self.store.redis.register_script(lua("platform_budget.lua"))
        with unavailable():
            return await self.store.pipe.evalsha(self._script, keys, args)

    async def take(
        self,
        app: str,
        buckets: Sequence[tuple[str, Sequence[Window]]],
        n: int = 1,
        *,
        month: str,
        month_limit: int | None = None,
        month_left_s: float = 0.0,
        line: Line | None = None,
    ) -> Take:
        """Grant ``min(n, room of every window of every bucket, room of the month)`` calls (n at
        least 1) and record them, in one round trip; nothing while the app or a bucket is
        paused, or the month is used up (``month_limit``; ``month_left_s``: until the next).
        With a ``line``, the room of its bucket owes one call to each other replica waiting
        with a lower rank first (``Line``; the script's header)."""
        _name(app, "app")
        _name(month, "month")
        if not (math.isfinite(month_left_s) and month_left_s >= 0):
            raise ValueError(f"month_left_s must be >= 0, not {month_left_s!r}")
        n = max(1, n)
        k = self.keys
        # A bucket named twice, or a duration twice in a bucket, is one log: the tightest limit.
        merged: dict[str, dict[int, int]] = {}
        for bucket, windows in buckets:
            _name(bucket, "bucket")
            logs = merged.setdefault(bucket, {})
            for w in windows:
                logs[w.ms] = min(logs.get(w.ms, w.limit), w.limit)
        keys = [k.platform_pause(app), k.platform_month(app, month)]
        args: list[Any] = [
            "take",
            n,
            -1 if month_limit is None else max(0, month_limit),
            math.ceil(month_left_s * 1_000_000),
            LEDGER_TTL_MS,
            f"{self._token}.{next(self._calls)}",
            *(("", "", 0, -1, 0, 0) if line is None else _line_args(line, self._token)),
        ]
        for bucket, logs in merged.items():
            keys.append(k.platform_pause(app, bucket))
            args += [bucket, len(logs)]
            for ms, limit in logs.items():
                keys.append(k.platform_window(app, bucket, ms))
                args += [max(0, limit), ms]
        if line is not None:
            keys.append(k.platform_line(app, line.bucket))
        granted, wait_us, by, used = await self._run(keys, args)
        granted = int(granted)
        if granted >= n:
            return Take(granted, 0.0, None, int(used))
        return Take(granted, max(int(wait_us) / 1_000_000, MIN_WAIT_S), str(by), int(used))

    async def pause(self, app: str, bucket: str | None, seconds: float) -> None:
        """Deny every take of the app (``bucket`` None) or touching ``bucket`` for ``seconds``;
        a pause already longer stays as it is."""
        _name(app, "app")
        if bucket is not None:
            _name(bucket, "bucket")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"a pause lasts >= 0 seconds, not {seconds!r}")
        ms = math.ceil(seconds * 1000)
        if ms > 0:
            await self._run([self.keys.platform_pause(app, bucket)], ["pause", ms])

    async def paused_for(self, app: str, bucket: str | None) -> float:
        """Seconds left of the app's pause (``bucket`` None) or the bucket's own; 0 when none."""
        _name(app, "app")
        if bucket is not None:
            _name(bucket, "bucket")
        with unavailable():
            left = int(await self.store.redis.pttl(self.keys.platform_pause(app, bucket)))
        return max(left, 0) / 1000

    async def uncount(self, app: str, month: str, n: int = 1) -> None:
        """Take ``n`` calls off the month's ledger (not below 0): calls the platform refused.
        Their place in the windows stays taken: they were made."""
        _name(app, "app")
        _name(month, "month")
        if n < 0:
            raise ValueError(f"cannot uncount {n} calls")
        if n > 0:
            await self._run([self.keys.platform_month(app, month)], ["uncount", n])

    async def month_usage(self, app: str, month: str) -> MonthUsage:
        _name(app, "app")
        _name(month, "month")
        with unavailable():
            raw = await self.store.redis.get(self.keys.platform_month(app, month))
        return MonthUsage(int(raw or 0), month)


def _line_args(line: Line, me: str) -> tuple[str, str, str, str, int, str]:
    _name(line.bucket, "bucket")
    figures = (line.first, line.slack, line.grace_s, 0.0 if line.next is None else line.next)
    if not all(math.isfinite(f) and f >= 0 for f in figures):
        raise ValueError(f"a line's ranks, slack and grace are finite and >= 0, not {line!r}")
    after = -1.0 if line.next is None else line.next
    grace_us = math.ceil(line.grace_s * 1_000_000)
    return line.bucket, me, repr(line.first), repr(after), grace_us, repr(line.slack)


def _name(value: str, what: str) -> None:
    if not value:
        raise ValueError(f"the {what} must not be empty")
