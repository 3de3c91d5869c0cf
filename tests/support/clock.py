"""A clock the test moves: epoch ms that stand still until ``advance``, which wakes the
in-process gateways reading it (their schedulers and flushers look again at once)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.clock import now_ms


def aligned(every_ms: int, after_ms: int = 50) -> int:
    """``after_ms`` past the next multiple of ``every_ms`` from now: a start just past a fire
    time of a cron firing every ``every_ms``, so each ``advance(every_ms)`` passes one more."""
    return (now_ms() // every_ms + 1) * every_ms + after_ms


class FakeClock:
    """Epoch ms for ``Gateway(clock=...)``: ``clock()`` reads them, ``advance(ms)`` moves them
    forward and calls whoever asked to be told (``on_advance``)."""

    def __init__(self, start: int | None = None) -> None:
        self.now = now_ms() if start is None else start
        self._told: list[Callable[[], None]] = []

    def __call__(self) -> int:
        return self.now

    def on_advance(self, wake: Callable[[], None]) -> None:
        self._told.append(wake)

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` forward; the new time."""
        assert ms >= 0, "a clock only moves forward"
        self.now += ms
        for wake in self._told:
            wake()
        return self.now
