"""Redis round trips counted from MONITOR, split between the gateway's own state and the
console's transcript (its "platform": a real platform's messages would live elsewhere).

A thread writes the raw MONITOR stream of the bench's Redis to a file while the load runs (no
parsing meanwhile, so the bench client stays light); ``count`` reads it afterwards.

What is counted: every top-level command a client sent (MONITOR's ``[db addr]`` lines; the
``[db lua]`` lines are the commands a script ran, counted apart as ``in_script``). Each EVALSHA
is one, a MULTI..EXEC block is one, and each command of a pipeline is one: MONITOR does not say
which commands arrived in one write. ``batches`` estimates that from the timing (``Counting``):
commands of one connection back to back within 50 µs count as one write. A command is the
console's when it is a ``timeline_put`` script call or touches a transcript key (``…:tl:…``) or
channel (``…:timeline``); every other one is the gateway's. Commands from the bench's own
connections (by address) are left out.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

LUA_DIR = Path(__file__).resolve().parents[1] / "sessions" / "lua"
LINE = re.compile(r"^\+?(\d+\.\d+) \[\d+ ([^\]]+)\] (.*)$")
TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"')
CONSOLE_SCRIPTS = frozenset({"timeline_put"})


def script_names() -> dict[str, str]:
    """sha1 -> script name for the gateway's Lua scripts (what EVALSHA names), including those
    with intake.lua spliced in at ``--INTAKE--`` (sessions/budgets.py, sessions/watch.py) and the
    intake that claims its turn (intake_claim.lua)."""
    texts = {path.stem: path.read_text("utf-8") for path in sorted(LUA_DIR.glob("*.lua"))}
    names = {}
    for name, text in texts.items():
        names[hashlib.sha1(text.encode()).hexdigest()] = name
        if "--INTAKE--" in text and "intake" in texts:
            spliced = text.replace("--INTAKE--", texts["intake"], 1)
            names[hashlib.sha1(spliced.encode()).hexdigest()] = f"{name}(intake)"
    # budget_intake.lua (with intake.lua) and claim.lua spliced into intake_claim.lua
    if "intake_claim" in texts:
        budget = texts["budget_intake"].replace("--INTAKE--", texts["intake"], 1)
        both = texts["intake_claim"].replace("--BUDGET--", budget, 1)
        both = both.replace("--CLAIM--", texts["claim"], 1)
        names[hashlib.sha1(both.encode()).hexdigest()] = "intake_claim"
    return names


class MonitorCapture:
    """MONITOR of one Redis server, written raw to ``path`` by a thread until ``stop``."""

    def __init__(self, host: str, port: int, path: Path) -> None:
        self.host, self.port, self.path = host, port, path
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.local_addr = ""  # our own connection's address, as MONITOR would name it

    def start(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=5)
        sock.sendall(b"MONITOR\r\n")
        if not sock.recv(5).startswith(b"+OK"):
            raise RuntimeError("MONITOR refused")
        host, port = sock.getsockname()[:2]
        self.local_addr = f"{host}:{port}"
        sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._run, args=(sock,), daemon=True)
        self._thread.start()

    def _run(self, sock: socket.socket) -> None:
        with sock, self.path.open("wb") as out:
            while not self._stop.is_set():
                try:
                    chunk = sock.recv(1 << 20)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                out.write(chunk)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def lines(self) -> Iterator[tuple[float, str, list[str]]]:
        """(server time, client address or ``lua``, the command and its first arguments)."""
        with self.path.open("rb") as raw:
            for line in raw:
                m = LINE.match(line.decode("utf-8", "replace").rstrip("\r\n"))
                if m is None:
                    continue
                words = []
                for token in TOKEN.finditer(m.group(3)):
                    words.append(token.group(1))
                    if len(words) >= 6:  # command, sha, numkeys, first keys: enough to classify
                        break
                if words:
                    yield float(m.group(1)), m.group(2), words


@dataclass
class Tally:
    """Commands in one time window, by side (``gateway`` / ``console``) and by name."""

    seconds: float
    top: Counter[str] = field(default_factory=Counter)  # side -> top-level commands
    in_script: Counter[str] = field(default_factory=Counter)  # side -> commands scripts ran
    batches: Counter[str] = field(default_factory=Counter)  # side -> batches with its commands
    by_name: dict[str, Counter[str]] = field(
        default_factory=lambda: {"gateway": Counter(), "console": Counter()}
    )


def side_of(words: list[str], names: dict[str, str]) -> tuple[str, str]:
    """Whose command this is, and a name for it (``evalsha claim``, ``hget``)."""
    command = words[0].lower()
    if command in ("evalsha", "eval") and len(words) > 1:
        script = names.get(words[1].lower(), words[1][:10]) if command == "evalsha" else "eval"
        return ("console" if script in CONSOLE_SCRIPTS else "gateway"), f"{command} {script}"
    keys = words[1:]
    if any(":tl:" in k or k.endswith(":timeline") for k in keys):
        return "console", command
    return "gateway", command


class Counting:
    """Walks MONITOR lines once, adding to the Tally of every window a line falls in.

    Batches: a run of top-level commands from one connection, each at most ``BATCH_GAP_S``
    after the line before it (its own scripts' lines may come between) and no other client's
    command between them, is taken as one write (a pipeline, or the auto-pipeline's batch);
    a reply waited for takes far longer on loopback. At load one batch serves many turns.
    """

    BATCH_GAP_S = 50e-6

    def __init__(
        self, windows: dict[str, tuple[float, float]], ignore: set[str], marker: str | None
    ) -> None:
        self.windows, self.ignore, self.marker = windows, ignore, marker
        self.names = script_names()
        self.tallies = {name: Tally(seconds=b - a) for name, (a, b) in windows.items()}
        self.in_multi: dict[str, tuple[str, str] | None] = {}  # addr -> the block's side
        self.script_side = "gateway"  # whose script the [lua] lines belong to
        self.last_t = 0.0
        self.batch: tuple[str, float, set[str]] | None = None  # addr, start, sides in it

    def hits(self, t: float) -> list[Tally]:
        return [self.tallies[n] for n, (a, b) in self.windows.items() if a <= t < b]

    def close_batch(self) -> None:
        if self.batch is not None:
            for tally in self.hits(self.batch[1]):
                tally.batches.update(self.batch[2])
        self.batch = None

    def line(self, t: float, addr: str, words: list[str]) -> None:
        gap, self.last_t = t - self.last_t, t
        named = self.marker is None or any(self.marker in w for w in words[1:])
        if addr == "lua":
            for tally in self.hits(t) if named else ():
                tally.in_script[self.script_side] += 1
            return
        if self.batch is None or self.batch[0] != addr or gap > self.BATCH_GAP_S:
            self.close_batch()
            self.batch = (addr, t, set())
        if addr in self.ignore:
            return
        command = words[0].lower()
        if not named and command not in ("multi", "exec", "discard"):
            return
        if command == "multi":
            self.in_multi[addr] = None
            return
        if addr in self.in_multi:
            if command not in ("exec", "discard"):
                if self.in_multi[addr] is None:
                    self.in_multi[addr] = side_of(words, self.names)
                return
            block = self.in_multi.pop(addr)
            if block is None and self.marker is not None:
                return  # another client's transaction on a shared Redis
            side, inner = block or ("gateway", "multi")
            name = f"multi..exec ({inner})"
        else:
            side, name = side_of(words, self.names)
            if command in ("evalsha", "eval"):
                self.script_side = side
        self.batch[2].add(side)
        for tally in self.hits(t):
            tally.top[side] += 1
            tally.by_name[side][name] += 1


def count(
    lines: Iterable[tuple[float, str, list[str]]],
    windows: dict[str, tuple[float, float]],
    *,
    ignore: set[str],
    marker: str | None = None,
) -> dict[str, Tally]:
    """A Tally per named window (wall-clock seconds); ``ignore``: the bench's own addresses;
    ``marker``: on a shared Redis, only commands naming it (the key prefix) count."""
    counting = Counting(windows, ignore, marker)
    for t, addr, words in lines:
        counting.line(t, addr, words)
    counting.close_batch()
    return counting.tallies


def per_turn(load: Tally, idle: Tally | None, turns: int) -> dict[str, object]:
    """Round trips per turn by side, and the gateway's net of its idle polling."""
    if turns <= 0:
        return {}
    idle_s = idle.seconds if idle is not None else 0.0
    idle_rate = {
        s: (idle.top[s] / idle_s if idle is not None and idle_s else 0.0) for s in load.top
    }
    idle_batches = idle.batches["gateway"] / idle_s if idle is not None and idle_s else 0.0
    out: dict[str, object] = {
        "gateway": round(load.top["gateway"] / turns, 2),
        "console_timeline": round(load.top["console"] / turns, 2),
        "gateway_net_of_idle": round(
            max(0.0, load.top["gateway"] - idle_rate.get("gateway", 0.0) * load.seconds) / turns,
            2,
        ),
        "idle_gateway_per_s": round(idle_rate.get("gateway", 0.0), 2),
        "batches": {
            "gateway": round(load.batches["gateway"] / turns, 2),
            "console_timeline": round(load.batches["console"] / turns, 2),
            "gateway_net_of_idle": round(
                max(0.0, load.batches["gateway"] - idle_batches * load.seconds) / turns, 2
            ),
        },
        "in_script": {
            "gateway": round(load.in_script["gateway"] / turns, 2),
            "console_timeline": round(load.in_script["console"] / turns, 2),
        },
        "by_command": {
            side: {
                name: round(n / turns, 3)
                for name, n in load.by_name[side].most_common()
                if n / turns >= 0.01
            }
            for side in ("gateway", "console")
        },
    }
    return out


@contextlib.contextmanager
def capturing(host: str, port: int, path: Path) -> Iterator[MonitorCapture]:
    capture = MonitorCapture(host, port, path)
    capture.start()
    try:
        yield capture
    finally:
        capture.stop()
