"""SIGHUP reloads the config: new sessions get it, running sessions keep their snapshot
(docs/architecture.md, "Sessions"), and an invalid file is refused without stopping the daemon."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml

from tests.support.configs import base_config
from tests.support.helpers import DaemonProcess
from tests.support.waits import eventually

pytestmark = pytest.mark.slow


def _logged(daemon: DaemonProcess, event: str) -> bool:
    return any(
        line.startswith("{") and json.loads(line).get("event") == event
        for line in daemon.log_path.read_text().splitlines()
    )


async def test_sighup_applies_new_config_to_new_sessions_only(
    tmp_path: Path, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = base_config(prefix)
    config["logging"] = {"level": "info", "format": "json"}
    daemon = DaemonProcess(config, tmp_path)
    await daemon.start()
    try:
        await daemon.client.send("before")
        [card] = await daemon.client.wait_cards()
        assert card["card"]["answer"].startswith("You said:")

        config["experts"][0]["replyPrefix"] = "Heard:"
        daemon.config_path.write_text(yaml.safe_dump(config))
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)
        await eventually(lambda: _logged(daemon, "configuration reloaded"))

        await daemon.client.send("same session")  # dm-alice's session keeps its snapshot
        cards = await daemon.client.wait_cards(count=2)
        assert cards[1]["card"]["answer"].startswith("You said:")
        await daemon.client.send("new session", chat="dm-bob", sender="bob")
        [bob] = await daemon.client.wait_cards(chat="dm-bob")
        assert bob["card"]["answer"].startswith("Heard:")

        daemon.config_path.write_text("experts: [oops\n")
        daemon.proc.send_signal(signal.SIGHUP)
        await eventually(lambda: _logged(daemon, "configuration not reloaded: invalid"))
        await daemon.client.send("still serving", chat="dm-carol", sender="carol")
        [carol] = await daemon.client.wait_cards(chat="dm-carol")
        assert carol["card"]["answer"].startswith("Heard:")
    finally:
        await daemon.stop()


async def test_a_principals_change_reaches_a_live_session_at_its_next_turn(
    tmp_path: Path, prefix: str, redis_client: aioredis.Redis
) -> None:
    """Issue 36: who a sender acts as is read from the config in force at each turn (as the
    secrets are), not from the session's snapshot: a mapping removed by SIGHUP stops at once."""
    from tests.fakes.xpertai import FakeXpertAI
    from tests.fakes.xpertai_input import Principal
    from tests.support.helpers import serve
    from tests.support.xpert import config as xpert_config

    fake = FakeXpertAI(keepalive_s=0.2)
    fake.principals["u-a"] = Principal("en-US", "alice@example.com", "Europe/Berlin")
    async for url in serve(fake.app()):
        entry = {"integrationId": "console", "senderId": "alice", "userId": "u-a"}
        config = xpert_config(prefix, url + "/api/ai", {"principals": [entry]})
        config["logging"] = {"level": "info", "format": "json"}
        daemon = DaemonProcess(config, tmp_path)
        await daemon.start()
        try:
            await daemon.client.send("first")
            await daemon.client.wait_cards()
            config["experts"][0]["principals"] = []
            daemon.config_path.write_text(yaml.safe_dump(config))
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGHUP)
            await eventually(lambda d=daemon: _logged(d, "configuration reloaded"))
            await daemon.client.send("second")  # the same session (dm-alice)
            await daemon.client.wait_cards(count=2)
        finally:
            await daemon.stop()
    runs = [named for path, named in fake.principal_ids if path.endswith("/runs/stream")]
    assert runs == ["u-a", "u-42"]  # the second turn as principalUserId: the entry is gone
    assert len(fake.threads) == 1  # still the same session and thread (a direct chat)
