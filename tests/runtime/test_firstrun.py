"""The first ten minutes: the daemon and the CLI as a newcomer meets them. A port in use, Ctrl-C
(once, twice, during start-up), the embedded Redis never left running, the console URL in the
log, ``--version``, config file mistakes named by file and line, placeholder secrets, a hidden
Redis password, and the compose file publishing the console on localhost only."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

import gateway
from gateway.config.errors import ConfigFileError
from gateway.config.file import load_settings
from gateway.runtime.app import Gateway
from gateway.runtime.cli import settings_model
from gateway.runtime.hints import config_warnings, is_placeholder, redis_location
from sessions.connection import EmbeddedRedis
from tests.support.cli import QUICKSTART, cli, processes_mentioning, quickstart, run_cli
from tests.support.configs import base_config
from tests.support.helpers import ROOT, ConsoleClient, daemon_env, free_port
from tests.support.spawn import spawn_gateway
from tests.support.waits import eventually
from tests.support.workers import Supervised

COMPOSE = ROOT / "docker-compose.yml"


class Daemon(Supervised):
    """``python -m gateway run`` as a terminal runs it (tests/support/workers.py), started when
    ``/healthz`` answers."""

    async def start(self) -> None:  # type: ignore[override]
        proc = self.spawn()
        async with aiohttp.ClientSession() as http:

            async def healthy() -> bool:
                assert proc.poll() is None, self.log_path.read_text()[-2000:]
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{self.port}/healthz") as resp:
                        return resp.status == 200
                return False

            await eventually(healthy, timeout=30)


@pytest.fixture
async def daemons(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[Daemon] = []

    def make(config: dict[str, Any], name: str = "gw") -> Daemon:
        daemon = Daemon(config, tmp_path, name)
        started.append(daemon)
        return daemon

    try:
        yield make
    finally:
        for daemon in started:
            await daemon.stop()


# --- port in use ------------------------------------------------------------------------------
def test_port_in_use_exits_1_at_once_and_leaves_nothing_running(tmp_path: Path) -> None:
    # ./dev.sh run is `xpert-gateway run --config config/gateway.yaml`; the quick start's
    # embedded Redis would live under tmp_path/.gateway.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        began = time.monotonic()
        result = run_cli(
            "run", "--config", str(QUICKSTART), "--port", str(port), cwd=tmp_path, timeout=60
        )
        took = time.monotonic() - began
    assert result.returncode == 1, result.stderr
    assert f"error: port {port} is in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert took < 15, f"took {took:.1f} s"
    assert "embedded redis started" not in result.stderr
    assert not (tmp_path / ".gateway" / "redis.sock").exists()
    assert processes_mentioning(str(tmp_path)) == []


# --- signals ----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
async def test_a_stop_signal_stops_the_gateway_and_then_its_embedded_redis(
    daemons: Any, tmp_path: Path, how: str
) -> None:
    data = tmp_path / "data"
    daemon = daemons(quickstart(data))
    await daemon.start()
    assert processes_mentioning(str(data)), "the embedded Redis should be running"
    if how == "ctrl-c":
        daemon.ctrl_c()
    else:
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
    assert await daemon.wait_exit(20) == 0
    # The gateway stopped a Redis that was still running: a Ctrl-C reaching Redis directly
    # would have ended it before the gateway's graceful shutdown, which needs it.
    assert daemon.logged("embedded redis stopped")
    assert not daemon.logged("control channel lost; resubscribing")
    assert processes_mentioning(str(data)) == []


def _pipe(size: int = 4096) -> tuple[int, int]:
    """A pipe with a small buffer (``F_SETPIPE_SZ``): a writer fills it after a few kB and then
    waits for the reader, so closing the read end surely breaks a write still to come."""
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, size)
    return read_end, write_end


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "workers"),
    [(signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGINT, 2)],
    ids=["SIGINT", "SIGTERM", "supervisor-SIGINT"],
)
async def test_a_daemon_whose_log_pipe_closed_still_stops_and_stops_its_redis(
    tmp_path: Path, sig: signal.Signals, workers: int
) -> None:
    # `./dev.sh run 2>&1 | tee log`, then Ctrl-C: tee is gone before the daemon logs that it
    # stops; the line it cannot write must not keep it running (nor leave Redis behind). With
    # workers, the supervisor and each worker meet the closed pipe.
    data = tmp_path / "data"
    config_path = tmp_path / "gw.yaml"
    config_path.write_text(yaml.safe_dump(quickstart(data)))
    port = free_port()
    read_end, write_end = _pipe()
    proc = spawn_gateway(
        *("run", "--config", str(config_path), "--port", str(port), "--workers", str(workers)),
        stdin=subprocess.DEVNULL,
        stdout=write_end,
        stderr=write_end,
        start_new_session=True,
        env=daemon_env(),
    )
    os.close(write_end)
    os.set_blocking(read_end, False)
    seen = bytearray()
    try:

        def listening() -> bool:
            with contextlib.suppress(BlockingIOError):
                seen.extend(os.read(read_end, 65536))
            assert proc.poll() is None, seen.decode(errors="replace")[-2000:]
            *complete, _rest = seen.split(b"\n")
            lines = [json.loads(x) for x in complete if x.startswith(b"{")]
            up = [
                e for e in lines if e["event"] == "listening" and (workers == 1 or "workers" in e)
            ]
            return bool(up)

        await eventually(listening, timeout=30)
        assert processes_mentioning(str(data)), "the embedded Redis should be running"
        os.close(read_end)  # tee is gone
        read_end = -1
        proc.send_signal(sig)
        assert await asyncio.to_thread(proc.wait, 20) == 0
        assert processes_mentioning(str(data)) == []
    finally:
        if read_end >= 0:
            os.close(read_end)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        for pid in processes_mentioning(str(data)):  # what a daemon killed above left running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("command", ["schema", "check"])
def test_a_command_piped_into_head_ends_quietly(tmp_path: Path, command: str) -> None:
    # `xpert-gateway schema | head -1`: head exits after one line; the command ends without a
    # traceback (nor Python's "Exception ignored ... BrokenPipeError" at exit).
    args: tuple[str, ...] = ("schema",)
    if command == "check":  # a config whose listing is larger than the pipe's buffer
        path = tmp_path / "many.yaml"
        experts = [{"id": f"echo-{i}", "kind": "echo"} for i in range(400)]
        integrations = [{"id": "console", "platform": "console", "xpertId": "echo-0"}]
        path.write_text(yaml.safe_dump({"experts": experts, "integrations": integrations}))
        args = ("check", "--config", str(path))
    read_end, write_end = _pipe()
    proc = spawn_gateway(
        *args,
        stdin=subprocess.DEVNULL,
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=daemon_env(),
    )
    os.close(write_end)
    try:
        first = os.read(read_end, 1)  # blocks until the command writes
    finally:
        os.close(read_end)
    _, stderr = proc.communicate(timeout=60)
    assert first == (b"{" if command == "schema" else str(args[-1]).encode()[:1])
    assert stderr.decode() == ""
    assert proc.returncode == 141  # as a command killed by SIGPIPE (128 + 13), e.g. cat


async def _ready(port: int) -> bool:
    """``/readyz`` says ready (Redis reachable, the console up)."""
    async with aiohttp.ClientSession() as http:
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
                return resp.status == 200 and bool((await resp.json())["ready"])
    return False


def _kill_all(data: Path) -> None:
    """What a failed test may leave running under ``data`` (a daemon, its Redis)."""
    for pid in processes_mentioning(str(data)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_a_second_daemon_on_the_same_data_dir_refuses_and_leaves_the_first_alone(
    daemons: Any, tmp_path: Path
) -> None:
    # The README's `./dev.sh run --port 9000` while `./dev.sh run` runs: the same dataDir. The
    # second must not take over (and end) the first one's embedded Redis.
    data = tmp_path / "data"
    first = daemons(quickstart(data), "first")
    try:
        await first.start()
        [started] = first.logged("embedded redis started")
        assert first.proc is not None
        second = run_cli(
            "run", "--config", str(first.config_path), "--port", str(free_port()), timeout=30
        )
        assert second.returncode == 1, second.stderr
        assert f"error: {data} is in use: another xpert-gateway (pid {first.proc.pid})" in (
            second.stderr
        )
        assert "dataDir" in second.stderr and "Traceback" not in second.stderr
        # The first one's Redis runs on, the same process, and the first is still ready.
        assert processes_mentioning(str(data)) == [started["pid"]]
        assert await _ready(first.port)
        assert not first.logged("control channel lost; resubscribing")
        first.signal(signal.SIGTERM)
        assert await first.wait_exit(20) == 0
        assert processes_mentioning(str(data)) == []
    finally:
        _kill_all(data)


@pytest.mark.slow
async def test_the_redis_of_a_killed_daemon_is_stopped_by_the_next_one_and_only_ours(
    daemons: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = subprocess.Popen(  # a redis-server of someone else's, not under our dataDir
        [
            *(EmbeddedRedis.executable(), "--port", "0", "--unixsocket", str(other_dir / "r.sock")),
            *("--dir", str(other_dir), "--save", "", "--appendonly", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = daemons(quickstart(data), "first")
        await first.start()
        [orphan] = [e["pid"] for e in first.logged("embedded redis started")]
        assert first.proc is not None
        first.proc.kill()  # SIGKILL: its Redis stays, an orphan holding the data
        await first.wait_exit(10)
        assert orphan in processes_mentioning(str(data))
        second = daemons(quickstart(data), "second")
        await second.start()
        assert second.logged("stopping the embedded redis a stopped daemon left", pid=orphan)
        assert orphan not in processes_mentioning(str(data))
        assert await _ready(second.port)
        await second.stop()
        assert processes_mentioning(str(data)) == []
        # A pid file naming a redis-server that is not ours: that one is left alone.
        (data / "redis.pid").write_text(f"{other.pid}\n")
        third = daemons(quickstart(data), "third")
        await third.start()
        assert await _ready(third.port)
        assert other.poll() is None
        assert not third.logged("stopping the embedded redis a stopped daemon left")
    finally:
        other.kill()
        other.wait(5)
        _kill_all(data)


@pytest.mark.slow
async def test_the_start_up_log_prints_the_console_url(daemons: Any, tmp_path: Path) -> None:
    daemon = daemons(quickstart(tmp_path / "data"))
    await daemon.start()
    [line] = daemon.logged("open the console")
    assert line["url"] == f"http://127.0.0.1:{daemon.port}/console/"
    async with aiohttp.ClientSession() as http, http.get(line["url"]) as resp:
        assert resp.status == 200
        assert "text/html" in resp.headers["Content-Type"]


@pytest.mark.slow
async def test_a_second_ctrl_c_ends_the_grace_period_and_hands_the_turn_back(
    daemons: Any, prefix: str, redis_client: Any
) -> None:
    def config(grace: float) -> dict[str, Any]:
        c = base_config(prefix)
        c["logging"] = {"level": "info", "format": "json"}
        c["runtime"]["shutdownGraceSeconds"] = grace
        # A turn of over 30 s: it cannot end within the test by itself.
        c["experts"] = [{"id": "echo", "kind": "echo", "stepDelayMs": 10_000}]
        return c

    a = daemons(config(grace=120), "a")
    await a.start()
    client = ConsoleClient(f"http://127.0.0.1:{a.port}")
    try:
        await client.send("a long one")
        await client.wait_cards(status="running")
    finally:
        await client.close()
    # Started once a runs the turn: any replica may claim a due turn, so b would race for it.
    b = daemons(config(grace=0.2), "b")
    await b.start()

    a.ctrl_c()
    [shutting] = await eventually(lambda: a.logged("shutting down"))
    assert shutting["active_runs"] == 1 and "Ctrl-C again" in shutting["hint"]
    assert a.proc is not None and a.proc.poll() is None  # within its 120 s grace period
    began = time.monotonic()
    a.ctrl_c()
    assert await a.wait_exit(20) == 0
    assert time.monotonic() - began < 20
    assert a.logged("second stop signal: handing running turns back now")
    assert a.logged("handing back unfinished turns")
    # Handed back, not lost: the other replica picks the turn up.
    await eventually(lambda: b.logged("resuming a turn left by another replica"), timeout=30)


@pytest.mark.slow
async def test_ctrl_c_during_start_up_stops_at_once(daemons: Any, tmp_path: Path) -> None:
    config = {
        "redis": {"url": f"redis://127.0.0.1:{free_port()}/0", "connectTimeoutSeconds": 120},
        "logging": {"level": "info", "format": "json"},
        "experts": [{"id": "echo", "kind": "echo"}],
    }
    daemon = daemons(config)
    daemon.spawn()
    await eventually(lambda: daemon.logged("redis not reachable, retrying"), timeout=30)
    # A config without any integration starts, with a warning.
    assert any("integrations: none configured" in e["event"] for e in daemon.events())
    daemon.ctrl_c()
    assert await daemon.wait_exit(10) == 0
    assert daemon.logged("start-up interrupted; stopped")
    assert "Traceback" not in daemon.log_path.read_text()


async def test_a_start_that_fails_part_way_stops_the_embedded_redis(tmp_path: Path) -> None:
    class Broken:
        settings_model = None

        def create(self, *, settings: Any, context: Any) -> Any:
            class Adapter:
                async def start(self) -> None:
                    raise RuntimeError("the platform refused us")

                async def stop(self) -> None:
                    pass

            return Adapter()

    data = tmp_path / "data"
    settings = load_settings(quickstart(data), model=settings_model())
    gw = Gateway(settings=settings, factories={"console": Broken()})  # type: ignore[dict-item]
    with pytest.raises(RuntimeError, match="refused"):
        await gw.start()
    assert gw.redis is not None and gw.redis.embedded is not None
    assert gw.redis.embedded.process is not None
    assert gw.redis.embedded.process.poll() is not None
    assert processes_mentioning(str(data)) == []
    assert all(t.done() for t in asyncio.all_tasks() if t is not asyncio.current_task())


# --- CLI --------------------------------------------------------------------------------------
def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"xpert-gateway {gateway.__version__}"
    assert gateway.__version__ == importlib.metadata.version("xpert-gateway")


def test_the_installed_entry_point_runs() -> None:
    """The one CLI test in a subprocess: the ``xpert-gateway`` script pip installed."""
    script = Path(sys.executable).parent / "xpert-gateway"
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"xpert-gateway {gateway.__version__}"


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("server:\n  host: 127.0.0.1\n  port 8080\nexperts: []\n", 3, 3),
        ("experts:\n  - id: echo\n    kind: echo\n  bad: [1, 2\n", 4, 3),
        ("logging: {level: info\nexperts: []\n", 1, 10),
    ],
)
def test_a_yaml_syntax_error_names_the_file_and_line(
    tmp_path: Path, text: str, line: int, column: int
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as info:
        load_settings(path)
    [problem] = info.value.problems
    assert problem.startswith(f"{path}, line {line}, column {column}: not valid YAML: "), problem
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert f"error: {path}, line {line}, column {column}: not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_missing_config_file_says_so(tmp_path: Path, command: str) -> None:
    result = cli(command, "--config", "nowhere.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: nowhere.yaml: no such config file (in {tmp_path})"


@pytest.mark.parametrize("text", ["", "\n\n", "# settings come later\n"])
def test_an_empty_config_file_says_it_is_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {path}: the file is empty (no settings in it)"


def test_a_config_that_is_not_a_mapping_says_so(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- experts\n- integrations\n")
    with pytest.raises(ConfigFileError, match=r"expected a mapping of settings .*, not list"):
        load_settings(path)


@pytest.mark.parametrize(
    ("integrations", "warning"),
    [
        ([], "integrations: none configured"),
        (
            [{"id": "c", "platform": "console", "xpertId": "echo", "enabled": False}],
            "integrations: all disabled",
        ),
    ],
)
def test_check_warns_when_no_integration_can_reach_the_gateway(
    tmp_path: Path, integrations: list[Any], warning: str
) -> None:
    path = tmp_path / "quiet.yaml"
    path.write_text(
        yaml.safe_dump({"experts": [{"id": "echo", "kind": "echo"}], "integrations": integrations})
    )
    result = cli("check", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert f"warning: {warning}" in result.stderr


def test_check_warns_about_placeholder_secrets_and_hides_the_redis_password(
    tmp_path: Path,
) -> None:
    path = tmp_path / "placeholders.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "redis": {"url": "redis://:s3cret-pw@127.0.0.1:6379/0"},
                "admin": {"token": "change-me-to-a-long-secret"},
                "experts": [
                    {
                        "id": "agent",
                        "kind": "xpert",
                        "baseUrl": "https://api.example.com/api/ai",
                        "apiKey": "${XGW_TEST_API_KEY:-sk-x-replace-me}",
                    }
                ],
                "integrations": [{"id": "console", "platform": "console", "xpertId": "agent"}],
            }
        )
    )
    result = cli("check", "--config", str(path), unset=("XGW_TEST_API_KEY",))
    assert result.returncode == 0, result.stderr
    assert "redis: redis://127.0.0.1:6379/0 (password hidden), key prefix 'xgw'" in result.stdout
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert "warning: admin.token: a placeholder secret;" in result.stderr
    assert "warning: experts[agent].apiKey: a placeholder secret;" in result.stderr
    # With the variable set, its placeholder default is not what runs: no warning for it.
    result = cli("check", "--config", str(path), env={"XGW_TEST_API_KEY": "sk-live-0123"})
    assert result.returncode == 0, result.stderr
    assert "experts[agent].apiKey" not in result.stderr
    assert "warning: admin.token: a placeholder secret;" in result.stderr


@pytest.mark.parametrize(
    "value",
    ["replace-me", "change-me", "sk-x-replace-me", "REPLACE_ME", "changeme", "<your token>",
     "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"],
)  # fmt: skip
def test_placeholders_are_recognised(value: str) -> None:
    assert is_placeholder(value)


@pytest.mark.parametrize("value", ["none", "sk-live-0123", "replacement", "You said:", "echo"])
def test_real_values_are_not_placeholders(value: str) -> None:
    assert not is_placeholder(value)


def test_placeholder_warnings_name_the_key_path_and_not_a_secret_value() -> None:
    settings = load_settings(
        {
            "experts": [{"id": "echo", "kind": "echo", "replyPrefix": "replace-me"}],
            "admin": {"token": "<your-admin-token-here>"},
            "integrations": [{"id": "c", "platform": "console", "xpertId": "echo"}],
        },
        model=settings_model(),
    )
    warnings = {w.split(":")[0]: w for w in config_warnings(settings)}
    assert set(warnings) == {"admin.token", "experts[echo].replyPrefix"}
    prefix = warnings["experts[echo].replyPrefix"]
    assert "a placeholder ('replace-me'); set the real value" in prefix
    assert warnings["admin.token"].startswith("admin.token: a placeholder secret;")
    assert "<your-admin-token-here>" not in warnings["admin.token"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@redis.example:6380/2", "redis://redis.example:6380/2 (password hidden)"),
        ("redis://user:pw@h/0", "redis://h/0 (password hidden)"),
        ("rediss://h:6379/0?password=pw", "rediss://h:6379/0 (password hidden)"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_redis_location_hides_credentials(url: str, shown: str) -> None:
    assert redis_location(url) == shown


# --- Docker -----------------------------------------------------------------------------------
_COMPOSE_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}")


def compose_interpolate(text: str, env: dict[str, str]) -> str:
    """``${VAR}``, ``${VAR:-default}`` (unset or empty) and ``${VAR-default}`` (unset), as
    https://docs.docker.com/reference/compose-file/interpolation/ defines them."""

    def value(m: re.Match[str]) -> str:
        name, op, default = m.group(1), m.group(2), m.group(3) or ""
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        return env.get(name, "")

    return _COMPOSE_VAR.sub(value, text)


