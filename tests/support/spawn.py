"""The one way the tests start ``python -m gateway`` in a subprocess: :func:`spawn_gateway` (a
daemon that runs until stopped) and :func:`run_gateway` (a command that ends). Everything else
(the daemon harnesses of ``helpers``, ``workers`` and ``console_browser``, ``cli.run_cli``)
goes through these two, so the command line, working directory and environment are set in one
place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = (sys.executable, "-m", "gateway")

Stream = int | IO[Any] | None


def gateway_env(env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment without ``REDIS_URL`` (the tests' own Redis, which the CLI
    uses for a config naming no ``redis.url``: a daemon uses the Redis its config names), plus
    ``env``."""
    return {**{k: v for k, v in os.environ.items() if k != "REDIS_URL"}, **(env or {})}


def spawn_gateway(
    *args: str,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    start_new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """``python -m gateway *args`` started, not waited for (``env`` as :func:`gateway_env` says)."""
    return subprocess.Popen(
        [*GATEWAY, *args],
        cwd=cwd,
        env=gateway_env(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=start_new_session,
    )


def run_gateway(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m gateway *args`` run to its end, its output captured as text."""
    return subprocess.run(
        [*GATEWAY, *args],
        cwd=cwd,
        env=gateway_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
