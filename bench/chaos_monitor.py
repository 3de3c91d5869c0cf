"""MONITOR during a chaos run: the top-level calls (not a script's own) by command and EVALSHA by
script name, with the bytes of their requests. MONITOR's stream is output of the server, so a run
with it has inflated output bytes and Redis CPU: measure those in a run without it."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path


# --- MONITOR: where the calls and request bytes go -------------------------------------------
def script_names() -> dict[str, str]:
    """sha1 -> name of the gateway's Lua scripts (what EVALSHA names)."""
    lua = Path(__file__).resolve().parents[1] / "sessions" / "lua"
    return {hashlib.sha1(p.read_bytes()).hexdigest(): p.stem for p in sorted(lua.glob("*.lua"))}


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def monitor_args(line: str) -> tuple[str, list[str]] | None:
    """``+<time> [<db> <client>] "ARG" "ARG"…`` -> (client, args), the args unescaped as Redis
    escaped them (sdscatrepr); None for anything else."""
    if not line.startswith("+") or "[" not in line:
        return None
    head, _, rest = line.partition("] ")
    client = head.split("[", 1)[1].split(" ", 1)[-1]
    args: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        if rest[i] != '"':
            i += 1
            continue
        i += 1
        out: list[str] = []
        while i < n and rest[i] != '"':
            ch = rest[i]
            if ch == "\\" and i + 1 < n:
                nxt = rest[i + 1]
                if nxt == "x" and i + 3 < n:
                    out.append(chr(int(rest[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                out.append(_ESCAPES.get(nxt, nxt))
                i += 2
                continue
            out.append(ch)
            i += 1
        args.append("".join(out))
        i += 1
    return client, args


def resp_size(args: list[str]) -> int:
    """The bytes of a command as a client sends it (RESP array of bulk strings)."""
    sizes = [len(a.encode("utf-8", "surrogateescape")) for a in args]
    return len(f"*{len(args)}\r\n") + sum(len(f"${s}\r\n") + s + 2 for s in sizes)


class Monitor:
    """MONITOR on every node while it runs: top-level calls (not a script's own) by command,
    EVALSHA by script name, with their request bytes."""

    def __init__(self, nodes: list[tuple[str, int]], prefix: str) -> None:
        self.nodes, self.prefix = nodes, prefix
        self.calls: Counter[str] = Counter()
        self.request_bytes: Counter[str] = Counter()
        self.names = script_names()
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        ready = [asyncio.Event() for _ in self.nodes]
        self.tasks = [
            asyncio.create_task(self._watch(h, p, e))
            for (h, p), e in zip(self.nodes, ready, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 10)

    async def _watch(self, host: str, port: int, ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        try:
            writer.write(b"*1\r\n$7\r\nMONITOR\r\n")
            await writer.drain()
            await reader.readline()  # +OK
            ready.set()
            while True:
                line = (await reader.readline()).decode("utf-8", "surrogateescape").rstrip("\r\n")
                parsed = monitor_args(line)
                if parsed is None or parsed[0] == "lua" or not parsed[1]:
                    continue
                args = parsed[1]
                name = args[0].lower()
                if name in ("evalsha", "evalsha_ro") and len(args) > 1:
                    name = "evalsha " + self.names.get(args[1], args[1][:10])
                self.calls[name] += 1
                self.request_bytes[name] += resp_size(args)
        finally:
            writer.close()

    async def stop(self, messages: int) -> dict[str, dict[str, float]]:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        m = max(messages, 1)
        return {
            name: {
                "calls_per_message": round(calls / m, 3),
                "request_bytes_per_message": round(self.request_bytes[name] / m),
                "request_bytes_per_call": round(self.request_bytes[name] / calls),
            }
            for name, calls in self.calls.most_common()
        }
