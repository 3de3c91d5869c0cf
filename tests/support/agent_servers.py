"""The real agent servers the ``langgraph`` and ``a2a`` expert kinds are tested against, each a
process of its own started once per pytest-xdist worker (session fixtures in
tests/support/plugin.py) on a free port of 127.0.0.1:

- ``langgraph dev`` (langgraph-cli with langgraph-api's in-memory runtime) serving the graphs
  of tests/agents/langgraph.json, from a copy of that folder (the server writes its
  ``.langgraph_api`` state beside the config). Nothing of it goes to the network:
  ``--no-browser`` (no Studio page), ``LANGGRAPH_CLI_NO_ANALYTICS=1`` (langgraph_cli
  analytics.py), ``LANGGRAPH_NO_VERSION_CHECK`` (langgraph_api cli.py's PyPI check),
  ``LANGSMITH_TRACING=false``; no license key, so langgraph_api metadata.py sends no beacon.
- an a2a-sdk server running tests/agents/a2a_agent.py's executor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.redis_server import free_port

AGENTS = Path(__file__).resolve().parent.parent / "agents"
START_TIMEOUT_S = 60.0


class AgentServer:
    """One server process; ``url`` once ``start`` returned."""

    def __init__(self, name: str, command: list[str], workdir: Path, port: int, ready: str):
        self.name, self.command, self.workdir, self.port = name, command, workdir, port
        self.url = f"http://127.0.0.1:{port}"
        self.ready_path = ready
        self.process: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0  # how long it took to answer

    def start(self, env: dict[str, str] | None = None) -> AgentServer:
        log = open(self.workdir / f"{self.name}.log", "wb")
        began = time.monotonic()
        self.process = subprocess.Popen(
            self.command,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        log.close()
        deadline = began + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=1) as resp:
                    if resp.status == 200:
                        self.start_seconds = time.monotonic() - began
                        return self
            except OSError:
                time.sleep(0.05)  # not listening yet: polled until it answers or dies
        self.stop()
        tail = (self.workdir / f"{self.name}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{self.name} did not start:\n{tail}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def langgraph_dev(workdir: Path) -> AgentServer:
    """``langgraph dev`` serving tests/agents' graphs ("agent", "agent_per_call")."""
    for name in ("langgraph.json", "langgraph_agent.py"):
        shutil.copy(AGENTS / name, workdir / name)
    port = free_port()
    cli = Path(sys.executable).parent / "langgraph"
    command = [
        str(cli),
        "dev",
        "--no-browser",
        "--no-reload",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n-jobs-per-worker",
        "20",  # runs of several tests at once (the default is one at a time)
        "--server-log-level",
        "WARNING",
    ]
    env = {
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
    }
    return AgentServer("langgraph", command, workdir, port, "/ok").start(env)


def a2a_server(workdir: Path) -> AgentServer:
    """An a2a-sdk server (JSON-RPC and HTTP+JSON) running tests/agents/a2a_agent.py."""
    port = free_port()
    command = [sys.executable, str(AGENTS / "a2a_agent.py"), "--port", str(port)]
    return AgentServer("a2a", command, workdir, port, "/.well-known/agent-card.json").start()
