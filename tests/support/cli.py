"""The CLI as a newcomer runs it: in this process (``cli``: exit code and output) or as a
subprocess (``run_cli``), the quick-start config, and the processes a test left behind."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.helpers import ROOT
from tests.support.spawn import run_gateway

QUICKSTART = ROOT / "config" / "gateway.yaml"


@dataclass(frozen=True)
class Result:
    """What a CLI call ended with, as ``subprocess.run`` tells it."""

    returncode: int
    stdout: str
    stderr: str


def cli(
    *args: str,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
) -> Result:
    """``xpert-gateway *args`` in this process (``gateway.runtime.cli.main``): its exit code and
    output, with ``env`` set and ``unset`` removed from the environment for the call (and
    ``REDIS_URL`` unless ``env`` sets it, as for a subprocess: helpers.daemon_env). For the
    commands that print and exit (``check``, ``schema``, ``--version``, a ``run`` whose config
    fails to load); a daemon runs in a subprocess (``run_cli``)."""
    from gateway.runtime.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    try:
        for name in (*unset, "REDIS_URL"):
            os.environ.pop(name, None)
        os.environ.update(env or {})
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: --version, --help, a usage error
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(code, out.getvalue(), err.getvalue())


def run_cli(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m gateway *args`` in a subprocess (a daemon, or what a fresh process does)."""
    return run_gateway(*args, cwd=cwd, env=env, timeout=timeout)


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
