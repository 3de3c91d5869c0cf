"""Instructions the daemon executes per Lark webhook event and per echo turn (valgrind callgrind).

CPU seconds on a shared VM move by ±30 % from one minute to the next; the instructions a process
executes for the same work barely move (±3–5 % here, from how replies batch), whatever else the
machine does. So this bench is the A/B measure of a change: run it in two trees (``cd`` into a
worktree of the older commit and run its copy of the daemon with the same command) and compare.
It does not replace the timed benches; a figure in instructions is not a figure in seconds.

The daemon (``python -m gateway run``, the tree in the current directory) runs under callgrind
with instrumentation off; once it is up and warmed, instrumentation goes on for the measured work
only (``callgrind_control``), and the instructions counted are divided by the events or turns:

- ``ingest``: N signed, encrypted Lark webhooks (``lark_bench`` events: a long summary window
  holds turns back, so it is intake alone) from 8 concurrent connections of this process;
- ``turn``: N console messages over 8 conversations, each conversation's next message sent when
  its previous turn's final card arrives on the console's event stream (echo, zero delays,
  window 0: the configuration of ``pipeline.py --zero-delays``).

Work by the clock is kept out of the count. The daemon works while no event comes (the flusher
reads every due shard each ``pollIntervalMs``, the heartbeat, the scheduler), and under
valgrind it runs some 50× slower, so the load's seconds would hold far more of that work per
event than real seconds do - up to half of the count with the default 200 ms poll (rounds
before the sixth counted it so). The daemon therefore runs with ``pollIntervalMs: 5000`` (the
most it takes: a few looks in a run; turns are claimed by their messages' own calls, not by
the poll), and before the load instrumentation counts ``IDLE_S`` seconds with nothing sent:
the headline figures (``instructions_per_event`` / ``instructions_per_turn``) are the load's
instructions less that rate times the load's seconds, per event or turn; ``..._gross`` is the
load's count as it is, ``idle_per_s`` the rate taken off.

User-space instructions only: the kernel's part of a socket write is not in them.
The JSON also splits them by library (``callgrind_annotate``): "python" is the interpreter
itself (the eval loop, objects, calls, frames), the rest are the C parts an event or a turn runs
through (OpenSSL, binascii, pydantic_core, orjson, hiredis, uvloop, libc), per event or turn.

The same ``ingest`` load can be sent to ``lark_bench``'s comparison servers (``--server bare``:
an aiohttp handler answering ``{}``; ``--server lark_oapi``: lark-oapi's dispatcher in aiohttp,
storing nothing), for ratios no machine's speed moves; and to ``--server floor``, the daemon with
its Lark work free (``lark_floor.py``: what everything but verifying, decrypting and parsing
costs).

Usage: python bench/instructions.py ingest [--events 1000] [--server daemon|bare|lark_oapi|floor]
       python bench/instructions.py ingest --guard   # daemon and lark-oapi, and the guard
       python bench/instructions.py turn [--turns 160]
Prints ONE JSON line. Uses $REDIS_URL (default redis://127.0.0.1:6379/0) under a fresh key
prefix, deleted on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guards import instruction_guards
from lark_bench import DAEMONS, REDIS_URL, bench_config, daemon_argv, delete_keys, drive, payloads
from pipeline import free_port, write_config

TREE = Path.cwd()
CONVERSATIONS = 8
WARM = 200  # events sent before the count starts
IDLE_S = 8.0  # seconds counted with nothing sent, before the load
POLL_MS = {"pollIntervalMs": 5000}  # runtime: the flusher's look at every shard, the least often


@contextlib.asynccontextmanager
async def under_callgrind(
    tmp: Path, config: dict[str, Any] | None = None, server: str = "daemon", events: int = 0
) -> AsyncIterator[tuple[int, str]]:
    """``server`` under callgrind, instrumentation off: the daemon with ``config`` (``floor``:
    with its Lark work free, ``events`` Envelopes prepared), or ``lark_bench``'s ``bare`` /
    ``lark_oapi`` handler; yields its pid and base URL."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found (apt-get install valgrind)")
    port = free_port()
    if server in DAEMONS:
        path = tmp / "config.json"
        path.write_text(json.dumps(config))
        argv = daemon_argv(server, path)
    else:
        argv = [sys.executable, str(Path(__file__).with_name("lark_ingest.py")), "--serve", server]
    out = tmp / "callgrind.out"
    proc = await asyncio.create_subprocess_exec(
        *("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"),
        *argv,
        *("--port", str(port)),
        cwd=TREE,
        env={**os.environ, "XGW_FLOOR_EVENTS": str(events or 1)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # imports under valgrind take a while
        async with aiohttp.ClientSession() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(base + "/healthz") as resp:
                        # the daemon once healthy; a comparison handler once it answers (404)
                        if resp.status == 200 or server not in DAEMONS:
                            break
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{server} did not start under valgrind")
                await asyncio.sleep(1)
        yield proc.pid, base
    finally:
        proc.terminate()
        async with asyncio.timeout(120):
            await proc.wait()


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def dumps(tmp: Path) -> list[tuple[Path, int]]:
    """The dumps ``callgrind_control --dump`` wrote, in order, each with its instructions."""
    found = []
    for dump in tmp.glob("callgrind.out.*"):
        number = dump.name.rsplit(".", 1)[1]
        if not number.isdigit():
            continue
        total = 0
        for line in dump.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
        found.append((int(number), dump, total))
    return [(dump, total) for _, dump, total in sorted(found)]


@contextlib.asynccontextmanager
async def counted(pid: int) -> AsyncIterator[dict[str, float]]:
    """Instrumentation on: ``IDLE_S`` seconds with nothing sent (one dump), then the body's
    work (the next dump); yields where the load's seconds go."""
    control(pid, "--instr=on")
    await asyncio.sleep(IDLE_S)
    control(pid, "--dump")
    timing: dict[str, float] = {}
    started = time.monotonic()
    yield timing
    timing["load_s"] = time.monotonic() - started
    control(pid, "--dump")
    control(pid, "--instr=off")


def net_of_idle(tmp: Path, load_s: float, units: int) -> dict[str, Any]:
    """The load's instructions per unit, net of the idle rate, and the figures behind it."""
    (_, idle), (_, load) = dumps(tmp)[:2]
    rate = idle / IDLE_S
    return {
        "net": round((load - rate * load_s) / units),
        "gross": round(load / units),
        "idle_per_s": round(rate),
        "load_s": round(load_s, 1),
        "total": load,
    }


_ANNOTATED = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)(?:\s+\[([^\]]+)\])?\s*$")


