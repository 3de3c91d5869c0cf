"""What /proc says about processes and the machine (CPU time, peak memory, load), and pinning
processes to cores."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` so far, all threads (/proc/<pid>/stat fields 14, 15)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total * TICK_S


def machine_busy_seconds() -> float:
    """CPU time all cores spent busy so far (/proc/stat: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) * TICK_S


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def memory_mb(pid: int, field: str = "VmHWM") -> float | None:
    """A /proc/<pid>/status memory figure in MB: VmHWM is the peak resident set, VmRSS now."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


@dataclass(frozen=True)
class Cores:
    """Which cores the measured server and the load side (wrk, Redis, this script) run on;
    None when nothing is pinned (fewer than two cores, or ``--no-pin``)."""

    server: frozenset[int] | None = None
    client: frozenset[int] | None = None

    @classmethod
    def plan(cls, pin: bool) -> Cores:
        cores = sorted(os.sched_getaffinity(0))
        if not pin or len(cores) < 2:
            return cls()
        return cls(server=frozenset({cores[0]}), client=frozenset(cores[1:2]))

    def describe(self, **who: str) -> dict[str, list[int]] | None:
        """``{"daemon": [0], ...}``: what was pinned where, for the JSON."""
        if self.server is None or self.client is None:
            return None
        return {
            name: sorted(self.server if side == "server" else self.client)
            for name, side in who.items()
        }


def pin_to(cores: frozenset[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` pinning a child (and every thread it starts) to ``cores``."""
    if cores is None:
        return None
    wanted = set(cores)
    return lambda: os.sched_setaffinity(0, wanted)


def pin_threads(pid: int, cores: frozenset[int]) -> None:
    """Pin every thread a running process already has (a new thread inherits its creator's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), set(cores))
