"""The local spool on its own: the file format and its recovery (torn and damaged records),
slots and locks, and the spooler's order, bound and replay with intake as a stub that fails
like Redis does (the end-to-end tests with a real Redis are in test_spool_e2e.py)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gateway.edge.ingest import IngestOutcome, ShuttingDown
from gateway.envelope import Chat, Envelope, Sender
from gateway.intake.spool import (
    HEADER,
    MAGIC,
    MAX_RECORD,
    SpoolFile,
    frame,
    open_slots,
    store_identity,
)
from gateway.intake.spooler import Spooler
from sessions import StoreUnavailable
from tests.support.waits import eventually

STORE = store_identity("redis://127.0.0.1:1/0", "t")


def envelope(text: str, event_id: str | None = None) -> Envelope:
    return Envelope(
        integration_id="dt",
        platform="dingtalk",
        event_id=event_id or f"ev-{text}",
        chat=Chat(id="cid1", type="p2p"),
        sender=Sender(id="staff1"),
        text=text,
        raw={"secret": "platform payload"},
    )


def write_records(path: Path, payloads: list[bytes]) -> SpoolFile:
    spool = SpoolFile.open(path)
    assert spool is not None
    spool.write(b"".join(frame(p) for p in payloads), len(payloads))
    return spool


def payloads(spool: SpoolFile) -> list[bytes]:
    return [p for _end, p in spool.read(len(MAGIC), 1 << 30)]


# --- the file ----------------------------------------------------------------------------------
def test_records_are_on_disk_and_read_back_in_order_after_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    spool = write_records(path, [b"one", b"two"])
    spool.write(frame(b"three"), 1)
    os.close(spool.fd)  # the process dies: no unlink, no reset
    again = SpoolFile.open(path)
    assert again is not None
    assert again.records == 3 and payloads(again) == [b"one", b"two", b"three"]
    assert path.stat().st_mode & 0o777 == 0o600  # message bodies: owner only
    again.close()


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\x00\x00", id="half a header"),
        pytest.param(HEADER.pack(100, 1234) + b'{"env', id="payload cut short"),
        pytest.param(HEADER.pack(5, 1234) + b"xxxxx", id="last record checksum wrong"),
        pytest.param(b"\x00" * 64, id="zeros (size extended before the data landed)"),
    ],
)
def test_a_torn_last_record_is_dropped_and_the_file_cut_back(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "a.spool"
    spool = write_records(path, [b"one", b"two"])
    good = spool.size
    os.close(spool.fd)
    with path.open("ab") as f:
        f.write(tail)
    with capture_logs() as logs:
        again = SpoolFile.open(path)
    assert again is not None
    assert payloads(again) == [b"one", b"two"] and again.size == good == path.stat().st_size
    assert [e["log_level"] for e in logs] == ["warning"]
    assert "torn" in logs[0]["event"] and logs[0]["dropped_bytes"] == len(tail)
    again.write(frame(b"three"), 1)  # appends go on from the cut
    assert payloads(again) == [b"one", b"two", b"three"]
    again.close()
    assert not list(tmp_path.glob("*.damaged*"))


def test_damage_followed_by_more_records_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "a.spool"
    spool = write_records(path, [b"one", b"two", b"three"])
    os.close(spool.fd)
    data = bytearray(path.read_bytes())
    second = len(MAGIC) + HEADER.size + 3
    data[second + HEADER.size] ^= 0xFF  # a flipped bit in "two"
    path.write_bytes(bytes(data))
    with capture_logs() as logs:
        again = SpoolFile.open(path)
    assert again is not None and payloads(again) == [b"one"]
    [aside] = tmp_path.glob("a.spool.damaged-*")
    assert aside.read_bytes() == bytes(data[second:])
    assert logs[0]["log_level"] == "error"
    again.close()


@pytest.mark.parametrize("length", [5000, 1 << 20, 0, MAX_RECORD + 1])
def test_a_corrupt_length_mid_file_sets_the_rest_aside(tmp_path: Path, length: int) -> None:
    # A length that overshoots the end of the file once looked like a torn last write, and the
    # acked records after it were cut off (issue 25).
    path = tmp_path / "a.spool"
    spool = write_records(path, [b'{"n":1}', b'{"n":2}', b'{"n":3}', b'{"n":4}'])
    os.close(spool.fd)
    data = bytearray(path.read_bytes())
    second = len(MAGIC) + HEADER.size + 7
    data[second : second + 4] = length.to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with capture_logs() as logs:
        again = SpoolFile.open(path)
    assert again is not None and payloads(again) == [b'{"n":1}']
    [aside] = tmp_path.glob("a.spool.damaged-*")
    assert aside.read_bytes() == bytes(data[second:])  # records 2 to 4, kept for inspection
    assert [e["log_level"] for e in logs] == ["error"]
    assert logs[0]["set_aside_bytes"] == len(data) - second
    again.close()


def test_creating_setting_aside_and_removing_files_fsyncs_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append("dir")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    d = tmp_path / "spool"
    own, _ = open_slots(d, STORE)  # the directory and the file created
    assert synced == ["dir", "dir"]
    own.close(unlink=True)  # removed
    assert synced == ["dir"] * 3
    foreign = d / f"{STORE}-0.spool"
    foreign.write_bytes(b"something else entirely")
    synced.clear()
    own, _ = open_slots(d, STORE)  # renamed aside, then a slot created
    assert synced == ["dir", "dir"]
    own.close()


def test_a_file_that_is_not_a_spool_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / "spool").mkdir()
    foreign = tmp_path / "spool" / f"{STORE}-0.spool"
    foreign.write_bytes(b"something else entirely")
    own, adopted = open_slots(tmp_path / "spool", STORE)
    assert own.path.name == f"{STORE}-1.spool" and adopted == []
    assert (tmp_path / "spool" / f"{STORE}-0.spool.damaged").exists()
    own.close(unlink=True)


# --- slots ---------------------------------------------------------------------------------------
def test_replicas_sharing_a_data_dir_each_lock_their_own_file(tmp_path: Path) -> None:
    d = tmp_path / "spool"
    first, _ = open_slots(d, STORE)
    second, _ = open_slots(d, STORE)  # another process: flock is per open file
    assert first.path != second.path
    assert SpoolFile.open(first.path) is None  # locked while its holder lives
    first.write(frame(b"left behind"), 1)
    os.close(first.fd)  # the first replica dies with a record in its spool
    third, adopted = open_slots(d, STORE)
    # The dead replica's slot is free again: the next replica takes it over, records and all.
    assert third.path == first.path and payloads(third) == [b"left behind"] and adopted == []
    second.close(unlink=True)
    third.close(unlink=True)


def test_several_dead_replicas_are_all_taken_over(tmp_path: Path) -> None:
    d = tmp_path / "spool"
    dead = [open_slots(d, STORE)[0] for _ in range(3)]
    for i, spool in enumerate(dead[1:], 1):
        spool.write(frame(f"r{i}".encode()), 1)
    for spool in dead:
        os.close(spool.fd)
    own, adopted = open_slots(d, STORE)
    assert own.path == dead[0].path and own.records == 0
    assert [payloads(s) for s in adopted] == [[b"r1"], [b"r2"]]
    for spool in (own, *adopted):
        spool.close(unlink=True)


def test_spools_of_another_redis_are_left_alone(tmp_path: Path) -> None:
    d = tmp_path / "spool"
    other = store_identity("redis://elsewhere:6379/0", "t")
    theirs, _ = open_slots(d, other)
    theirs.write(frame(b"not ours"), 1)
    os.close(theirs.fd)
    live, _ = open_slots(d, other)  # empty, held by a running replica
    dead, _ = open_slots(d, store_identity(None, "x"))
    os.close(dead.fd)  # empty, its replica killed
    with capture_logs() as logs:
        own, adopted = open_slots(d, STORE)
    assert adopted == [] and own.records == 0
    assert any("another Redis" in e["event"] for e in logs)
    assert theirs.path.exists() and live.path.exists() and not dead.path.exists()
    own.close(unlink=True)
    live.close(unlink=True)


# --- the spooler -------------------------------------------------------------------------------
class Intake:
    """Stands in for the pipeline: records what it stored, fails while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.stored: list[str] = []
        self.seen: set[str] = set()
        self.error: Callable[[], Exception] = lambda: StoreUnavailable("Connection refused")
        self.bug_on: set[str] = set()  # texts intake fails on with a bug
        self.on_disk: str | None = "waitaof"  # what Redis says of its disk; None: it fails
        self.durable_calls = 0

    async def durable(self) -> str:
        """Stands in for ``sessions.confirm_durable`` (tested on real servers below)."""
        self.durable_calls += 1
        if self.on_disk is None:
            raise StoreUnavailable("Redis did not fsync its AOF within 2000 ms")
        return self.on_disk

    async def __call__(self, env: Envelope) -> IngestOutcome:
        await asyncio.sleep(0)
        if self.down:
            raise self.error()
        if env.text in self.bug_on:
            raise ValueError("a bug in intake")
        if env.event_id in self.seen:
            return IngestOutcome("duplicate")
        self.seen.add(env.event_id)
        self.stored.append(env.text)
        return IngestOutcome("queued")


