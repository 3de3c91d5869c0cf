"""Every core of a host (issue 12): ``run --workers N`` is one supervisor and N worker processes
on one port (SO_REUSEPORT), each a full replica. A killed worker is restarted, SIGTERM / Ctrl-C
stop them all gracefully, SIGHUP reaches each, workers that keep dying stop the supervisor with
a non-zero status, the embedded Redis is started once, and a long connection is opened once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from gateway.config.file import load_settings
from gateway.config.server import cpu_count
from gateway.intake.spool import store_identity
from gateway.runtime.app import Gateway
from gateway.runtime.cli import main, settings_model
from sessions import KeyBuilder
from tests.support.cli import cli, processes_mentioning, quickstart, run_cli
from tests.support.configs import base_config
from tests.support.helpers import ROOT, ConsoleClient, InProcessGateway, free_port
from tests.support.redis_targets import REDIS_URL
from tests.support.waits import eventually
from tests.support.workers import ONE_EACH, Supervised, alive, platforms

slow = pytest.mark.slow


@pytest.fixture
async def daemons(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[Supervised] = []

    def make(config: dict[str, Any], name: str = "gw") -> Supervised:
        daemon = Supervised(config, tmp_path, name)
        started.append(daemon)
        return daemon

    try:
        yield make
    finally:
        for daemon in started:
            await daemon.stop()


def replica_config(prefix: str) -> dict[str, Any]:
    config = base_config(prefix)
    config["logging"] = {"level": "info", "format": "json"}
    return config


async def pids_answering(daemon: Supervised, want: int, timeout: float = 20) -> set[int]:
    """The pids /healthz reports over new connections, until ``want`` different ones."""
    seen: set[int] = set()

    async def enough() -> bool:
        seen.add((await daemon.healthz())["pid"])
        return len(seen) >= want

    await eventually(enough, timeout=timeout, interval=0.01)
    return seen


@slow
async def test_two_workers_serve_one_port_each_a_replica(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    daemon = daemons(replica_config(prefix))
    workers = await daemon.start("--workers", "2")
    assert len(workers) == 2 and daemon.proc is not None
    assert daemon.proc.pid not in workers  # the supervisor serves nothing
    assert await pids_answering(daemon, 2) == set(workers)
    health = await daemon.healthz()
    assert set(health) == {"status", "replica", "pid", "worker"}
    assert health["replica"].split("-")[-2] == str(health["pid"])
    replicas = {e["replica"] for e in daemon.logged("gateway started")}
    assert len(replicas) == 2  # each worker its own replica id
    client = ConsoleClient(f"http://127.0.0.1:{daemon.port}")
    try:
        await client.send("hello workers")
        [card] = await client.wait_cards(status="done")
        assert card["card"]["answer"] == "You said:\n> hello workers"
    finally:
        await client.close()


@slow
async def test_a_killed_worker_is_restarted_while_requests_keep_succeeding(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    daemon = daemons(replica_config(prefix))
    first, second = await daemon.start("--workers", "2")
    daemon_pid = daemon.proc.pid
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: not alive(first))
    answered: list[int] = []

    async def replaced() -> bool:
        answered.append((await daemon.healthz())["pid"])  # fails the test on any error
        pids = set(daemon.workers())
        return (
            len(pids) == 2 and first not in pids and bool(daemon.logged("worker ready", worker=0))
        )

    await eventually(replaced, timeout=30, interval=0.02)
    assert set(answered) <= {second, *daemon.workers()} and len(answered) > 5
    [restart] = daemon.logged("worker exited; restarting")
    assert restart["worker"] == 0 and restart["exit"] == "signal SIGKILL"
    assert await pids_answering(daemon, 2) == set(daemon.workers())
    assert daemon.proc.pid == daemon_pid and daemon.proc.poll() is None


@slow
async def test_sigterm_stops_every_worker_gracefully(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    daemon = daemons(replica_config(prefix))
    workers = await daemon.start("--workers", "2")
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait_exit(30) == 0
    assert not any(alive(pid) for pid in workers)
    assert {e["worker"] for e in daemon.logged("gateway stopped")} == {0, 1}
    assert {e["exit"] for e in daemon.logged("worker stopped")} == {"code 0"}
    assert not daemon.logged("second stop signal: handing running turns back now")


@slow
async def test_the_embedded_redis_is_started_once_and_ctrl_c_stops_it_after_the_workers(
    daemons: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    daemon = daemons(quickstart(data))
    workers = await daemon.start("--workers", "2")
    assert len(daemon.logged("embedded redis started")) == 1  # by the supervisor
    assert [e["embedded_redis"] for e in daemon.logged("gateway started")] == [False, False]
    [redis_pid] = [p for p in processes_mentioning(str(data)) if p not in workers]
    [console] = daemon.logged("open the console")  # once, by the supervisor
    assert console["url"] == f"http://127.0.0.1:{daemon.port}/console/"
    client = ConsoleClient(f"http://127.0.0.1:{daemon.port}")
    try:
        await client.send("over the embedded redis")
        await client.wait_cards(status="done")
    finally:
        await client.close()
    daemon.ctrl_c()  # the terminal's Ctrl-C: the supervisor forwards it, once
    assert await daemon.wait_exit(30) == 0
    # Each worker got one SIGINT (not two: that would cut the grace period short).
    assert not daemon.logged("second stop signal: handing running turns back now")
    assert len(daemon.logged("stop signal received", signal="SIGINT")) == 2
    stopped = [e["event"] for e in daemon.events()]
    assert stopped.index("embedded redis stopped") > max(
        i for i, e in enumerate(stopped) if e == "gateway stopped"
    )
    assert not alive(redis_pid) and processes_mentioning(str(data)) == []


@slow
async def test_a_second_ctrl_c_ends_the_grace_period_in_every_worker(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = replica_config(prefix)
    config["runtime"]["shutdownGraceSeconds"] = 120
    config["experts"] = [{"id": "echo", "kind": "echo", "stepDelayMs": 10_000}]
    daemon = daemons(config)
    await daemon.start("--workers", "2")
    client = ConsoleClient(f"http://127.0.0.1:{daemon.port}")
    try:
        await client.send("a long one")
        await client.wait_cards(status="running")
    finally:
        await client.close()
    daemon.ctrl_c()
    [busy] = await eventually(
        lambda: [e for e in daemon.logged("shutting down") if e["active_runs"] == 1]
    )
    assert "Ctrl-C again" in busy["hint"]
    assert daemon.proc is not None and daemon.proc.poll() is None  # within the grace period
    began = time.monotonic()
    daemon.ctrl_c()
    assert await daemon.wait_exit(30) == 0
    assert time.monotonic() - began < 20
    [handed] = daemon.logged("handing back unfinished turns")
    assert handed["worker"] == busy["worker"] and handed["count"] == 1


@slow
async def test_sighup_reaches_every_worker(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = replica_config(prefix)
    daemon = daemons(config)
    await daemon.start("--workers", "2")
    config["integrations"].append({**config["integrations"][0], "id": "console-2"})
    daemon.write_config(config)
    daemon.signal(signal.SIGHUP)

    def reloaded() -> list[dict[str, Any]]:
        done = daemon.logged("configuration reloaded")
        return done if len(done) == 2 else []

    done = await eventually(reloaded, timeout=20)
    assert {e["worker"] for e in done} == {0, 1}
    assert all(e["integrations"] == ["console", "console-2"] for e in done)
    assert daemon.proc is not None and daemon.proc.poll() is None


@slow
async def test_workers_that_keep_dying_make_the_supervisor_exit_1(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    daemon = daemons(replica_config(prefix))
    await daemon.start("--workers", "2")
    killed: set[int] = set()

    def kill_workers() -> bool:
        assert daemon.proc is not None
        if daemon.proc.poll() is not None:
            return True
        for pid in daemon.workers():
            if pid not in killed:
                killed.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return False

    began = time.monotonic()
    await eventually(kill_workers, timeout=60, interval=0.05)
    assert await daemon.wait_exit(5) == 1
    assert len(killed) == 5  # the fifth exit within the window ends it
    assert time.monotonic() - began < 40
    [gave_up] = daemon.logged("workers keep exiting; stopping")
    assert gave_up["exits"] == 5
    assert not any(alive(pid) for pid in killed)


@slow
async def test_a_worker_that_cannot_start_stops_the_supervisor_with_its_error(
    tmp_path: Path,
) -> None:
    config = {
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0", "connectTimeoutSeconds": 0.5},
        "logging": {"level": "info", "format": "json"},
        "experts": [{"id": "echo", "kind": "echo"}],
    }
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli("run", "--config", str(path), "--port", str(free_port()), "--workers", "2")
    assert result.returncode == 1
    assert "error: could not reach Redis" in result.stderr
    assert "worker could not start; stopping" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_port_in_use_exits_1_at_once_with_workers_too(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(
            "run", "--config", str(Path("config/gateway.yaml").resolve()), "--port", str(port),
            "--workers", "2", cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"error: port {port} is in use" in result.stderr
    assert "worker started" not in result.stderr
    assert processes_mentioning(str(tmp_path)) == []


@slow
async def test_workers_left_by_a_killed_supervisor_stop(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    daemon = daemons(replica_config(prefix))
    workers = await daemon.start("--workers", "2")
    daemon.signal(signal.SIGKILL)
    await eventually(lambda: not any(alive(pid) for pid in workers), timeout=30)
    assert len(daemon.logged("supervisor gone; stopping")) == 2
    assert {e["worker"] for e in daemon.logged("gateway stopped")} == {0, 1}


@slow
async def test_two_workers_hold_one_connection_per_bot(
    daemons: Any, prefix: str, redis_client: aioredis.Redis
) -> None:
    async with platforms() as fakes:
        config = replica_config(prefix)
        config["runtime"]["connectionLeaseSeconds"] = 2
        config["integrations"] = fakes.integrations()
        daemon = daemons(config)
        await daemon.start("--workers", "2")
        await eventually(lambda: fakes.connections() == ONE_EACH, timeout=20)
        await asyncio.sleep(2.5)  # past a lease time: renewals go on, nobody else connects
        assert fakes.connections() == ONE_EACH and fakes.opened() == ONE_EACH
        # The worker holding the Lark app's connection is killed: another takes it over.
        lease = KeyBuilder(prefix=prefix).record("conn-lease", "lark:cli_test")
        owner = int((await redis_client.get(lease)).split(":")[1])  # host:pid:random
        assert owner in daemon.workers()
        os.kill(owner, signal.SIGKILL)
        killed = time.monotonic()

        async def taken_over() -> bool:
            holder = await redis_client.get(lease)
            return holder is not None and int(holder.split(":")[1]) != owner

        await eventually(taken_over, timeout=10)
        assert time.monotonic() - killed < 2 * 1.2 + 0.5
        await eventually(lambda: fakes.opened()["lark"] == 2, timeout=10)
        await eventually(lambda: fakes.connections() == ONE_EACH)


async def test_healthz_names_the_replica_and_pid_of_a_process_on_its_own(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    gw = InProcessGateway(base_config(prefix))
    await gw.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{gw.port}/healthz") as resp,
        ):
            body = await resp.json()
        assert body == {"status": "ok", "replica": gw.gateway.replica_id, "pid": os.getpid()}
    finally:
        await gw.stop()


async def test_a_worker_on_the_supervisors_embedded_redis_spools_as_a_single_process_would(
    tmp_path: Path, prefix: str, redis_client: aioredis.Redis
) -> None:
    """Spool records name the Redis they belong to: those of a worker using the embedded Redis
    its supervisor runs replay in a single process on the same dataDir, and the other way."""
    config = quickstart(tmp_path / "data")
    config["redis"] = {"keyPrefix": prefix}
    settings = load_settings(config, model=settings_model())
    assert settings.redis.embedded
    gateway = Gateway(settings=settings, worker=0, embedded_redis_url=REDIS_URL)
    await gateway.start()
    try:
        assert gateway.redis is not None and gateway.redis.embedded is None  # not started here
        assert gateway.spooler.store == store_identity(None, prefix)
        assert await gateway.redis.client.ping()
    finally:
        await gateway.shutdown()


def test_log_lines_of_processes_sharing_stderr_never_merge(tmp_path: Path) -> None:
    """Workers share the supervisor's stderr; unbuffered (PYTHONUNBUFFERED, as in many
    containers), a line written in two parts could take another worker's line in between."""
    code = (
        "import structlog\n"
        "from gateway.logging import configure_logging\n"
        "configure_logging('info', 'json')\n"
        "log = structlog.get_logger('t')\n"
        "for i in range(3000):\n"
        "    log.info('line', n=i)\n"
    )
    path = tmp_path / "shared.log"
    with path.open("wb") as shared:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code],
                cwd=ROOT,
                stderr=shared,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            for _ in range(3)
        ]
        assert [p.wait(60) for p in procs] == [0, 0, 0]
    lines = path.read_text().splitlines()
    assert len(lines) == 9000
    assert sorted(json.loads(line)["n"] for line in lines) == sorted(list(range(3000)) * 3)


@pytest.mark.parametrize(("value", "count"), [("2", 2), ("auto", cpu_count())])
def test_workers_setting_and_option(value: str, count: int, tmp_path: Path) -> None:
    settings = load_settings(
        {"experts": [{"id": "e", "kind": "echo"}], "server": {"workers": value}},
        model=settings_model(),
    )
    assert settings.server.worker_count() == count
    path = tmp_path / "w.yaml"
    path.write_text(f"server: {{workers: {value}}}\nexperts: [{{id: e, kind: echo}}]\n")
    result = cli("check", "--config", str(path))
    assert result.returncode == 0
    shown = f" ({count} worker processes)" if count > 1 else ""
    assert f"server: http://127.0.0.1:8080{shown}\n" in result.stdout
    with pytest.raises(SystemExit):
        main(["run", "--config", str(path), "--workers", "0"])
