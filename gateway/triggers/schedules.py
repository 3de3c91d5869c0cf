"""The scheduler: one task per replica that starts each schedule's turns at the times its cron
names, exactly once per fire time across all replicas and workers.

Each tick (about a second, or sooner when a fire is due: a 6-field cron can fire every second)
it reads the schedules from the live settings and Redis, and per enabled schedule the last fire
recorded in Redis. The newest fire since then that is due is *claimed* (one SET NX PX on the
key of (schedule, fire time)); whoever gets the claim hands an Envelope of kind ``schedule`` to
intake - the same path as a message: budgets (a fire over the chat's limits is skipped, with
a notice in the chat), merge, busy policy, session, snapshot, audit, the card in the chat - and
then moves the schedule's last fire forward. Its event id
``schedule:<id>:<fire ms>`` is deduplicated again at intake, so a claim that expired under a
stalled replica still makes no second turn.

Restarts: the last fire lives in Redis. Of the fires missed since then, the newest runs once if
it is at most ``misfireGraceSeconds`` old; the others are skipped with one info line
(``schedule misfire skipped``). A schedule seen for the first time fires from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

import structlog

from gateway.clock import now_ms
from gateway.config.cron import CronError, iso
from gateway.config.schedule_settings import RuntimeSchedule, ScheduleConfig
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Chat, Envelope, Sender, Trigger
from gateway.triggers.schedule_book import Entry, entries_of, made_in_chat, too_often
from sessions import ScheduleStore

log = structlog.get_logger("gateway.schedules")

CLAIM_MS = 60_000  # a claim outlives any tick; a crashed claimer's fire is retried after it


def schedule_envelope(entry: Entry, platform: str, fire_ms: int) -> Envelope:
    """A fire as an Envelope: no message to answer (``reply_to`` None), the configured chat."""
    s = entry.schedule
    return Envelope(
        integration_id=s.integration_id,
        platform=platform,
        event_id=f"schedule:{s.id}:{fire_ms}",
        kind="schedule",
        received_at=datetime.fromtimestamp(fire_ms / 1000, UTC),
        chat=Chat(id=s.chat_id, type=s.chat_type),
        sender=Sender(id=f"schedule:{s.id}", name=f"schedule {s.id}"),
        text=s.text,
        bot_mentioned=True,
        trigger=Trigger(id=s.id, xpert_id=s.xpert_id, asker=asker_of(s)),
    )


def asker_of(schedule: ScheduleConfig) -> str | None:
    """Who made a chat's schedule (``/schedule``, a confirmed routine): the one person who may
    answer its turns' questions besides ``approvers``. None for the config's and the admin API's."""
    if made_in_chat(schedule):
        return getattr(schedule, "created_by", None) or None
    return None


