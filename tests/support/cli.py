"""The CLI as a newcomer runs it: in this process (``cli``: exit code and output) or as a
subprocess (``run_cli``), the quick-start config, and the processes a test left behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.support.helpers import ROOT

QUICKSTART = ROOT / "config" / "gateway.yaml"


# --- helpers ---------------------------------------------------------------------------------
def run_cli(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (the process list, from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def quickstart(data_dir: Path) -> dict[str, Any]:
    """The quick-start config (embedded Redis, console, echo) with its data under ``data_dir``."""
    config: dict[str, Any] = yaml.safe_load(QUICKSTART.read_text())
    config["dataDir"] = str(data_dir)
    config["logging"] = {"level": "info", "format": "json"}
    return config
