"""The throttled render loop: one serial writer per card, at most every ``updateIntervalMs``,
and the final state always delivered (docs/architecture.md, invariant 7).

No task waits per card: a pushed state arms one timer for when the card may next be updated,
which starts the update; a turn that ends before then costs no task at all."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

import structlog

from gateway.clock import now_ms
from gateway.edge.adapter import Adapter
from gateway.edge.call_budget import CallBudget
from gateway.edge.calls import BudgetExhausted, Priority, calls_as
from gateway.edge.long_answer import live
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("gateway.turns.render")

LEAN_MIN_S = 5.0  # in the quota's lean mode a card changes at most this often
STALE_S = 20.0  # an update of a card unchanged this long goes at a final state's priority (its
# wait included, a live card stays within 30 s unchanged: issue 38)
# The final state follows the card's last write by this much at most, not a whole interval
# (issue 38: finals within 2 s of the turn's end): Lark updates one message at most 5 times a
# second (im-v1/message/patch, "单条消息更新频控为 5 QPS"), and DingTalk's channel SDK keeps
# 0.5 s between a card's last frame and its final (dingtalk-channel-sdk-python card.py
# ``FRAME_GAP_S``).
FINAL_GAP_S = 0.5
NOTHING = contextlib.nullcontext()


class RenderObserver(Protocol):
    """Told of each card sent or updated and of each state a newer one replaced before it was
    shown (``/metrics``: ``xgw_card_updates_total``, ``xgw_card_updates_coalesced_total``)."""

    def card_rendered(
        self, integration_id: str, kind: Literal["send", "update"], ok: bool
    ) -> None: ...

    def card_coalesced(self, integration_id: str) -> None: ...

    def card_live(self, card: CardRenderer, live: bool) -> None:
        """A card began (True) or ended (False) being updated here (the stalest card's age)."""


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
        self._closing = False
        self._started = False
        self.pending_since: float | None = None  # when the oldest unshown state came (monotonic)
        self._call: asyncio.Future[None] | None = None  # the update call on its way
        self._held_at = 0.0  # an update last held back for waiting first cards (monotonic)
        self._rendering = False  # the update task holds its slot and is showing a state
        self._timer: asyncio.TimerHandle | None = None  # when the next update may go
        self._task: asyncio.Task[None] | None = None  # the update on its way (one at a time)

    @property
    def started(self) -> bool:
        """Whether the card has been shown (``start``)."""
        return self._started

    async def start(self, progress: Progress) -> None:
        """Show the card at once (send it, or update the card a crashed replica left)."""
        self._latest = progress
        if self.adapter.call_budget is None:
            await self._render(progress)
        else:
            with calls_as(Priority.FIRST, chat=self.reply_to.chat.id):
                await self._render(progress)
        self._started = True
        if self.observer is not None:
            self.observer.card_live(self, True)
        self._schedule()  # a state pushed while the first card was on its way

    def push(self, progress: Progress) -> None:
        if not self.adapter.live_updates:
            self._latest = progress  # nothing to show until close(): no timer, no update
            return
        if self._unshown is not None and self._unshown.version < progress.version:
            self._coalesced()  # replaced within the interval: never shown
        self._unshown = progress
        self._latest = progress
        if self.pending_since is None:
            self.pending_since = time.monotonic()
        self._schedule()

    def _schedule(self) -> None:
        """Arm the timer of the next update, unless one is armed or on its way, or nothing new
        is to be shown."""
        if self._closing or not self._started or self._task is not None or self._timer:
            return
        if not self.adapter.live_updates:
            return
        latest = self._latest
        if latest is None or latest.version == self._rendered_version:
            return
        budget = self.adapter.call_budget
        factor = 1.0 if budget is None else budget.interval_factor()
        if factor is None:  # the month's quota is nearly spent: the final state only
            return
        interval = self.interval if factor == 1.0 else max(self.interval * factor, LEAN_MIN_S)
        wait = max(0.0, max(self._last_at, self._held_at) + interval - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(wait, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if not self._closing and self._task is None:
            self._task = asyncio.create_task(self._update(), name=f"render:{self.idempotency_key}")

    async def _update(self) -> None:
        # Ends cooperatively: close() waits for an update on its way rather than cancelling it
        # mid-update, which could cut a platform or Redis call in half (and some libraries lose
        # such a cancel on 3.11); one still waiting for its slot under the platform budget is
        # cancelled (nothing is on its way).
        try:
            budget = self.adapter.call_budget
            if budget is None:  # not paced (the console): nothing to wait for
                self._rendering = True
                progress = self._latest
                if progress is not None and progress.version != self._rendered_version:
                    await self._render_update(progress)
            elif time.monotonic() - self._last_at > STALE_S:  # no slot: a final's priority
                self._rendering = True
                await self._paced_update(budget)
            else:
                async with budget.update_slot(self._last_at):
                    self._rendering = True  # from here on close() lets the update complete
                    await self._paced_update(budget)
        finally:
            self._rendering = False
            self._task = None
        self._schedule()  # a newer state came while this one was on its way

    async def _paced_update(self, budget: CallBudget) -> None:
        """The newest state, picked once the update slot is ours. Held back while first cards
        wait; a card unchanged for long goes as a final state would, oldest first."""
        stale = time.monotonic() - self._last_at > STALE_S
        if not stale and budget.holding_back():
            self._held_at = time.monotonic()  # first cards wait: this one waits too
            return
        progress = self._latest
        with calls_as(Priority.FINAL, order=self._last_at) if stale else NOTHING:
            if progress is not None and progress.version != self._rendered_version:
                await self._render_update(progress)

    async def _render_update(self, progress: Progress) -> None:
        try:
            await self._render(progress)
        except Exception as exc:  # an intermediate update may fail; the final retries
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A cancel that a library turned into another error (asyncio.timeout in 3.11
                # can) is still a cancel.
                raise asyncio.CancelledError() from exc
            log.warning("card update failed", key=self.idempotency_key, error=str(exc))
            self._last_at = time.monotonic()

    def _coalesced(self) -> None:
        self.coalesced += 1
        if self.observer is not None:
            self.observer.card_coalesced(self.adapter.integration_id)

    async def _render(self, progress: Progress) -> None:
        kind: Literal["send", "update"] = "send" if self.handle is None else "update"
        given = live(progress)  # a huge answer's head: an update costs the same at any length
        # The loop task may be cancelled while an update is on its way (a turn that ends, a
        # shutdown); a cancel that lands inside a redis-py command can be swallowed, leaving the
        # turn hanging until shutdown. Card calls therefore run shielded, on every platform: the
        # cancel lands on the shield, and the call it interrupted still completes (each is
        # idempotent: the same key never makes a second card).
        # (close() cancels the shielded call itself while it still waits for its turn under the
        # platform budget: then nothing of it is on its way.)
        try:
            if self.handle is None:
                sent = asyncio.ensure_future(
                    self.adapter.send_card(
                        self.reply_to, given, idempotency_key=self.idempotency_key
                    )
                )
                self.handle = await asyncio.shield(sent)
            else:
                call = asyncio.ensure_future(
                    self.adapter.update_card(self.reply_to, self.handle, given)
                )
                self._call = call
                try:
                    await asyncio.shield(call)
                finally:
                    self._call = None
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
        newer = self._latest is not None and self._latest.version > progress.version
        self.pending_since = self._last_at if newer else None

    def abandon(self) -> None:
        """Let go of the card without a last update (the turn was handed back or its lease
        lost: another replica goes on with this card). An update on its way completes."""
        if self._started and not self._closing and self.observer is not None:
            self.observer.card_live(self, False)
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def close(self, final: Progress) -> None:
        """Stop the updates and deliver ``final`` (retrying with backoff); never raises on
        cancel."""
        self._latest = final
        self.abandon()  # no further intermediate update
        if (task := self._task) is not None:
            budget = self.adapter.call_budget
            call = self._call
            if not self._rendering:
                task.cancel()  # waiting for its update slot: nothing of it is on its way
            elif budget is not None and call is not None and call in budget.waiting:
                call.cancel()  # waiting for its turn under the budget: nor is anything here
            _done, pending = await asyncio.wait([task], timeout=30)
            if pending:  # an update hung for 30 s: give up on it
                task.cancel()
                await asyncio.wait([task], timeout=5)
        if final.version == self._rendered_version and self.handle is not None:
            return
        delay = 0.2
        for attempt in range(1, self.final_attempts + 1):
            wait = self._last_at + min(self.interval, FINAL_GAP_S) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                paced = self.adapter.call_budget is not None
                with calls_as(Priority.FINAL, chat=self.reply_to.chat.id) if paced else NOTHING:
                    await self._render(final)
                return
            except Exception as exc:
                spent = isinstance(exc, BudgetExhausted)  # the month's quota: no use retrying
                log.warning(
                    "final card update failed",
                    key=self.idempotency_key,
                    attempt=attempt,
                    error=str(exc),
                )
                if spent or attempt == self.final_attempts:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
