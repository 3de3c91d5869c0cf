"""DingTalk turns at the app's real QPS, end to end: signed HTTP-mode messages into a gateway
whose DingTalk integration points at a fake DingTalk that enforces 20 calls/s per API (here
3/s; tests/fakes/limits.py). The robot sends of many turns at once are paced under it, so no
call is answered ``QpsLimitForAppkeyAndApi`` and every answer lands; a QpsLimit answer DingTalk
gives anyway pauses the API for the reset and the answer still lands."""

from __future__ import annotations

from typing import Any

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.limits import DingTalkLimits
from tests.support.dingtalk import robot_message, start_harness
from tests.support.waits import eventually

FAST = [{"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 4000}]


def answered(fake: FakeDingTalk, texts: list[str]) -> bool:
    seen = {m.get("text") for m in fake.sent()}
    return all(f"You said:\n> {t}" in seen for t in texts)


async def test_many_turns_at_once_stay_under_the_apps_qps_and_every_answer_lands(
    prefix: str, redis_client: Any
) -> None:
    fake = FakeDingTalk(limits=DingTalkLimits(per_second=3))
    await fake.start()
    _gw, h = await start_harness(prefix, fake, experts=FAST, platformLimits={"callsPerSecond": 3})
    try:
        texts = [f"m{i}" for i in range(8)]
        for i, text in enumerate(texts):  # eight people at once, each a direct chat
            status, _ = await h.post(robot_message(fake, text, sender=f"s{i}", webhook=False))
            assert status == 200
        await eventually(lambda: answered(fake, texts), timeout=30)
        assert fake.limits is not None
        assert fake.limits.throttled() == []
        sends = sorted(a.at_ms for a in fake.limits.answers if "batchSend" in a.path)
        assert len(sends) >= len(texts)
        assert all(sends[i + 3] - sends[i] >= 1000 for i in range(len(sends) - 3))
    finally:
        await h.close()
        await fake.stop()


async def test_a_qps_refusal_pauses_the_api_and_the_answer_still_lands(
    prefix: str, redis_client: Any
) -> None:
    fake = FakeDingTalk(limits=DingTalkLimits(enforce=False))  # records, refuses nothing
    await fake.start()
    _gw, h = await start_harness(prefix, fake, experts=FAST)
    try:
        fake.flow_controlled = 0
        fake.fail(
            "/v1.0/robot/oToMessages/batchSend",
            status=403,
            code="Forbidden.AccessDenied.QpsLimitForAppkeyAndApi",
            times=1,
        )
        await h.post(robot_message(fake, "throttled", webhook=False))
        await eventually(lambda: answered(fake, ["throttled"]), timeout=20)
        assert fake.limits is not None
        sends = [a for a in fake.limits.answers if "batchSend" in a.path]
        [refused] = [a for a in sends if a.status == 403]
        after = [a.at_ms for a in sends if a.status == 200 and a.at_ms > refused.at_ms]
        assert after and min(after) - refused.at_ms >= 950  # DingTalk names no reset: 1 s
    finally:
        await h.close()
        await fake.stop()
