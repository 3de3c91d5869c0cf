"""Nothing lost while Redis is down, end to end: the daemon against its own redis-server (which
the test stops and starts) and the fake platforms' long connections. DingTalk never pushes a
robot message or card callback again and the WeCom long connection never delivers a frame again
(the fakes behave so), so while Redis is unreachable those events wait in the local spool, are
acked, and are answered once, in order, when Redis is back."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.intake.spool import HEADER, MAGIC
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.wecom import FakeWeCom
from tests.support.dingtalk import dingtalk_config, robot_message
from tests.support.helpers import DaemonProcess, InProcessGateway, free_port
from tests.support.spool import OwnRedis, quoted, spool_files
from tests.support.waits import eventually
from tests.support.wecom import ECHO_FAST, aibot_click, aibot_message, integration

ROBOT = "/v1.0/im/bot/messages/get"
CARD = "/v1.0/card/instances/callback"


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[OwnRedis]:
    own = OwnRedis(tmp_path)
    await own.start()
    yield own
    await own.stop()


@pytest.fixture
async def gateways(redis: OwnRedis) -> AsyncIterator[list[InProcessGateway]]:
    started: list[InProcessGateway] = []
    yield started
    if not redis.running:  # a failed test may leave it stopped; shutdown wants it
        await redis.start()
    for gw in reversed(started):
        await gw.stop()


def own(config: dict[str, Any], redis: OwnRedis, data_dir: Path, **runtime: Any) -> None:
    config["redis"]["url"] = redis.url
    config["dataDir"] = str(data_dir)
    config["runtime"].update(runtime)


async def scrape(gw: InProcessGateway, name: str) -> float:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{gw.port}/metrics") as resp,
    ):
        text = await resp.text()
    [value] = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
    return float(value)


async def readyz_spool(gw: InProcessGateway) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{gw.port}/readyz") as resp,
    ):
        body: dict[str, Any] = await resp.json()
    return dict(body["spool"])


def spool_empty(gw: InProcessGateway) -> Any:
    async def check() -> bool:
        return (await readyz_spool(gw))["records"] == 0

    return check


# --- DingTalk stream ---------------------------------------------------------------------------
@pytest.fixture
async def fake_dt() -> AsyncIterator[FakeDingTalk]:
    fake = FakeDingTalk()
    await fake.start()
    yield fake
    await fake.stop()


async def dingtalk_gateway(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeDingTalk,
    redis: OwnRedis,
    data_dir: Path,
    runtime: dict[str, Any] | None = None,
    **options: Any,
) -> InProcessGateway:
    port = free_port()
    config = dingtalk_config(prefix, fake, port, connectionMode="stream", **options)
    own(config, redis, data_dir, **(runtime or {}))
    gw = InProcessGateway(config)
    gw.port = port
    await gw.start()
    gateways.append(gw)
    await eventually(lambda: fake.stream.connects >= 1)
    return gw


async def push_acked(fake: FakeDingTalk, topic: str, data: dict[str, Any]) -> dict[str, Any]:
    """One frame, waiting for its ack (frames are handled concurrently: this fixes the order)."""
    mid = await fake.push("CALLBACK", topic, data)
    [ack] = await eventually(lambda: fake.stream.acks.get(mid))
    return ack


def dt_answers(fake: FakeDingTalk) -> list[str]:
    return quoted([str(m["text"]) for m in fake.sent()])


async def test_dingtalk_messages_while_redis_is_down_are_answered_once_in_order(
    gateways: list[InProcessGateway],
    prefix: str,
    fake_dt: FakeDingTalk,
    redis: OwnRedis,
    tmp_path: Path,
) -> None:
    gw = await dingtalk_gateway(gateways, prefix, fake_dt, redis, tmp_path / "data")
    await redis.stop()
    two = robot_message(fake_dt, "two", msg_id="msg-two")
    frames = [robot_message(fake_dt, "one"), two, two, robot_message(fake_dt, "three")]
    for data in frames:  # "two" is delivered twice
        ack = await push_acked(fake_dt, ROBOT, data)
        assert ack["code"] == 200  # spooled, so acked: DingTalk would never push it again
    assert (await readyz_spool(gw))["records"] == 4
    assert await scrape(gw, "xgw_spool_records") == 4
    assert await scrape(gw, "xgw_spooled_total") == 4
    [spool] = spool_files(tmp_path / "data")
    assert spool.stat().st_size > 8
    assert fake_dt.sent() == []

    await redis.start()
    await eventually(lambda: dt_answers(fake_dt) == ["one", "two", "three"], timeout=30)
    await eventually(spool_empty(gw))
    # A message sent now is answered after anything a late second answer would have come in.
    await push_acked(fake_dt, ROBOT, robot_message(fake_dt, "four"))
    await eventually(lambda: "four" in dt_answers(fake_dt), timeout=15)
    assert dt_answers(fake_dt) == ["one", "two", "three", "four"]
    assert spool.stat().st_size == 8  # emptied
    assert await scrape(gw, "xgw_spool_replayed_total") == 4


async def test_dingtalk_card_click_while_redis_is_down_is_spooled_and_acted_on(
    gateways: list[InProcessGateway],
    prefix: str,
    fake_dt: FakeDingTalk,
    redis: OwnRedis,
    tmp_path: Path,
) -> None:
    await dingtalk_gateway(
        gateways, prefix, fake_dt, redis, tmp_path / "data", cardTemplateId="tpl.schema"
    )
    await push_acked(fake_dt, ROBOT, robot_message(fake_dt, "card please", group=True))
    created = await eventually(lambda: fake_dt.bodies("/v1.0/card/instances/createAndDeliver"))
    params = created[0]["cardData"]["cardParamMap"]
    await eventually(lambda: fake_dt.bodies("/v1.0/card/streaming"), timeout=15)
    await redis.stop()
    # The card's record (which chat it is in) cannot be read: the click's own params tell.
    button = {"action": "new", "conversation": params["conversation"], "turnId": params["turnId"]}
    click = {
        "type": "actionCallback",
        "outTrackId": created[0]["outTrackId"],
        "corpId": "dingcorp",
        "userId": "staff1",
        "content": json.dumps({"cardPrivateData": {"actionIds": ["new"], "params": button}}),
        "extension": "{}",
    }
    ack = await push_acked(fake_dt, CARD, click)
    assert ack["code"] == 200
    assert json.loads(ack["data"])["response"]["cardData"]["cardParamMap"]
    await redis.start()
    notice = await eventually(
        lambda: [m for m in fake_dt.sent() if "new conversation" in str(m["text"])], timeout=30
    )
    assert len(notice) == 1


async def test_a_full_spool_refuses_as_before_and_says_so(
    gateways: list[InProcessGateway],
    prefix: str,
    fake_dt: FakeDingTalk,
    redis: OwnRedis,
    tmp_path: Path,
) -> None:
    gw = await dingtalk_gateway(
        gateways, prefix, fake_dt, redis, tmp_path / "data", runtime={"spoolMaxBytes": 3000}
    )
    await redis.stop()
    codes = []
    for i in range(8):
        ack = await push_acked(fake_dt, ROBOT, robot_message(fake_dt, f"m{i}"))
        codes.append(ack["code"])
    kept = codes.count(200)
    assert 1 <= kept < 8 and codes == [200] * kept + [500] * (8 - kept)
    assert await scrape(gw, "xgw_spool_full") == 1
    assert await scrape(gw, "xgw_spool_refused_total") == 8 - kept
    assert (await readyz_spool(gw))["full"] is True
    await redis.start()
    expected = [f"m{i}" for i in range(kept)]
    await eventually(lambda: dt_answers(fake_dt) == expected, timeout=30)
    await eventually(spool_empty(gw))
    assert await scrape(gw, "xgw_spool_full") == 0
    # The refused ones are gone, as they were without a spool: DingTalk never pushes them again.
    await push_acked(fake_dt, ROBOT, robot_message(fake_dt, "after"))
    await eventually(lambda: "after" in dt_answers(fake_dt), timeout=15)
    assert dt_answers(fake_dt) == [*expected, "after"]


# --- WeCom aibot_ws ----------------------------------------------------------------------------
@pytest.fixture
async def fake_wc() -> AsyncIterator[FakeWeCom]:
    fake = FakeWeCom()
    await fake.start()
    yield fake
    await fake.stop()


def wc_answers(fake: FakeWeCom) -> list[str]:
    finals = [
        str(f["body"]["stream"]["content"])
        for f in fake.stream_frames()
        if f["body"]["stream"]["finish"]
    ]
    return quoted(finals)


async def test_wecom_long_connection_messages_while_redis_is_down_are_answered_once_in_order(
    gateways: list[InProcessGateway],
    prefix: str,
    fake_wc: FakeWeCom,
    redis: OwnRedis,
    tmp_path: Path,
) -> None:
    from tests.support.configs import base_config

    config = base_config(prefix)
    config["experts"] = [ECHO_FAST]
    config["integrations"] = [integration(fake_wc, "aibot_ws", pingIntervalSeconds=0.2)]
    own(config, redis, tmp_path / "data")
    gw = InProcessGateway(config)
    await gw.start()
    gateways.append(gw)
    await eventually(lambda: fake_wc.subscribes == 1)
    spooler = gw.gateway.spooler
    await redis.stop()

    def message(msg_id: str, text: str) -> dict[str, Any]:
        return aibot_message(msg_id, "text", {"content": text}, create_time=1700000000)

    # A click on an earlier card's Stop: the card is updated at once, the click kept.
    key = json.dumps({"action": "stop", "conversation": "wc|p2p:alice", "turnId": "t-old"})
    await fake_wc.push("aibot_event_callback", aibot_click("ev-0", key, "task-0"), "req-click")
    await eventually(lambda: [f for f in fake_wc.frames if f["cmd"] == "aibot_respond_update_msg"])
    sent = [("w-1", "one"), ("w-2", "two"), ("w-2", "two"), ("w-3", "three")]
    for n, (msg_id, text) in enumerate(sent, 2):
        await fake_wc.push("aibot_msg_callback", message(msg_id, text), f"req-{n}")
        await eventually(lambda n=n: spooler.spooled == n)
    assert not [f for f in fake_wc.frames if "send it again" in json.dumps(f)]
    assert wc_answers(fake_wc) == []

    await redis.start()
    await eventually(lambda: wc_answers(fake_wc) == ["one", "two", "three"], timeout=30)
    await fake_wc.push("aibot_msg_callback", message("w-4", "four"), "req-9")
    await eventually(lambda: "four" in wc_answers(fake_wc), timeout=15)
    assert wc_answers(fake_wc) == ["one", "two", "three", "four"]
    # The connection was kept all along (its owner lease could not be renewed meanwhile).
    assert fake_wc.subscribes == 1
    assert spooler.records == 0


# --- a replica that dies with a non-empty spool ------------------------------------------------
@pytest.mark.slow
async def test_a_replica_killed_with_a_spool_replays_it_when_it_starts_again(
    prefix: str, fake_dt: FakeDingTalk, redis: OwnRedis, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    config = dingtalk_config(prefix, fake_dt, free_port(), connectionMode="stream")
    own(config, redis, data)
    config["logging"] = {"level": "info", "format": "json"}
    # The dead replica's stream lease runs out before the new one may connect: keep it short.
    config["runtime"]["connectionLeaseSeconds"] = 2
    first = DaemonProcess(config, tmp_path, "first")
    second = DaemonProcess(config, tmp_path, "second")
    try:
        await first.start()
        await eventually(lambda: fake_dt.stream.connects == 1)
        await redis.stop()
        for text in ("one", "two", "three"):
            assert (await push_acked(fake_dt, ROBOT, robot_message(fake_dt, text)))["code"] == 200
        first.kill(signal.SIGKILL)
        assert first.proc is not None
        await asyncio.to_thread(first.proc.wait, 10)
        [spool] = spool_files(data)
        whole = spool.stat().st_size
        with spool.open("ab") as f:  # it died in the middle of writing a fourth record
            f.write(HEADER.pack(400, 0) + b'{"envelopeId":"')
        await redis.start()
        await second.start()
        await eventually(lambda: dt_answers(fake_dt) == ["one", "two", "three"], timeout=30)
        await eventually(lambda: spool.stat().st_size == len(MAGIC))
        await eventually(lambda: fake_dt.stream.connects == 2, timeout=10)
        log = [
            json.loads(line) for line in second.log_path.read_text().splitlines() if line[:1] == "{"
        ]
        [torn] = [e for e in log if "torn" in e.get("event", "")]
        assert torn["dropped_bytes"] == HEADER.size + 15 and torn["kept_records"] == 3
        assert whole > len(MAGIC)
        assert any(e.get("event") == "spooled events found; replaying them" for e in log)
    finally:
        await first.stop()
        await second.stop()


async def test_a_corrupt_length_mid_spool_sets_the_rest_aside_and_replays_what_is_before(
    prefix: str, fake_dt: FakeDingTalk, redis: OwnRedis, tmp_path: Path
) -> None:
    # A length that overshoots the end of the file looked like a torn last write: the acked
    # records after it were cut off for good. Now they are kept in <file>.damaged-<ms>.
    data = tmp_path / "data"
    config = dingtalk_config(prefix, fake_dt, free_port(), connectionMode="stream")
    own(config, redis, data)
    config["logging"] = {"level": "info", "format": "json"}
    config["runtime"]["connectionLeaseSeconds"] = 2
    first = DaemonProcess(config, tmp_path, "first")
    second = DaemonProcess(config, tmp_path, "second")
    try:
        await first.start()
        await eventually(lambda: fake_dt.stream.connects == 1)
        await redis.stop()
        for text in ("one", "two", "three"):
            assert (await push_acked(fake_dt, ROBOT, robot_message(fake_dt, text)))["code"] == 200
        first.kill(signal.SIGKILL)
        assert first.proc is not None
        await asyncio.to_thread(first.proc.wait, 10)
        [spool] = spool_files(data)
        raw = bytearray(spool.read_bytes())
        (length,) = HEADER.unpack_from(raw, len(MAGIC))[:1]
        second_at = len(MAGIC) + HEADER.size + length
        raw[second_at : second_at + 4] = (len(raw) * 2).to_bytes(4, "big")  # past the end
        spool.write_bytes(bytes(raw))
        await redis.start()
        await second.start()
        await eventually(lambda: dt_answers(fake_dt) == ["one"], timeout=30)
        await eventually(lambda: spool.stat().st_size == len(MAGIC))
        [aside] = list((data / "spool").glob("*.damaged-*"))
        assert aside.read_bytes() == bytes(raw[second_at:])  # "two" and "three", for a person
        log = [
            json.loads(line) for line in second.log_path.read_text().splitlines() if line[:1] == "{"
        ]
        [damaged] = [e for e in log if "damaged" in e.get("event", "")]
        assert damaged["level"] == "error" and damaged["kept_records"] == 1
        assert not [e for e in log if "torn" in e.get("event", "")]
    finally:
        await first.stop()
        await second.stop()


async def test_redis_restarted_the_first_commands_on_old_pooled_connections_succeed(
    redis: OwnRedis, tmp_path: Path, prefix: str
) -> None:
    """Regression: after a Redis restart every pooled connection was dead and its next command
    failed ("Connection closed by server"), failing the first turns after an outage."""
    from sessions import KeyBuilder, SessionStore, connect_redis

    handle = await connect_redis(redis.url, data_dir=tmp_path)
    store = SessionStore(client=handle.client, keys=KeyBuilder(prefix=prefix))
    try:
        await store.prepare()
        await asyncio.gather(*(handle.client.set(f"{prefix}:k{i}", i) for i in range(4)))
        await redis.stop()
        await redis.start()
        # Pooled connections (several) and the script pipe's own, with the scripts gone too.
        values = await asyncio.gather(*(handle.client.get(f"{prefix}:k{i}") for i in range(4)))
        assert values == ["0", "1", "2", "3"]
        binding = await store.open_or_continue(
            conversation="c",
            now_ms=1,
            timeout_ms=1000,
            new_session_id="s1",
            xpert_id="x",
            snapshot_hash="h",
        )
        assert binding.session_id == "s1"
    finally:
        await store.close()
        await handle.close()