def part_of(where: str, obj: str | None) -> str:
    """The library an annotated function belongs to: the interpreter, a stdlib C module, a
    package's extension (by its package), or a system library."""
    if obj is None:  # inlined or static code: named by its source file
        stem = where.split(":", 1)[0]
        if "/Modules/" not in stem:
            return "python"
        return Path(stem).stem.lstrip("_").removesuffix("module").removesuffix("_lib")
    name = Path(obj).name
    if name == "???":
        return "unknown"
    if name.startswith("libpython"):
        return "python"
    if "/lib-dynload/" in obj:
        return name.split(".", 1)[0].lstrip("_")
    if "/site-packages/" in obj:
        return obj.split("/site-packages/", 1)[1].split("/", 1)[0]
    return name.split(".so", 1)[0]


def by_part(dump: Path | None, units: int) -> dict[str, int]:
    """Instructions per unit by library (``callgrind_annotate``), the largest first; the
    interpreter is "python". Empty where the tool is missing."""
    if dump is None or shutil.which("callgrind_annotate") is None:
        return {}
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dump)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    parts: dict[str, int] = {}
    for line in out.splitlines():
        m = _ANNOTATED.match(line)
        if m is None or "PROGRAM TOTALS" in line or "file:function" in line:
            continue
        part = part_of(m.group(2), m.group(3))
        parts[part] = parts.get(part, 0) + int(m.group(1).replace(",", ""))
    ranked = sorted(parts.items(), key=lambda item: -item[1])
    return {part: round(n / units) for part, n in ranked if n / units >= 500}


async def ingest(events: int, server: str) -> dict[str, Any]:
    async with bench_config() as config:
        config["runtime"] = {**config.get("runtime", {}), **POLL_MS}
        with tempfile.TemporaryDirectory() as tmp:
            async with under_callgrind(Path(tmp), config, server, WARM + events) as (pid, base):
                port = int(base.rsplit(":", 1)[1])
                await drive(port, payloads(WARM), CONVERSATIONS)
                items = payloads(events)
                async with counted(pid) as timing:
                    load = await drive(port, items, CONVERSATIONS)
            figures = net_of_idle(Path(tmp), timing["load_s"], events)
            parts = by_part(dumps(Path(tmp))[1][0], events)
    return {"mode": "ingest", "server": server, "events": events, "non_2xx": load["non_2xx"],
            "total": figures["total"],
            "instructions_per_event": figures["net"],
            "instructions_per_event_gross": figures["gross"],
            "idle_per_s": figures["idle_per_s"], "load_s": figures["load_s"],
            "per_event_by_library": parts}  # fmt: skip


