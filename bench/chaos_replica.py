"""The chaos run's replicas: ``python -m gateway run`` processes on fixed ports, configured for
the run (console integration, echo expert, a short lease), killed and restarted on the same port,
with their CPU from /proc and the events of their JSON logs that tell what the faults did."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench.chaos_redis import RedisLauncher

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION = "console"


def now() -> float:
    return time.monotonic()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- replicas ----------------------------------------------------------------------------------
def replica_config(opts: argparse.Namespace, redis: RedisLauncher, prefix: str, data: Path) -> Any:
    redis_cfg: dict[str, Any] = {"url": redis.url, "keyPrefix": prefix, "connectTimeoutSeconds": 20}
    if redis.mode != "standalone":
        redis_cfg["mode"] = redis.mode
    return {
        "server": {"host": "127.0.0.1"},
        "redis": redis_cfg,
        "dataDir": str(data),
        "logging": {"level": "info", "format": "json"},
        "runtime": {
            "leaseSeconds": opts.lease_seconds,
            "pollIntervalMs": 100,
            "shutdownGraceSeconds": 2,
        },
        "experts": [
            {
                "id": "echo",
                "kind": "echo",
                "stepDelayMs": opts.step_ms,
                # --step-ms 0: no delays at all, the whole answer in one piece (bench/pipeline.py)
                "charDelayMs": 5 if opts.step_ms else 0,
                "chunkChars": 8 if opts.step_ms else 10_000,
            }
        ],
        "integrations": [
            {
                "id": INTEGRATION,
                "platform": "console",
                "xpertId": "echo",
                "summaryWindowSeconds": opts.window,
                "maxWindowSeconds": max(5.0, opts.window),
                "updateIntervalMs": 200,
            }
        ],
    }


class Replica:
    """One ``python -m gateway run`` process on a fixed port; restarted on the same port."""

    def __init__(self, name: str, config: Any, workdir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
        self.log_path = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "gateway", "run", "--config", str(self.config_path)]
        with self.log_path.open("ab") as out:
            return subprocess.Popen(
                [*command, "--port", str(self.port)],
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    async def start(self, http: aiohttp.ClientSession, limit_s: float = 45) -> None:
        if self.proc is not None:  # reap the one killed before
            await asyncio.to_thread(self.proc.wait, 10)
        self.proc = proc = self.spawn()
        self.starts += 1
        deadline = now() + limit_s
        while now() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with http.get(
                    f"{self.base}/healthz", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} not healthy within {limit_s:g} s: {self.tail()}")

    def cpu_s(self) -> float:
        """User + system CPU of the current process (Linux /proc); 0 when it is gone."""
        if self.proc is None:
            return 0.0
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    async def active_runs(self, http: aiohttp.ClientSession) -> int:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
            async with http.get(
                f"{self.base}/readyz", timeout=aiohttp.ClientTimeout(total=2)
            ) as resp:
                return int((await resp.json()).get("activeRuns", 0))
        return 0

    async def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 20)
            except Exception:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 5)
        return int(self.proc.returncode)

    def log_events(self) -> Counter[str]:
        """Warnings, errors and the few info events that tell what the faults did."""
        wanted = {"resuming a turn left by another replica", "turn handed back"}
        counts: Counter[str] = Counter()
        with contextlib.suppress(OSError):
            for line in self.log_path.read_text(errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(entry, dict):
                    continue
                event, level = str(entry.get("event", "?")), str(entry.get("level", "?"))
                if level in ("warning", "error", "critical") or event in wanted:
                    counts[f"{level}: {event}"[:120]] += 1
        return counts
