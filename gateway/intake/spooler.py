"""Durable intake for long connections whose platform never delivers an event again (DingTalk
stream robot messages and card callbacks, the WeCom ``aibot_ws`` connection).

``ingest`` hands the envelope to intake (Redis). When Redis cannot be reached, or the replica is
shutting down, the envelope goes into this replica's local spool (:mod:`gateway.intake.spool`)
instead and the outcome is ``spooled``: durable on disk, so the adapter acks. While anything waits
in the spool, new events go in behind it, so arrival order holds. The replayer feeds the spool into
intake, oldest first, as soon as Redis answers again (it retries with a 0.5-5 s backoff), then
empties the file once Redis says it has them on disk (``durable``: ``WAITAOF`` where the server
has it, else ``appendfsync always``, else a weaker guarantee logged once: see
``sessions.durability``); intake's dedup makes replaying a record twice (a crash mid-replay, or a
durability check that failed) harmless.
When the spool is at ``runtime.spoolMaxBytes`` an event is refused: the original error (or
``IngestUnavailable``) is raised and the adapter does what it did before there was a spool.
Files: ``<dataDir>/spool/<store>-<n>.spool``, one locked slot per replica; at start a replica
also takes over the slots of dead ones (:func:`gateway.intake.spool.open_slots`) and replays
them first.
A little over 300 lines: intake, the group-commit writer and the replayer share one order state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from gateway.edge.ingest import Ingest, IngestOutcome, IngestUnavailable
from gateway.envelope import Envelope
from gateway.intake.spool import SpoolFile, frame, open_slots
from sessions import StoreUnavailable

log = structlog.get_logger("gateway.intake.spool")

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0


def unreachable(exc: BaseException) -> bool:
    """Storage trouble (Redis down, read-only, out of memory) or a replica shutting down: intake
    raises ``IngestUnavailable`` (a ``StoreUnavailable``, as ``ShuttingDown`` is) for each."""
    return isinstance(exc, StoreUnavailable)


class Spooler:
    def __init__(
        self,
        *,
        directory: Path,
        store: str,
        max_bytes: int,
        ingest: Ingest,
        store_raw: Callable[[str], bool],
        durable: Callable[[], Awaitable[str]],
    ) -> None:
        self.directory = directory
        self.store = store
        self.max_bytes = max_bytes
        self.enabled = max_bytes > 0
        self._ingest = ingest
        self._store_raw = store_raw
        self._durable = durable
        self._weak_durability_logged = False
        self.active: SpoolFile | None = None
        self.adopted: list[SpoolFile] = []  # slots of replicas that died: replayed first
        self.full = False
        self.spooled = self.refused = self.replayed = self.dropped = 0
        self._queue: list[tuple[bytes, asyncio.Future[None]]] = []  # kept until written
        self._queued_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._io = asyncio.Lock()  # one file change at a time: a batch write or the reset
        self._work = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._outage = False

    # --- state -----------------------------------------------------------------------------
    @property
    def files(self) -> list[SpoolFile]:
        return [*self.adopted, *([self.active] if self.active is not None else [])]

    @property
    def records(self) -> int:
        """Events waiting to go into intake."""
        waiting = sum(f.records - f.replayed_records for f in self.files)
        return waiting + len(self._queue)

    @property
    def size(self) -> int:
        """Bytes of records in the spool (written or being written)."""
        return sum(f.record_bytes for f in self.files) + self._queued_bytes

    @property
    def pending(self) -> bool:
        """Something is in the spool and not yet through intake (a replay in flight counts)."""
        return bool(self._queue) or any(f.records for f in self.files)

    def state(self) -> dict[str, Any]:
        """For ``/readyz``: informative only (Redis itself decides readiness)."""
        return {
            "enabled": self.enabled,
            "records": self.records,
            "bytes": self.size,
            "maxBytes": self.max_bytes,
            "full": self.full,
        }

    # --- lifecycle -------------------------------------------------------------------------
    async def open(self) -> None:
        """Lock a slot and take over the slots of dead replicas (before adapters start, so
        that their new events queue up behind what was spooled before)."""
        if self.enabled:
            try:
                self.active, self.adopted = await asyncio.to_thread(
                    open_slots, self.directory, self.store
                )
            except OSError as exc:
                log.error(
                    "spool unavailable: long-connection events are not spooled",
                    directory=str(self.directory),
                    error=str(exc),
                )
                self.enabled = False
        if self.records:
            log.warning(
                "spooled events found; replaying them",
                records=self.records,
                files=[f.path.name for f in self.files if f.records],
            )

    def start(self) -> None:
        """Start the replayer (once adapters are up: replies to replayed events need them)."""
        self._task = asyncio.create_task(self._run(), name="spool-replay")

    async def close(self) -> None:
        """Stop replaying; release the files (one still holding events stays for a restart)."""
        self._closing.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self._writer is not None:
            await asyncio.wait([self._writer], timeout=10)
        async with self._io:
            for spool in self.files:
                # Only a file emptied after the durability check goes: one whose records all
                # went into intake but were not confirmed on disk is replayed at the next start.
                await asyncio.to_thread(spool.close, unlink=spool.records == 0)
            self.active, self.adopted = None, []
        if self.records:
            log.warning("spooled events left for the next start", records=self.records)

    # --- intake ----------------------------------------------------------------------------
    async def ingest(self, envelope: Envelope) -> IngestOutcome:
        """Into intake, or while that cannot store (or older events wait) into the spool."""
        if not self.enabled:
            return await self._ingest(envelope)
        error: Exception | None = None
        if not self.pending:
            try:
                return await self._ingest(envelope)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                error = exc
        if error is not None and not self._outage:
            self._outage = True
            log.warning("intake unavailable: spooling long-connection events", error=str(error))
        if await self._append(envelope):
            return IngestOutcome("spooled", "storage unavailable" if error else "behind spooled")
        if isinstance(error, IngestUnavailable):
            raise error
        if error is not None:
            raise IngestUnavailable(str(error)) from error
        raise IngestUnavailable("the local spool is full")

    async def _append(self, envelope: Envelope) -> bool:
        payload = envelope.to_json(store_raw=self._store_raw(envelope.integration_id))
        record = frame(payload.encode())
        if self.active is None:  # closed (shutdown is over)
            return False
        if self.size + len(record) > self.max_bytes:
            self.refused += 1
            if not self.full:
                self.full = True
                log.warning(
                    "spool full: long-connection events are refused until it drains",
                    spooled_bytes=self.size,
                    max_bytes=self.max_bytes,
                )
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((record, future))
        self._queued_bytes += len(record)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="spool-write")
        try:
            await future
        except OSError as exc:
            log.error("spool write failed", error=str(exc))
            return False
        self.spooled += 1
        self._work.set()
        log.info(
            "event spooled",
            integration_id=envelope.integration_id,
            event_id=envelope.event_id,
            records=self.records,
        )
        return True

    async def _write(self) -> None:
        """Write what is queued in one go and fsync once (group commit), until nothing is."""
        try:
            while self._queue:
                batch = self._queue[:]
                data = b"".join(record for record, _ in batch)
                error: OSError | None = None
                async with self._io:
                    assert self.active is not None
                    try:
                        await asyncio.to_thread(self.active.write, data, len(batch))
                    except OSError as exc:
                        error = exc
                del self._queue[: len(batch)]
                self._queued_bytes -= len(data)
                for _, future in batch:
                    if not future.done():
                        if error is None:
                            future.set_result(None)
                        else:
                            future.set_exception(error)
        finally:
            self._writer = None

    # --- replay ----------------------------------------------------------------------------
    async def drain(self) -> bool:
        """Feed everything spooled into intake, oldest first. False when intake could not store
        (Redis still unreachable, shutting down): the rest waits for the next try."""
        while True:
            spool = self.adopted[0] if self.adopted else self.active
            if spool is None:
                return True
            if spool.replayed < spool.size:
                for end, payload in await asyncio.to_thread(spool.read, spool.replayed):
                    if not await self._replay(payload):
                        return False
                    spool.replayed, spool.replayed_records = end, spool.replayed_records + 1
                continue
            if spool is self.active and self._queue:
                if self._writer is not None:  # more is being written: replay that too
                    await asyncio.wait([self._writer])
                continue
            if spool.records and not await self._on_disk():
                return False
            async with self._io:
                if spool.replayed < spool.size or (spool is self.active and self._queue):
                    continue  # more came in meanwhile
                if spool is self.active:
                    await asyncio.to_thread(spool.reset)
                    self.full = False
                    return True
                self.adopted.pop(0)
                await asyncio.to_thread(spool.close, unlink=True)

    async def _on_disk(self) -> bool:
        """Whether Redis holds what was replayed durably (so the file may be emptied)."""
        try:
            how = await self._durable()
        except Exception as exc:
            if not unreachable(exc):
                raise
            log.warning(
                "spool kept: Redis did not confirm the replayed events on disk", error=str(exc)
            )
            return False
        if how == "unconfirmed" and not self._weak_durability_logged:
            self._weak_durability_logged = True
            log.warning(
                "spool emptied without Redis confirming the replayed events on disk "
                "(no WAITAOF, appendfsync not always, or a cluster)"
            )
        return True

    async def _replay(self, payload: bytes) -> bool:
        try:
            envelope = Envelope.from_json(payload)
        except (ValidationError, ValueError):
            self.dropped += 1
            log.error("spooled record is not an envelope; dropped")
            return True
        try:
            outcome = await self._ingest(envelope)
        except Exception as exc:
            if unreachable(exc):
                return False
            self.dropped += 1  # a bug for this one event must not hold up all behind it
            log.exception(
                "spooled event failed in intake; dropped",
                integration_id=envelope.integration_id,
                event_id=envelope.event_id,
            )
            return True
        self.replayed += 1
        log.debug(
            "spooled event replayed",
            integration_id=envelope.integration_id,
            event_id=envelope.event_id,
            status=outcome.status,
        )
        return True

    async def _run(self) -> None:
        delay = MIN_BACKOFF_S
        while not self._closing.is_set():
            if not self.pending:
                self._work.clear()
                await self._pause(None, self._work)
                continue
            before = self.replayed
            try:
                done = await self.drain()
            except Exception:
                log.exception("spool replay failed")
                done = False
            if done:
                delay = MIN_BACKOFF_S
                self._outage = False
                if self.replayed > before:
                    log.info("spool replayed into intake", events=self.replayed - before)
                continue
            await self._pause(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    async def _pause(self, seconds: float | None, *events: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(e.wait()) for e in (self._closing, *events)]
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