class FinalCards:
    """The console's event stream: how many final cards each chat has had."""

    def __init__(self) -> None:
        self.done: dict[str, int] = {}
        self.changed = asyncio.Event()

    async def read(self, resp: aiohttp.ClientResponse) -> None:
        event, data = "message", list[str]()
        async for raw in resp.content:
            line = raw.decode().rstrip("\r\n")
            if line.startswith(("event:", "data:")):
                name, _, value = line.partition(":")
                if name == "event":
                    event = value.strip()
                else:
                    data.append(value.removeprefix(" "))
            elif not line:
                if data and event == "record":
                    self.record(json.loads("\n".join(data)))
                event, data = "message", []

    def record(self, change: dict[str, Any]) -> None:
        record = change.get("record") or {}
        status = (record.get("card") or {}).get("status")
        if record.get("type") == "card" and status in ("done", "ended", "failed"):
            chat = str(change.get("chatId"))
            self.done[chat] = self.done.get(chat, 0) + 1
            self.changed.set()

    async def wait(self, chat: str, count: int) -> None:
        async with asyncio.timeout(120):
            while self.done.get(chat, 0) < count:
                self.changed.clear()
                await self.changed.wait()


async def turns(count: int) -> dict[str, Any]:
    per_chat = max(1, count // CONVERSATIONS)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.json"
        write_config(
            path, redis_url=REDIS_URL, prefix=prefix, port=0, data_dir=Path(tmp), runtime=POLL_MS
        )
        config = json.loads(path.read_text())
        integration = config["integrations"][0]["id"]
        try:
            async with under_callgrind(Path(tmp), config) as (pid, base):
                async with aiohttp.ClientSession() as http:
                    params = {"integrationId": integration}
                    stream = await http.get(base + "/console/api/events", params=params)
                    cards = FinalCards()
                    reader = asyncio.create_task(cards.read(stream))

                    message = {"integrationId": integration, "chatType": "p2p", "senderId": "a"}

                    async def conversation(chat: str, n: int) -> None:
                        for i in range(n):
                            body = {**message, "chatId": chat, "text": f"hi {i}"}
                            async with http.post(base + "/console/api/messages", json=body) as r:
                                if r.status != 202:
                                    raise SystemExit(f"console POST: {r.status}")
                            await cards.wait(chat, i + 1)

                    chats = range(CONVERSATIONS)
                    await asyncio.gather(*(conversation(f"dm-warm{c}", 5) for c in chats))
                    async with counted(pid) as timing:
                        await asyncio.gather(*(conversation(f"dm-m{c}", per_chat) for c in chats))
                    reader.cancel()
                    stream.close()
            done = per_chat * CONVERSATIONS
            figures = net_of_idle(Path(tmp), timing["load_s"], done)
            parts = by_part(dumps(Path(tmp))[1][0], done)
        finally:
            await delete_keys(REDIS_URL, f"{prefix}:*")
    return {"mode": "turn", "turns": done, "total": figures["total"],
            "instructions_per_turn": figures["net"],
            "instructions_per_turn_gross": figures["gross"],
            "idle_per_s": figures["idle_per_s"], "load_s": figures["load_s"],
            "per_turn_by_library": parts}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("ingest", "turn"))
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=160)
    servers = ("daemon", "bare", "lark_oapi", "floor")
    parser.add_argument("--server", choices=servers, default="daemon")
    parser.add_argument(
        "--guard",
        action="store_true",
        help="ingest: measure the daemon and lark-oapi in this run, and judge the guard",
    )
    args = parser.parse_args()
    if args.mode == "turn":
        result = asyncio.run(turns(args.turns))
        result["guards"] = instruction_guards(per_turn=result["instructions_per_turn"])
    elif args.guard:
        daemon = asyncio.run(ingest(args.events, "daemon"))
        lark_oapi = asyncio.run(ingest(args.events, "lark_oapi"))
        ratio = daemon["instructions_per_event"] / lark_oapi["instructions_per_event"]
        result = {
            "mode": "ingest",
            "daemon": daemon,
            "lark_oapi": lark_oapi,
            "daemon_over_lark_oapi": round(ratio, 3),
            "guards": instruction_guards(event_vs_lark_oapi=round(ratio, 3)),
        }
    else:
        result = asyncio.run(ingest(args.events, args.server))
    print(json.dumps({**result, "tree": str(TREE)}), flush=True)


if __name__ == "__main__":
    main()
