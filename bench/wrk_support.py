"""wrk, the C load generator, for the Lark benches: installing it, the pre-built payload file
``lark_wrk.lua`` cycles through, one run's figures with the CPU each party used, and pinning
processes to cores.

A run's figures come from the lua script's ``done()`` (one JSON line: requests, errors, latency
percentiles, how often the payload file was started again). CPU comes from /proc (user + system
time of the measured server's processes), Redis' ``INFO cpu`` and wrk's rusage; ``other_cores``
is what the rest of the machine kept busy meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chaos_redis import redis_cpu_seconds  # noqa: E402
from lark_bench import sealed_event  # noqa: E402
from procstat import cpu_seconds, machine_busy_seconds, pin_to  # noqa: E402

WRK_SCRIPT = Path(__file__).with_name("lark_wrk.lua")


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def ensure_wrk() -> str | None:
    """wrk's path; installed with apt-get when missing and we are root (as ``dev.sh`` installs
    chromium for the browser test). None when it cannot be had."""
    found = shutil.which("wrk")
    if found or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    log("installing wrk (apt-get)…")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "wrk"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=False)
    return shutil.which("wrk")


# --- payloads --------------------------------------------------------------------------------
def write_payloads(
    path: Path, n: int, receive: Callable[[dict[str, Any]], None] | None = None
) -> None:
    """``n`` events, each with its own message id, sealed and signed as Lark sends them (now:
    the daemon refuses timestamps outside its replay window, so write them just before use);
    ``receive`` (a fake Lark's) is told of each, as Lark knows the messages it delivers."""
    with path.open("w") as out:
        for i in range(n):
            body, headers = sealed_event(i, receive)
            line = "\t".join(
                (
                    headers["X-Lark-Request-Timestamp"],
                    headers["X-Lark-Request-Nonce"],
                    headers["X-Lark-Signature"],
                    body.decode(),
                )
            )
            out.write(line + "\n")


# --- one run ---------------------------------------------------------------------------------
async def run_wrk(
    url: str,
    payloads: Path,
    *,
    duration: float,
    connections: int,
    pids: list[int],
    redis_url: str | None,
    cores: frozenset[int] | None = None,
) -> dict[str, Any]:
    """wrk (one thread) against ``url`` for ``duration`` s; ``pids`` are the server's processes.

    ``cpu_ms_per_event`` is their CPU over the run divided by the requests answered 2xx.
    """
    exe = shutil.which("wrk") or "wrk"
    command = [
        *(exe, "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency"),
        *("-s", str(WRK_SCRIPT), url, "--", str(payloads), "1"),
    ]
    children = resource.RUSAGE_CHILDREN  # wrk is the only child reaped meanwhile

    async def redis_cpu() -> float:
        return await redis_cpu_seconds(redis_url) if redis_url else 0.0

    before = (cpu_seconds(pids), await redis_cpu(), resource.getrusage(children))
    busy = machine_busy_seconds()
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, preexec_fn=pin_to(cores)
    )
    busy = machine_busy_seconds() - busy
    after = (cpu_seconds(pids), await redis_cpu(), resource.getrusage(children))
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed: {done.stderr or done.stdout}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    answered = result["requests"] - result["non_2xx"]
    seconds = result["duration_us"] / 1e6
    per_event = max(answered, 1)
    server_cpu, redis_used = after[0] - before[0], after[1] - before[1]
    wrk_cpu = (after[2].ru_utime + after[2].ru_stime) - (before[2].ru_utime + before[2].ru_stime)
    return {
        "events_s": round(answered / seconds, 1),
        "cpu_ms_per_event": round(server_cpu * 1000 / per_event, 4),
        "server_cores": round(server_cpu / seconds, 2),
        "events_per_core_s": round(answered / max(server_cpu, 1e-9), 1),
        "redis_cpu_ms_per_event": round(redis_used * 1000 / per_event, 4),
        "wrk_cpu_ms_per_event": round(wrk_cpu * 1000 / per_event, 4),
        # Cores kept busy by anything else meanwhile (other processes on the machine): a figure
        # taken while this is well above 0 measures the neighbours as much as the server.
        "other_cores": round(max(0.0, busy - server_cpu - redis_used - wrk_cpu) / seconds, 2),
        **{k: v for k, v in result.items() if k not in ("requests", "duration_us")},
        "requests": result["requests"],
    }
