"""Helpers of the worker and long-connection ownership tests (issue 12): a supervised daemon
(``run --workers N``) in its own process group, its workers as the kernel lists them, and the three
long-connection platforms faked side by side with the sockets each holds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.fakes.dingtalk import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.fakes.lark import FakeLark
from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import daemon_env, free_port
from tests.support.lark import lark_integration
from tests.support.spawn import spawn_gateway
from tests.support.waits import eventually
from tests.support.wecom import CORP_ID
from tests.support.wecom import integration as wecom_integration


class Supervised:
    """``python -m gateway run [--workers N]`` as a terminal runs it: the leader of its own
    process group (a Ctrl-C goes to the whole group), its log in a file."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str = "gw") -> None:
        self.port = free_port()
        self.config_path = workdir / f"{name}.yaml"
        self.write_config(config)
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}  # set in the daemon's environment (REDIS_URL is not)

    def write_config(self, config: dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(config))

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        with self.log_path.open("wb") as log:
            self.proc = spawn_gateway(
                *("run", "--config", str(self.config_path), "--port", str(self.port), *args),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=daemon_env(**self.env),
            )
        return self.proc

    async def start(self, *args: str, workers: int = 2, timeout: float = 40) -> list[int]:
        """Spawn and wait until every worker listens; their pids."""
        proc = self.spawn(*args)

        def ready() -> list[int] | None:
            assert proc.poll() is None, self.log_path.read_text()[-3000:]
            if workers > 1 and not [e for e in self.logged("listening") if "workers" in e]:
                return None
            if workers == 1 and not self.logged("listening"):
                return None
            return self.workers() or [proc.pid]

        pids: list[int] = await eventually(ready, timeout=timeout, interval=0.1)
        return pids

    def workers(self) -> list[int]:
        """The supervisor's live children that are workers (the embedded Redis is not)."""
        assert self.proc is not None
        return [pid for pid in children(self.proc.pid) if b"--worker-index" in cmdline(pid)]

    def events(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def logged(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def ctrl_c(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGINT)  # what the terminal does: the whole group

    async def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return await asyncio.to_thread(self.proc.wait, timeout)

    async def healthz(self) -> dict[str, Any]:
        """One request on a new connection (the kernel picks the worker per connection)."""
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
            http.get(f"http://127.0.0.1:{self.port}/healthz") as resp,
        ):
            assert resp.status == 200
            body: dict[str, Any] = await resp.json()
            return body

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await self.wait_exit(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            await self.wait_exit(5)


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- the three long-connection platforms ---------------------------------------------------
@dataclass
class Platforms:
    lark: FakeLark
    dingtalk: FakeDingTalk
    wecom: FakeWeCom

    def integrations(self) -> list[dict[str, Any]]:
        lark = lark_integration(
            self.lark, connectionMode="long_connection", verificationToken=None, encryptKey=None
        )
        dingtalk = {
            "id": "dt",
            "platform": "dingtalk",
            "xpertId": "echo",
            "clientId": CLIENT_ID,
            "clientSecret": CLIENT_SECRET,
            "connectionMode": "stream",
            "apiBase": self.dingtalk.base,
            "summaryWindowSeconds": 0,
        }
        wecom = wecom_integration(self.wecom, "aibot_ws", pingIntervalSeconds=0.5)
        return [lark, dingtalk, wecom]

    def connections(self) -> dict[str, int]:
        """Live connections each platform holds for its bot."""
        return {
            "lark": len([ws for ws in self.lark.sockets if not ws.closed]),
            "dingtalk": len(self.dingtalk.gateway.live()),
            "wecom": len(self.wecom.ws.subscribed),
        }

    def opened(self) -> dict[str, int]:
        """Connections each platform has accepted so far."""
        return {
            "lark": self.lark.endpoint_calls,
            "dingtalk": self.dingtalk.stream.connects,
            "wecom": self.wecom.subscribes,
        }


@contextlib.asynccontextmanager
async def platforms() -> AsyncIterator[Platforms]:
    fakes = Platforms(FakeLark(), FakeDingTalk(), FakeWeCom(corp_id=CORP_ID))
    for fake in (fakes.lark, fakes.dingtalk, fakes.wecom):
        await fake.start()
    try:
        yield fakes
    finally:
        for fake in (fakes.lark, fakes.dingtalk, fakes.wecom):
            await fake.stop()


ONE_EACH = {"lark": 1, "dingtalk": 1, "wecom": 1}
