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
