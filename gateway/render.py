"""The throttled render loop: one serial writer per card, at most every ``updateIntervalMs``,
and the final state always delivered (pitfalls.md #4, #6)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

import structlog

from gateway.adapter import Adapter
from gateway.clock import now_ms
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("gateway.render")


class RenderObserver(Protocol):
    """Told of each card sent or updated and of each state a newer one replaced before it was
    shown (``/metrics``: ``xgw_card_updates_total``, ``xgw_card_updates_coalesced_total``)."""

    def card_rendered(
        self, integration_id: str, kind: Literal["send", "update"], ok: bool
    ) -> None: ...

    def card_coalesced(self, integration_id: str) -> None: ...


class CardRenderer:
    """Owns one card. ``push`` hands it a new Progress; ``close`` delivers the last one."""

    def __init__(
        self,
        *,
        adapter: Adapter,
        reply_to: Envelope,
        interval_ms: int,
        idempotency_key: str,
        handle: str | None = None,
        on_handle: Callable[[str], Awaitable[None]] | None = None,
        final_attempts: int = 6,
        observer: RenderObserver | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.adapter = adapter
        self.reply_to = reply_to
        self.interval = interval_ms / 1000
        self.idempotency_key = idempotency_key
        self.handle = handle
        self.on_handle = on_handle
        self.final_attempts = final_attempts
        self.observer = observer
        self.clock = clock
        self.renders = 0
        self.coalesced = 0  # states pushed that a newer one replaced before they were shown
        self.first_shown_ms: int | None = None  # when the card first showed (epoch ms)
        self._unshown: Progress | None = None  # the newest pushed state not yet shown
        self._latest: Progress | None = None
        self._rendered_version = -1
        self._last_at = 0.0
        self._changed = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    async def start(self, progress: Progress) -> None:
        """Show the card at once (send it, or update the card a crashed replica left)."""
        self._latest = progress
        await self._render(progress)
        self._task = asyncio.create_task(self._loop(), name=f"render:{self.idempotency_key}")

    def push(self, progress: Progress) -> None:
        if self._unshown is not None and self._unshown.version < progress.version:
            self._coalesced()  # replaced within the interval: never shown
        self._unshown = progress
        self._latest = progress
        self._changed.set()

    def _coalesced(self) -> None:
        self.coalesced += 1
        if self.observer is not None:
            self.observer.card_coalesced(self.adapter.integration_id)

    async def _render(self, progress: Progress) -> None:
        kind: Literal["send", "update"] = "send" if self.handle is None else "update"
        try:
            if self.handle is None:
                self.handle = await self.adapter.send_card(
                    self.reply_to, progress, idempotency_key=self.idempotency_key
                )
            else:
                await self.adapter.update_card(self.reply_to, self.handle, progress)
        except Exception:
            if self.observer is not None:
                self.observer.card_rendered(self.adapter.integration_id, kind, False)
            raise
        if self.observer is not None:
            self.observer.card_rendered(self.adapter.integration_id, kind, True)
        if kind == "send" and self.on_handle is not None:
            assert self.handle is not None
            await self.on_handle(self.handle)
        if self.first_shown_ms is None:
            self.first_shown_ms = self.clock()
        shown = self._unshown
        if shown is not None and shown.version <= progress.version:
            if shown.version < progress.version:
                self._coalesced()
            self._unshown = None
        self.renders += 1
        self._rendered_version = progress.version
        self._last_at = time.monotonic()

    async def _loop(self) -> None:
        # Ends cooperatively when close() sets _closing: cancelling it mid-update could cut a
        # platform or Redis call in half (and some libraries lose such a cancel on 3.11).
        while not self._closing:
            await self._changed.wait()
            if self._closing:
                return
            wait = self._last_at + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._closing:
                return
            self._changed.clear()
            progress = self._latest
            if progress is None or progress.version == self._rendered_version:
                continue
            try:
                await self._render(progress)
            except Exception as exc:  # an intermediate update may fail; the final one retries
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # A cancel that a library turned into another error (asyncio.timeout in
                    # 3.11 can) is still a cancel: the loop must end, or close() waits forever.
                    raise asyncio.CancelledError() from exc
                log.warning("card update failed", key=self.idempotency_key, error=str(exc))
                self._last_at = time.monotonic()

    def abandon(self) -> None:
        """Let go of the card without a last update (the turn was handed back or its lease
        lost: another replica goes on with this card). The loop ends at its next step."""
        self._closing = True
        self._changed.set()

    async def close(self, final: Progress) -> None:
        """Stop the loop and deliver ``final`` (retrying with backoff); never raises on cancel."""
        self._latest = final
        if self._task is not None:
            self._closing = True
            self._changed.set()
            _done, pending = await asyncio.wait([self._task], timeout=30)
            if pending:  # an update hung for 30 s: give up on it
                self._task.cancel()
                await asyncio.wait([self._task], timeout=5)
        if final.version == self._rendered_version and self.handle is not None:
            return
        delay = 0.2
        for attempt in range(1, self.final_attempts + 1):
            wait = self._last_at + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self._render(final)
                return
            except Exception as exc:
                log.warning(
                    "final card update failed",
                    key=self.idempotency_key,
                    attempt=attempt,
                    error=str(exc),
                )
                if attempt == self.final_attempts:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