async def spooler(tmp_path: Path, intake: Intake, **kw: Any) -> Spooler:
    sp = Spooler(
        directory=tmp_path / "spool",
        store=STORE,
        max_bytes=kw.pop("max_bytes", 1 << 20),
        ingest=intake,
        store_raw=lambda _id: False,
        durable=intake.durable,
    )
    await sp.open()
    sp.start()
    return sp


async def test_spools_while_intake_fails_and_replays_in_order_once_it_answers(
    tmp_path: Path,
) -> None:
    intake = Intake()
    sp = await spooler(tmp_path, intake)
    assert (await sp.ingest(envelope("first"))).status == "queued"
    intake.down = True
    outcomes = [await sp.ingest(envelope(t)) for t in ("a", "b", "c")]
    assert [o.status for o in outcomes] == ["spooled"] * 3
    assert sp.records == 3 and sp.state()["records"] == 3
    # The spool's JSON is the envelope as intake would store it: no platform payload.
    assert b"platform payload" not in sp.files[0].path.read_bytes()
    intake.down = False
    # Intake answers again, but older events wait: a new one goes in behind them.
    assert (await sp.ingest(envelope("d"))).status in ("spooled", "queued")
    await eventually(lambda: intake.stored == ["first", "a", "b", "c", "d"])
    await eventually(lambda: not sp.pending)
    assert sp.size == 0 and sp.files[0].path.stat().st_size == len(MAGIC)
    assert (await sp.ingest(envelope("e"))).status == "queued"  # straight in again
    assert (sp.spooled, sp.replayed) in ((3, 3), (4, 4))
    await sp.close()
    assert not list((tmp_path / "spool").glob("*.spool"))  # empty: removed at exit


