"""A Redis of the test's own, which the test stops and starts (never the shared one), and
helpers to read what a spool holds."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from tests.support.redis_server import RedisServer


class OwnRedis:
    """``redis-server`` on a free port with its data (AOF, fsync always) under ``workdir``, so a
    restart keeps what was stored, as a production Redis does (a ``RedisServer``, started and
    stopped without blocking the event loop)."""

    def __init__(
        self, workdir: Path, *, executable: str | None = None, appendfsync: str = "always"
    ) -> None:
        self.server = RedisServer(
            workdir / "redis", appendonly=True, appendfsync=appendfsync, executable=executable
        )

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def dir(self) -> Path:
        return self.server.dir

    @property
    def executable(self) -> str:
        return self.server.executable

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.server.proc

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def running(self) -> bool:
        return self.server.running

    async def start(self, timeout: float = 10.0) -> None:
        self.server.launch()
        await asyncio.to_thread(self.server.wait_ready, timeout)

    async def stop(self) -> None:
        await asyncio.to_thread(self.server.stop)
        self.server.proc = None


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
