"""One spool file: an append-only, fsync'd log of envelopes that intake could not store in Redis.

Layout: the 8-byte magic ``XGWSPL01``, then records of a 4-byte big-endian payload length, the
payload's 4-byte CRC-32, and the payload (an envelope's JSON). A record is written and fsync'd
before the platform is acked, so everything acked is on disk.

A crash can leave the last record torn (a header or payload cut short, or zero-filled by the file
system): it was never acked, so opening the file cuts it off with a warning. An invalid record
that is *followed* by more data is damage, not a torn write: a whole record after it (a length
that overshoots the end of the file is no proof of a torn write when whole records follow), or
anything but zeros after a record that ends inside the file. The bytes from there on are copied
to ``<file>.damaged-<ms>`` (fsync'd) for inspection and only then cut off, with an error.

Creating, renaming and removing a file fsyncs the directory too, so the change survives a crash
of the host (a file's own fsync does not make its directory entry durable).

The file is held under an exclusive ``flock`` for as long as it is open, so two processes sharing
a data directory never write the same file. All methods block (file I/O): call them in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import struct
import time
import zlib
from pathlib import Path

import structlog

from gateway.errors import GatewayError

log = structlog.get_logger("gateway.intake.spool")

MAGIC = b"XGWSPL01"
HEADER = struct.Struct(">II")  # payload length, CRC-32 of the payload
MAX_RECORD = 16 * 1024 * 1024  # no envelope comes near this; a larger length is damage
READ_CHUNK = 1024 * 1024
MAX_SLOTS = 256
_SLOT = re.compile(r"^(?P<store>[0-9a-f]{12})-(?P<n>\d{1,4})\.spool$")


class SpoolDamaged(GatewayError):
    """The file is not a spool file (its magic is wrong)."""


def frame(payload: bytes) -> bytes:
    """One record: header plus payload."""
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


class SpoolFile:
    """An open, locked spool file; ``size`` is the end of its last whole record."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.size = len(MAGIC)
        self.records = 0
        # How far records went into intake (in this process; a restart replays them all again).
        self.replayed = len(MAGIC)
        self.replayed_records = 0

    @property
    def record_bytes(self) -> int:
        return self.size - len(MAGIC)

    # --- open and recover ----------------------------------------------------------------
    @classmethod
    def open(cls, path: Path) -> SpoolFile | None:
        """Open (creating it) and lock ``path``; None while another process holds it."""
        for _ in range(5):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            # The previous holder may have unlinked the file between our open and our lock: a
            # lock on a file no longer at ``path`` protects nothing, so open the path again.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                if os.fstat(fd).st_size == 0:
                    fsync_dir(path.parent)  # created (or its creation was torn): the entry too
                spool = cls(path, fd)
                try:
                    spool._recover()
                except BaseException:
                    os.close(fd)
                    raise
                return spool
            os.close(fd)
        return None

    def _recover(self) -> None:
        size = os.fstat(self.fd).st_size
        head = os.pread(self.fd, len(MAGIC), 0)
        if size < len(MAGIC) and MAGIC.startswith(head):  # new, or its creation was torn
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, MAGIC, 0)
            os.fsync(self.fd)
            return
        if head != MAGIC:
            raise SpoolDamaged(f"{self.path} is not a spool file")
        offset, records = len(MAGIC), 0
        damaged = False
        while offset < size:
            end = self._record_end(offset, size)
            if end is None:
                damaged = not self._torn_at(offset, size)
                break
            offset, records = end, records + 1
        self.size = offset
        self.records = records
        if offset < size:
            self._cut(offset, size, damaged)

    def _record_end(self, offset: int, size: int) -> int | None:
        """The end of the valid record at ``offset``, or None."""
        head = os.pread(self.fd, HEADER.size, offset)
        if len(head) < HEADER.size:
            return None
        length, crc = HEADER.unpack(head)
        end = offset + HEADER.size + length
        if not 0 < length <= MAX_RECORD or end > size:
            return None
        payload = os.pread(self.fd, length, offset + HEADER.size)
        return end if zlib.crc32(payload) == crc else None

    def _torn_at(self, offset: int, size: int) -> bool:
        """An invalid record at ``offset`` is a torn last write when it reaches the end of the
        file as its header declares it, or when all that follows is zeros (a size extended by
        the file system before the data landed)."""
        head = os.pread(self.fd, HEADER.size, offset)
        if len(head) == HEADER.size:
            length, _ = HEADER.unpack(head)
            if 0 < length <= MAX_RECORD and offset + HEADER.size + length >= size:
                # A corrupt length in the middle of the file overshoots the end too: torn only
                # when no whole record follows.
                return not self._record_after(offset, size)
        else:
            return True
        tail = os.pread(self.fd, min(size - offset, READ_CHUNK), offset)
        return size - offset <= READ_CHUNK and not tail.strip(b"\0")

    def _record_after(self, offset: int, size: int) -> bool:
        """Whether a whole record (its length within the file, its CRC right) starts anywhere
        after ``offset``. Only asked when the record at ``offset`` overshoots the end, so what
        follows is less than ``MAX_RECORD``; a length below 16 MiB starts with a zero byte, which
        the JSON of a payload never has, so only the zero bytes are candidates."""
        tail = os.pread(self.fd, size - offset, offset)
        pos = tail.find(b"\0", 1)
        while 0 < pos <= len(tail) - HEADER.size - 1:
            length, crc = HEADER.unpack_from(tail, pos)
            end = pos + HEADER.size + length
            if 0 < length and end <= len(tail):
                if zlib.crc32(tail[pos + HEADER.size : end]) == crc:
                    return True
            pos = tail.find(b"\0", pos + 1)
        return False

    def _cut(self, offset: int, size: int, damaged: bool) -> None:
        if damaged:
            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time() * 1000)}")
            with aside.open("wb") as out:
                pos = offset
                while pos < size:
                    chunk = os.pread(self.fd, min(READ_CHUNK, size - pos), pos)
                    if not chunk:
                        break
                    out.write(chunk)
                    pos += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            fsync_dir(self.path.parent)  # the copy is on disk before the file is cut
            log.error(
                "spool damaged; the rest of the file is set aside",
                path=str(self.path),
                kept_records=self.records,
                set_aside_bytes=size - offset,
                aside=str(aside),
            )
        else:
            log.warning(
                "spool ended in a torn record (a write cut short by a crash, never acked); dropped",
                path=str(self.path),
                kept_records=self.records,
                dropped_bytes=size - offset,
            )
        os.ftruncate(self.fd, offset)
        os.fsync(self.fd)

    # --- write, read, reset --------------------------------------------------------------
    def write(self, data: bytes, records: int) -> None:
        """Append whole records and fsync; on failure the file is cut back to its last end."""
        try:
            view = memoryview(data)
            pos = self.size
            while view:
                written = os.pwrite(self.fd, view, pos)
                view, pos = view[written:], pos + written
            os.fsync(self.fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.size)
            raise
        self.size += len(data)
        self.records += records

    def read(self, offset: int, max_bytes: int = READ_CHUNK) -> list[tuple[int, bytes]]:
        """Whole records from ``offset``, about ``max_bytes`` of them (at least one if any):
        ``(end offset, payload)`` each."""
        out: list[tuple[int, bytes]] = []
        budget = max_bytes
        while offset < self.size and budget > 0:
            length, crc = HEADER.unpack(os.pread(self.fd, HEADER.size, offset))
            payload = os.pread(self.fd, length, offset + HEADER.size)
            if len(payload) != length or zlib.crc32(payload) != crc:
                raise SpoolDamaged(f"{self.path}: the record at {offset} changed on disk")
            offset += HEADER.size + length
            budget -= HEADER.size + length
            out.append((offset, payload))
        return out

    def reset(self) -> None:
        """Every record went into intake: empty the file (kept, and still locked)."""
        os.ftruncate(self.fd, len(MAGIC))
        os.fsync(self.fd)
        self.size = self.replayed = len(MAGIC)
        self.records = self.replayed_records = 0

    def close(self, *, unlink: bool = False) -> None:
        """Release the file; ``unlink`` removes it first (only when it holds nothing)."""
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
                fsync_dir(self.path.parent)
        os.close(self.fd)


