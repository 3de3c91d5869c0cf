"""Lark webhook ingest on every core: the daemon with 1 and with N worker processes, in one run.

Signed, encrypted ``im.message.receive_v1`` webhooks (each request its own event, so each one is
verified, decrypted, deduplicated and stored) are sent by wrk (C, one thread, keep-alive
connections; ``lark_wrk.lua`` reads the pre-built payloads) to ``python -m gateway run
--workers 1`` (one process, no supervisor) and ``--workers N`` (a supervisor and N workers on one
port). Rounds alternate between the two. The daemon's CPU is read from /proc (user + system time
of the supervisor and its workers) and divided by the events it answered; Redis' CPU (``INFO
cpu``, the whole server) and wrk's (rusage) are shown alongside, since they share the cores.
Turns are held back (a long summary window), so the figure is intake alone.

Prints ONE JSON line: events/s per configuration (median round, and every round), the ratio N/1,
CPU ms per event, p50/p99 latency, and how many cores other processes kept busy meanwhile
(``other_cores``: on a shared machine the ratio means little unless that is near 0). Needs wrk
(``apt-get install -y wrk``).

Usage: python bench/lark_ingest.py --workers 2 [--duration 10] [--connections 64] [--rounds 3]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lark_bench import REDIS_URL, bench_config, log  # noqa: E402
from procstat import child_pids, pin_to  # noqa: E402
from wrk_support import ensure_wrk, run_wrk, write_payloads  # noqa: E402

from tests.support.helpers import free_port  # noqa: E402
from tests.support.lark import INTEGRATION  # noqa: E402


class Daemon:
    """``python -m gateway run --workers N`` on a free port."""

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        workers: int,
        cores: frozenset[int] | None = None,
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.port = free_port()
        self.config_path = workdir / f"w{workers}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"w{workers}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/lark/webhook/{INTEGRATION}"

    def pids(self) -> list[int]:
        assert self.proc is not None
        return [self.proc.pid, *child_pids(self.proc.pid)]

    def spawn(self) -> None:
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "gateway", "run", "--config", str(self.config_path)),
                    *("--port", str(self.port), "--workers", str(self.workers)),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=pin_to(self.cores),
            )

    async def start(self) -> None:
        self.spawn()
        assert self.proc is not None
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < self.workers:  # every worker answers (a new connection each time)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with (
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as h,
                    h.get(f"http://127.0.0.1:{self.port}/healthz") as resp,
                ):
                    seen.add((await resp.json())["pid"])
                    continue
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(self.proc.wait, 60)


async def wrk(daemon: Daemon, payloads: Path, duration: float, connections: int) -> dict[str, Any]:
    """One wrk run against ``daemon``, with the CPU each party used meanwhile."""
    res = await run_wrk(
        daemon.url,
        payloads,
        duration=duration,
        connections=connections,
        pids=daemon.pids(),
        redis_url=REDIS_URL,
    )
    res["daemon_cores"] = res.pop("server_cores")
    return {k: v for k, v in res.items() if k not in ("requests", "p90_ms", "p999_ms")}


async def measure(
    config: dict[str, Any], counts: list[int], duration: float, connections: int, rounds: int
) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        daemons = {n: Daemon(config, workdir, n) for n in counts}
        try:
            for daemon in daemons.values():
                await daemon.start()
            warm = workdir / "warm.tsv"
            await asyncio.to_thread(write_payloads, warm, 3000)
            rates = {}
            for n, daemon in daemons.items():  # warm-up, and a first guess of the rate
                rates[n] = (await wrk(daemon, warm, 3, connections))["events_s"]
            log(f"warm-up events/s: {rates}")
            payloads = workdir / "events.tsv"
            for r in range(rounds):
                order = counts if r % 2 == 0 else list(reversed(counts))
                for n in order:
                    need = int(max(rates[n], 1000) * duration * 1.5)
                    await asyncio.to_thread(write_payloads, payloads, need)  # fresh timestamps
                    res = await wrk(daemons[n], payloads, duration, connections)
                    rates[n] = max(rates[n], res["events_s"])
                    runs[n].append(res)
                    log(f"round {r + 1}, {n} worker(s): {res}")
        finally:
            for daemon in daemons.values():
                await daemon.stop()
    configs: dict[str, Any] = {}
    for n, rs in runs.items():
        median = sorted(rs, key=lambda x: x["events_s"])[len(rs) // 2]
        configs[str(n)] = {
            **median,
            "rounds_events_s": [x["events_s"] for x in rs],
            "rounds_cpu_ms_per_event": [x["cpu_ms_per_event"] for x in rs],
            "rounds_other_cores": [x["other_cores"] for x in rs],
        }
    first, last = (
        statistics.median(x["events_s"] for x in runs[n]) for n in (counts[0], counts[-1])
    )
    return {
        "duration_s": duration,
        "connections": connections,
        "rounds": rounds,
        "cores": len(os.sched_getaffinity(0)),
        "workers": configs,
        "ratio": round(last / first, 2),
        # Throughput per core the daemon got, N workers over 1: how well the workers scale with
        # the cores they get, whatever the neighbours took.
        "per_core_ratio": round(
            statistics.median(x["events_per_core_s"] for x in runs[counts[-1]])
            / statistics.median(x["events_per_core_s"] for x in runs[counts[0]]),
            2,
        ),
        "rounds_ratio": [
            round(b["events_s"] / a["events_s"], 2)
            for a, b in zip(runs[counts[0]], runs[counts[-1]], strict=True)
        ],
    }


async def run(workers: int, duration: float, connections: int, rounds: int) -> dict[str, Any]:
    if ensure_wrk() is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    async with bench_config() as config:
        return await measure(config, [1, workers], duration, connections, rounds)


def main(workers: int, duration: float, connections: int, rounds: int) -> None:
    if workers < 2:
        raise SystemExit("--workers: 2 or more (compared with 1)")
    print(json.dumps(asyncio.run(run(workers, duration, connections, rounds))))
