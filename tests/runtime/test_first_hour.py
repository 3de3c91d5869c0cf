"""What a newcomer meets in the first hour, as subprocesses: ``--help`` is a user's text (what the
program is, its commands, examples), and Ctrl-C of the quick start with the console open in a
browser (its event stream) and a turn answered stops cleanly, logging no warning."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.cli import quickstart, run_cli
from tests.support.helpers import ConsoleClient
from tests.support.workers import Supervised


def test_help_is_a_users_text() -> None:
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Connects chat bots on Lark/Feishu, DingTalk and WeCom" in out
    for command in ("run", "check", "migrate", "schema"):
        assert f"\n    {command} " in out
    assert "xpert-gateway run --config config/gateway.yaml" in out
    assert "xpert-gateway check --config prod.yaml --probe" in out
    # Not the module's docstring: nothing about imports, no reStructuredText quotes.
    assert "``" not in out and "import" not in out
    check = run_cli("check", "--help")
    assert "--probe" in check.stdout and "each expert's URL and key" in check.stdout


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Supervised]:
    gw = Supervised(quickstart(tmp_path / "data"), tmp_path)
    yield gw
    await gw.stop()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_ctrl_c_with_the_console_open_logs_no_warning(
    daemon: Supervised, workers: int
) -> None:
    await daemon.start("--workers", str(workers), workers=workers)
    base = f"http://127.0.0.1:{daemon.port}"
    console = ConsoleClient(base)
    opened = asyncio.Event()

    async def browser_tab() -> None:  # the page's event stream, open until the daemon stops
        async with aiohttp.ClientSession() as http:
            params = {"integrationId": "console"}
            async with http.get(base + "/console/api/events", params=params) as resp:
                opened.set()
                with contextlib.suppress(aiohttp.ClientError):
                    async for _ in resp.content:
                        pass

    tab = asyncio.create_task(browser_tab())
    try:
        await asyncio.wait_for(opened.wait(), timeout=10)
        await console.send("hello")
        await console.wait_cards(count=1, status="done", timeout=30)
        daemon.ctrl_c()
        assert await daemon.wait_exit(30) == 0
        await asyncio.wait_for(tab, timeout=10)
    finally:
        tab.cancel()
        await console.close()
    lines = daemon.log_path.read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert [line for line in lines if not line.startswith("{")] == []  # no traceback, no print
    assert [e for e in events if e.get("level") != "info"] == []
    assert [e for e in events if e["event"] == "gateway stopped"]