def _published(env: dict[str, str]) -> dict[str, list[str]]:
    doc = yaml.safe_load(compose_interpolate(COMPOSE.read_text(), env))
    return {name: [str(p) for p in s.get("ports", [])] for name, s in doc["services"].items()}


def test_compose_publishes_the_console_on_localhost_unless_opted_in() -> None:
    published = _published({})
    assert published["gateway"] == ["127.0.0.1:8080:8080"]
    assert all(p.startswith("127.0.0.1:") for ports in published.values() for p in ports)
    assert _published({"XGW_PUBLISH_ADDRESS": "0.0.0.0"})["gateway"] == ["0.0.0.0:8080:8080"]


def test_check_lists_the_triggers_of_the_example_configs() -> None:
    schedules = cli("check", "--config", str(ROOT / "config/examples/schedules.yaml"))
    assert schedules.returncode == 0, schedules.stderr
    assert "schedules:\n" in schedules.stdout
    line = next(x for x in schedules.stdout.splitlines() if "weekday-summary" in x)
    assert "'30 9 * * 1-5' Europe/Berlin in console/team, next 20" in line
    assert "paused" in schedules.stdout and "next never" in schedules.stdout
    watch = cli("check", "--config", str(ROOT / "config/examples/watch.yaml"))
    assert "    watch incidents\n" in watch.stdout
    events = cli("check", "--config", str(ROOT / "config/examples/events.yaml"))
    assert "    events github -> chat " in events.stdout
