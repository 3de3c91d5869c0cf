"""Where the daemon's webhook time goes: a cProfile of the path in process (``--profile``), or
the daemon process under load sampled by py-spy (``--py-spy``), its time by component and the
busiest frames. Run through ``bench/lark_ingest.py``."""

from __future__ import annotations

import asyncio
import collections
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from lark_bench import bench_config, drive, payloads

from tests.support.helpers import DaemonProcess


async def profile(events: int) -> None:
    """cProfile of the daemon's webhook path in this process (handler, verify, ingest)."""
    import cProfile
    import pstats

    from gateway.logging import configure_logging
    from tests.support.helpers import InProcessGateway

    configure_logging("warning", "json")
    async with bench_config() as config:
        gw = InProcessGateway(config)
        await gw.start()
        items = payloads(events)
        prof = cProfile.Profile()
        prof.enable()
        await drive(gw.port, items, 16)
        prof.disable()
        await gw.stop()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)


# Where a sample's time is charged: the innermost frame of one of these, by its module path.
# (asyncio's own frames are skipped, so a socket write counts for whoever made it.)
COMPONENTS = [
    ("redis-py", "(redis/"),
    ("pydantic", "(pydantic"),
    ("crypto", "(cryptography/"),
    ("json", "(json/"),
    ("structlog", "(structlog/"),
    ("prometheus", "(prometheus_client/"),
    ("sessions/", "(sessions/"),
    ("adapters/lark/", "(adapters/lark/"),
    ("aiohttp", "(aiohttp/"),
    ("gateway/", "(gateway/"),
]


def charge(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, marker in COMPONENTS:
            if marker in frame:
                # The daemon's entry point sits under every loop callback: only the innermost
                # gateway/ frame that is not the entry point counts as gateway work.
                if name == "gateway/" and ("(gateway/__main__" in frame or "(gateway/cli" in frame):
                    return "event loop (uvloop)"
                return name
    return "other"


async def spy(exe: str, events: int, concurrency: int) -> dict[str, Any]:
    """The daemon under load, sampled by py-spy: its time by component, and the top frames."""
    async with bench_config() as config:
        with tempfile.TemporaryDirectory() as tmp:
            daemon = DaemonProcess(config, Path(tmp), "lark-spy")
            await daemon.start()
            try:
                assert daemon.proc is not None
                await drive(daemon.port, payloads(500), 8)  # warm-up
                raw = Path(tmp) / "samples.txt"
                recorder = await asyncio.create_subprocess_exec(
                    *(exe, "record", "--pid", str(daemon.proc.pid), "--rate", "250"),
                    *("--format", "raw", "--output", str(raw), "--nonblocking"),
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                )
                await asyncio.sleep(1.0)
                load = await drive(daemon.port, payloads(events), concurrency)
                recorder.send_signal(signal.SIGINT)
                _out, err = await asyncio.wait_for(recorder.communicate(), 30)
                try:
                    text = await asyncio.to_thread(raw.read_text)
                except FileNotFoundError:
                    raise SystemExit(f"py-spy recorded nothing: {err.decode()[-500:]}") from None
            finally:
                await daemon.stop()
    return {"concurrency": concurrency, "load": load, **breakdown(text)}


def breakdown(text: str) -> dict[str, Any]:
    """py-spy's raw output (``frame;frame;… count`` lines) as shares by component."""
    shares: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        total += int(count)
        shares[charge(frames)] += int(count)
        leaves[frames[-1]] += int(count)
    total = max(total, 1)
    return {
        "samples": total,
        "share": {k: round(v / total, 3) for k, v in shares.most_common()},
        "top_frames": [[f, round(n / total, 3)] for f, n in leaves.most_common(15)],
    }