class Scheduler:
    def __init__(
        self,
        *,
        store: ScheduleStore,
        settings: Callable[[], Settings],
        ingest: Callable[[Envelope], Awaitable[IngestOutcome]],
        adapters: Mapping[str, Adapter],
        owner: str,
        clock: Callable[[], int] = now_ms,
        tick_ms: int = 1000,
        wake: asyncio.Event | None = None,
    ) -> None:
        self.store = store
        self.settings = settings  # read each tick: a reload changes the schedules at once
        self.ingest = ingest
        self.adapters = adapters
        self.owner = owner
        self.clock = clock
        self.tick_ms = tick_ms
        self.fired = 0  # fires this replica started
        # Per integrationId, for /metrics: fires started here, and fires skipped as too old.
        self.fired_by: Counter[str] = Counter()
        self.missed_by: Counter[str] = Counter()
        self._next: dict[tuple[str, str, str, int], int] = {}  # (id, cron, zone, last) -> next
        self._warned: set[str] = set()
        # Set to look again now: by wake() and stop(), and by whoever was handed it (a schedule
        # made in a chat, which intake handles and which is built before the scheduler).
        self._event = wake or asyncio.Event()
        self._stopping = False
        self._ticking = False
        self._look_at = 0  # when run() looks next (epoch ms): the first look is due at once

    def busy(self) -> bool:
        """A tick is under way or due now (woken, or the clock reached the next look, as when a
        test moves it): Gateway.idle reads it."""
        if self._stopping:
            return False
        return self._ticking or self._event.is_set() or self._look_at <= self.clock()

    def stop(self) -> None:
        self._stopping = True
        self._event.set()

    def wake(self) -> None:
        """Look again now (a schedule was made here)."""
        self._event.set()

    async def run(self) -> None:
        backoff = 0.1
        while not self._stopping:
            self._ticking = True
            try:
                due = await self.tick()
                backoff = 0.1
            except Exception as exc:  # Redis trouble: the next tick tries again
                log.warning("scheduler tick failed", error=str(exc) or type(exc).__name__)
                due = self.clock() + int(backoff * 1000)
                backoff = min(backoff * 2, 5.0)
            finally:
                self._ticking = False
            self._look_at = due
            wait = max(0.0, (due - self.clock()) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._event.wait()
            self._event.clear()

    async def tick(self) -> int:
        """Start what is due; returns when to look next (epoch ms)."""
        now = self.clock()
        settings = self.settings()
        entries = entries_of(settings, await self.store.runtime())
        lasts = await self.store.last_fires()
        soonest = now + self.tick_ms
        for entry in entries:
            s = entry.schedule
            integ = settings.integration(s.integration_id)
            if not s.enabled or entry.cron is None or integ is None or not integ.enabled:
                continue
            if made_in_chat(s) and (why := too_often(integ, entry.cron)) is not None:
                # Made before the minimum (or a larger one now): held, not fired (issue 25).
                self._warn(s.id, "schedule made in a chat fires too often; not fired", why)
                continue
            last = lasts.get(s.id)
            if last is None:
                start = s.created_at if isinstance(s, RuntimeSchedule) and s.created_at else now
                await self.store.begin(s.id, start)
                last = min(start, now)
            try:
                nxt = self._upcoming(entry, last)
                if nxt > now:
                    soonest = min(soonest, nxt)
                    continue
                await self._due(entry, integ.platform, last, now)
                soonest = min(soonest, self._upcoming(entry, now))
            except CronError as exc:
                self._warn(s.id, "schedule cannot fire", str(exc))
        if len(self._next) > 10_000:
            self._next.clear()
        return soonest

    def _upcoming(self, entry: Entry, after: int) -> int:
        assert entry.cron is not None
        key = (entry.schedule.id, entry.cron.expr, entry.zone, after)
        nxt = self._next.get(key)
        if nxt is None:
            nxt = self._next[key] = entry.cron.next_after(after)
        return nxt

    async def _due(self, entry: Entry, platform: str, last: int, now: int) -> None:
        """The newest fire in (last, now]: run it within the grace, else skip it (and every
        older one)."""
        s, cron = entry.schedule, entry.cron
        assert cron is not None
        fire = cron.latest_until(now)
        if fire <= last:
            return
        if now - fire > s.misfire_grace_seconds * 1000:
            previous = await self.store.advance(s.id, fire)
            if previous is not None:
                self._skipped(entry, previous, fire + 1)
            return
        adapter = self.adapters.get(s.integration_id)
        if adapter is None:
            return  # not started on this replica (yet): another one, or the next tick
        if not adapter.posts_unprompted(s.chat_type):
            self._warn(s.id, "schedule cannot post: the platform mode needs a message to answer")
            await self.store.advance(s.id, fire)
            return
        if not await self.store.claim(s.id, fire, self.owner, ttl_ms=CLAIM_MS):
            return  # another replica has this fire
        try:
            outcome = await self.ingest(schedule_envelope(entry, platform, fire))
        except Exception as exc:
            await self.store.release(s.id, fire, self.owner)
            log.warning("schedule fire not stored; retrying", schedule_id=s.id, error=str(exc))
            return
        previous = await self.store.advance(s.id, fire)
        if previous is not None:
            self._skipped(entry, previous, fire)
        if outcome.status == "refused":  # over the chat's budget: skipped, the chat was told
            log.info(
                "schedule fire skipped: over a budget",
                schedule_id=s.id,
                fire_time=iso(fire, cron.tz),
                limit=outcome.reason,
            )
            return
        self.fired += 1
        self.fired_by[s.integration_id] += 1
        log.info(
            "schedule fired",
            schedule_id=s.id,
            fire_time=iso(fire, cron.tz),
            status=outcome.status,
        )

    def _skipped(self, entry: Entry, after: int, before: int) -> None:
        """One line for the fires in (after, before) that did not run (replicas were down)."""
        if not after or entry.cron is None:
            return
        missed = entry.cron.between(after, before - 1)
        if missed:
            self.missed_by[entry.schedule.integration_id] += len(missed)
            log.info(
                "schedule misfire skipped",
                schedule_id=entry.schedule.id,
                fire_time=iso(missed[-1], entry.cron.tz),
                first=iso(missed[0], entry.cron.tz),
                count=len(missed) if len(missed) < 1000 else "1000+",
            )

    def _warn(self, schedule_id: str, message: str, error: str = "") -> None:
        if schedule_id not in self._warned:
            self._warned.add(schedule_id)
            log.warning(message, schedule_id=schedule_id, **({"error": error} if error else {}))
