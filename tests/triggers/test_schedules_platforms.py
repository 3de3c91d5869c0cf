"""Which platform modes can post with no message to answer (a scheduled turn), and what the
scheduler does where one cannot: skip the fire, with one warning per schedule."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from adapters.dingtalk import DingTalkAdapter, DingTalkIntegration
from adapters.dingtalk.outbound.robot import target
from adapters.wecom import WeComAdapter, WeComIntegration
from gateway.config.file import load_settings
from gateway.envelope import Chat, Envelope, ReplyTo, Sender
from gateway.runtime.cli import settings_model
from gateway.triggers.schedules import Scheduler
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway
from tests.support.wecom import AES_KEY, CORP_ID, TOKEN


def wecom_fields(mode: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"id": "wc", "platform": "wecom", "xpertId": "echo"}
    fields |= {"connectionMode": mode, "token": TOKEN, "encodingAesKey": AES_KEY}
    fields |= {"corpId": CORP_ID, "agentId": 1, "corpSecret": "s"} if mode == "app" else {}
    fields |= {"botId": "b", "botSecret": "s"} if mode == "aibot_ws" else {}
    return fields


# What these adapters read of their context (gateway.edge.adapter.AdapterContext) at construction.
CONTEXT = {
    "records": None,
    "connection_lease_ms": 15_000,
    "api_calls": lambda *_: None,
    "platform_budget": lambda *_: None,
    "ingest_or_spool": None,
}


@pytest.mark.parametrize(
    ("mode", "p2p", "group"),
    [("app", True, False), ("aibot", False, False), ("aibot_ws", True, True)],
)
def test_which_wecom_modes_post_unprompted(mode: str, p2p: bool, group: bool) -> None:
    context: Any = type("Context", (), CONTEXT)()
    settings = WeComIntegration.model_validate(wecom_fields(mode))
    adapter = WeComAdapter(settings=settings, context=context)
    assert (adapter.posts_unprompted("p2p"), adapter.posts_unprompted("group")) == (p2p, group)


def test_a_dingtalk_direct_chat_schedule_goes_to_the_users_staff_id() -> None:
    context: Any = type("Context", (), CONTEXT)()
    settings = DingTalkIntegration.model_validate(
        {"id": "dt", "platform": "dingtalk", "xpertId": "echo", "clientId": "c",
         "clientSecret": "s", "robotCode": "r"}
    )  # fmt: skip
    adapter = DingTalkAdapter(settings=settings, context=context)
    asked = Envelope(
        integration_id="dt",
        platform="dingtalk",
        event_id="m1",
        chat=Chat(id="cidP2P==", type="p2p"),
        sender=Sender(id="staff-7"),
        reply_to=ReplyTo(message_id="m1", senderStaffId="staff-7", conversationId="cidP2P=="),
    )
    assert adapter.unprompted_chat_id(asked) == "staff-7"
    group = asked.model_copy(update={"chat": Chat(id="cidGroup==", type="group")})
    assert adapter.unprompted_chat_id(group) == "cidGroup=="
    fire = Envelope(
        integration_id="dt",
        platform="dingtalk",
        event_id="schedule:s:1",
        kind="schedule",
        chat=Chat(id="staff-7", type="p2p"),
        sender=Sender(id="schedule:s"),
    )
    assert target(fire) == (False, "staff-7", "staff-7")
    fire = fire.model_copy(update={"chat": Chat(id="cidGroup==", type="group")})
    assert target(fire)[:2] == (True, "cidGroup==")


async def test_a_mode_that_cannot_post_skips_its_fires_with_one_warning(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = base_config(prefix)
    cfg["integrations"].append(wecom_fields("aibot"))
    gw = InProcessGateway(cfg)
    await gw.start()
    try:
        cfg["schedules"] = [
            {"id": "s1", "integrationId": "wc", "chatId": "room", "chatType": "group",
             "cron": "* * * * * *", "text": "report"}
        ]  # fmt: skip
        settings = load_settings(cfg, model=settings_model())
        seen: list[Envelope] = []

        async def ingest(envelope: Envelope) -> Any:
            seen.append(envelope)
            return await gw.gateway.pipeline.ingest(envelope)

        clock = [gw.gateway.scheduler.clock() // 1000 * 1000]
        store = gw.gateway.intake.schedules.book.store
        scheduler = Scheduler(
            store=store,
            settings=lambda: settings,
            ingest=ingest,
            adapters=gw.gateway.adapters,
            owner="t",
            clock=lambda: clock[0],
        )
        with capture_logs() as logs:
            for _ in range(4):
                await scheduler.tick()
                clock[0] += 1000
        assert seen == []
        warned = [e for e in logs if e["event"].startswith("schedule cannot post")]
        assert len(warned) == 1 and warned[0]["schedule_id"] == "s1"
        assert (await store.last_fires())["s1"] == clock[0] - 1000  # skipped, not retried
    finally:
        await gw.stop()