async def test_the_same_event_spooled_twice_is_stored_once(tmp_path: Path) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake)
    for text in ("a", "b", "b", "c"):
        await sp.ingest(envelope(text))
    intake.down = False
    await eventually(lambda: not sp.pending)
    assert intake.stored == ["a", "b", "c"] and sp.replayed == 4
    await sp.close()


async def test_a_full_spool_refuses_events_until_it_drains(tmp_path: Path) -> None:
    intake = Intake()
    intake.down = True
    one = len(frame(envelope("a").to_json().encode()))
    sp = await spooler(tmp_path, intake, max_bytes=2 * one + 10)
    await sp.ingest(envelope("a"))
    await sp.ingest(envelope("b"))
    with capture_logs() as logs, pytest.raises(StoreUnavailable, match="spool is full"):
        await sp.ingest(envelope("c"))
    assert sp.full and sp.refused == 1 and sp.state()["full"] is True
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "spool full: long-connection events are refused until it drains"
    ]
    intake.down = False
    with pytest.raises(StoreUnavailable, match="spool is full"):  # behind the spooled ones
        await sp.ingest(envelope("d"))
    await eventually(lambda: not sp.pending)
    assert intake.stored == ["a", "b"] and not sp.full
    # An event that does not fit even an empty spool gets the error intake raised.
    intake.down = True
    with pytest.raises(StoreUnavailable, match="Connection refused"):
        await sp.ingest(envelope("x" * 3 * one))
    intake.down = False
    assert (await sp.ingest(envelope("e"))).status == "queued"
    await sp.close()


async def test_bugs_are_not_spooled_and_shutdown_is(tmp_path: Path) -> None:
    intake = Intake()
    sp = await spooler(tmp_path, intake)
    intake.down = True
    intake.error = lambda: KeyError("a bug")
    with pytest.raises(KeyError):
        await sp.ingest(envelope("a"))
    # DingTalk would never push it again: kept for the next start rather than refused.
    intake.error = lambda: ShuttingDown("shutting down")
    assert (await sp.ingest(envelope("b"))).status == "spooled"
    await sp.close()
    [left] = list((tmp_path / "spool").glob("*.spool"))
    assert left.stat().st_size > len(MAGIC)
    fresh = Intake()
    again = await spooler(tmp_path, fresh)
    await eventually(lambda: fresh.stored == ["b"])
    await again.close()