def fsync_dir(directory: Path) -> None:
    """Make the directory's entries (a file created, renamed or removed) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the spool directory ---------------------------------------------------------------------
def store_identity(redis_url: str | None, key_prefix: str) -> str:
    """The Redis and key prefix a spool belongs to (a hash: the URL may hold a password)."""
    return hashlib.sha256(f"{redis_url or 'embedded'}|{key_prefix}".encode()).hexdigest()[:12]


def open_slots(directory: Path, store: str) -> tuple[SpoolFile, list[SpoolFile]]:
    """Lock this replica's slot ``<store>-<n>.spool`` (the first free one) and every other free
    slot of ``store`` that still holds records (replicas that died): (own, adopted)."""
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)
    slots: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        match = _SLOT.match(path.name)
        if match is None:
            continue
        if match["store"] != store:
            with contextlib.suppress(OSError):
                if path.stat().st_size > len(MAGIC):
                    log.warning("spool of another Redis or keyPrefix left alone", path=str(path))
                else:
                    _sweep(path)  # empty and free: left by a replica that was killed
            continue
        slots.append((int(match["n"]), path))
    own: SpoolFile | None = None
    adopted: list[SpoolFile] = []
    for _n, path in sorted(slots):
        spool = _open(path)
        if spool is None:
            continue  # a live replica's
        if own is None:
            own = spool
        elif spool.records:
            adopted.append(spool)
        else:
            spool.close(unlink=True)
    taken = {path for _n, path in slots}
    for n in range(MAX_SLOTS):
        if own is not None:
            return own, adopted
        path = directory / f"{store}-{n}.spool"
        if path not in taken:
            own = _open(path)
    raise OSError(f"no free spool slot in {directory}")


def _sweep(path: Path) -> None:
    """Remove an empty spool file that no process holds."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_size <= len(MAGIC) and os.stat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()
            fsync_dir(path.parent)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


def _open(path: Path) -> SpoolFile | None:
    try:
        return SpoolFile.open(path)
    except SpoolDamaged:
        aside = path.with_name(path.name + ".damaged")
        path.rename(aside)
        fsync_dir(path.parent)
        log.error("not a spool file; set aside", path=str(path), aside=str(aside))
        return None