async def test_concurrent_events_share_one_fsync_and_keep_their_order(tmp_path: Path) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake)
    texts = [f"m{i}" for i in range(50)]
    outcomes = await asyncio.gather(*(sp.ingest(envelope(t)) for t in texts))
    assert {o.status for o in outcomes} == {"spooled"} and sp.records == 50
    assert [Envelope.from_json(p).text for p in payloads(sp.files[0])] == texts
    intake.down = False
    await eventually(lambda: intake.stored == texts)
    await sp.close()


async def test_a_restart_replays_what_a_crash_left_including_a_replay_cut_short(
    tmp_path: Path,
) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake)
    for text in ("a", "b", "c"):
        await sp.ingest(envelope(text))
    assert sp._task is not None
    sp._task.cancel()  # the process dies: files neither reset nor removed
    for spool in sp.files:
        os.close(spool.fd)
    intake.down = False
    intake.stored, intake.seen = ["a"], {"ev-a"}  # "a" went in just before the crash
    again = await spooler(tmp_path, intake)
    await eventually(lambda: intake.stored == ["a", "b", "c"])
    await eventually(lambda: not again.pending)
    await again.close()


async def test_a_spooled_event_intake_fails_on_is_dropped_and_the_rest_go_on(
    tmp_path: Path,
) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake)
    for text in ("a", "poison", "c"):
        await sp.ingest(envelope(text))
    intake.bug_on = {"poison"}
    intake.down = False
    with capture_logs() as logs:
        await eventually(lambda: intake.stored == ["a", "c"])
    assert sp.dropped == 1
    assert any(e["event"] == "spooled event failed in intake; dropped" for e in logs)
    await sp.close()


async def test_the_file_is_emptied_only_once_redis_confirms_the_replay_on_disk(
    tmp_path: Path,
) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake)
    for text in ("a", "b"):
        await sp.ingest(envelope(text))
    [path] = list((tmp_path / "spool").glob("*.spool"))
    whole = path.stat().st_size
    intake.on_disk = None  # Redis stores the events but does not confirm them on disk
    with capture_logs() as logs:
        intake.down = False
        await eventually(lambda: intake.stored == ["a", "b"] and intake.durable_calls >= 2)
    assert path.stat().st_size == whole and sp.pending  # the file is kept, retried
    assert any("did not confirm" in e["event"] for e in logs)
    await sp.close()  # shutting down before a confirmation: kept for the next start
    assert path.stat().st_size == whole
    fresh = Intake()  # the next start: replayed again (intake dedups), then confirmed
    fresh.stored, fresh.seen = ["a", "b"], {"ev-a", "ev-b"}
    again = await spooler(tmp_path, fresh)
    await eventually(lambda: not again.pending)
    assert fresh.stored == ["a", "b"] and fresh.durable_calls == 1
    assert path.stat().st_size == len(MAGIC)
    await again.close()
    assert not path.exists()


async def test_an_unconfirmed_durability_empties_the_file_and_says_so_once(tmp_path: Path) -> None:
    intake = Intake()
    intake.on_disk = "unconfirmed"  # e.g. Redis 7.0 with appendfsync everysec
    intake.down = True
    sp = await spooler(tmp_path, intake)
    with capture_logs() as logs:
        for text in ("a", "b"):
            intake.down = True
            await sp.ingest(envelope(text))
            intake.down = False
            await eventually(lambda: not sp.pending)
    assert intake.stored == ["a", "b"] and intake.durable_calls == 2
    weak = [e for e in logs if "without Redis confirming" in e["event"]]
    assert [e["log_level"] for e in weak] == ["warning"]
    await sp.close()


async def test_spool_off_is_the_old_behaviour(tmp_path: Path) -> None:
    intake = Intake()
    intake.down = True
    sp = await spooler(tmp_path, intake, max_bytes=0)
    with pytest.raises(StoreUnavailable):
        await sp.ingest(envelope("a"))
    assert not (tmp_path / "spool").exists()
    await sp.close()
