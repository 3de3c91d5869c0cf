"""Issue 25: a captured, signed Lark webhook cannot be replayed past the timestamp window.

Lark signs ``sha256(timestamp + nonce + encryptKey + body)`` (docs/lark.md, "Signature and
encryption"; lark-oapi's ``EventDispatcherHandler._verify_sign`` reads the headers
``X-Lark-Request-Timestamp`` and
``X-Lark-Request-Nonce`` and joins them with nothing between). The join hides where the timestamp
ends, so a captured request re-sent with its timestamp moved into the nonce still signs the same.
With an encryptKey a signed request must carry a numeric timestamp, always checked."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from adapters.lark.crypto import EventCipher
from tests.fakes.lark import FakeLark
from tests.support.lark import (
    ENCRYPT_KEY,
    LarkHarness,
    card_click,
    message_event,
    sealed,
    stored_keys,
)

WEEK = 7 * 86_400


def moved(headers: dict[str, str], how: str) -> dict[str, str]:
    """The captured headers with the timestamp folded into the nonce: the same signed string."""
    ts = headers["X-Lark-Request-Timestamp"]
    out = dict(headers, **{"X-Lark-Request-Nonce": ts + headers["X-Lark-Request-Nonce"]})
    if how == "absent":
        del out["X-Lark-Request-Timestamp"]
    elif how == "empty":
        out["X-Lark-Request-Timestamp"] = ""
    return out


@pytest.mark.parametrize("how", ["absent", "empty"])
async def test_a_week_old_message_with_its_timestamp_in_the_nonce_is_401(
    lark: LarkHarness, fake: FakeLark, redis_client: aioredis.Redis, prefix: str, how: str
) -> None:
    event = message_event("replayed", message_id="om_replay1")
    fake.receive(event)
    body, captured = sealed(event, timestamp=int(time.time()) - WEEK)
    assert (await lark.post_raw(body, captured))[0] == 401  # as captured: stale
    status, answer_body = await lark.post_raw(body, moved(captured, how))
    assert status == 401 and "timestamp" in answer_body["error"]
    assert await stored_keys(redis_client, prefix) == []
    assert fake.of("reply") == []


async def test_a_fresh_message_without_its_timestamp_is_401_too(
    lark: LarkHarness, fake: FakeLark, redis_client: aioredis.Redis, prefix: str
) -> None:
    """Not only stale ones: a signed request never skips the window."""
    event = message_event("no clock", message_id="om_replay2")
    fake.receive(event)
    body, headers = sealed(event)
    assert (await lark.post_raw(body, moved(headers, "absent")))[0] == 401
    assert await stored_keys(redis_client, prefix) == []


@pytest.mark.parametrize("bad", ["abc", "1e9", "-1700000000", " 1700000000", "9" * 5000])
async def test_a_timestamp_that_is_not_seconds_is_401_not_500(
    lark: LarkHarness, fake: FakeLark, bad: str
) -> None:
    """Signed with that very timestamp, so only the timestamp check can refuse it."""
    event = message_event("odd clock")
    fake.receive(event)
    body, headers = sealed(event)
    headers["X-Lark-Request-Timestamp"] = bad
    headers["X-Lark-Signature"] = EventCipher(ENCRYPT_KEY).signature(bad, "n0nce", body)
    status, answer_body = await lark.post_raw(body, headers)
    assert status == 401 and "timestamp" in answer_body["error"]


async def test_a_replayed_card_click_is_401(lark: LarkHarness, fake: FakeLark) -> None:
    """Card callbacks (``card.action.trigger``) come to the same route and are held alike."""
    value: dict[str, Any] = {
        "conversation": "lark-main:oc_p2p1",
        "turnId": "t1",
        "action": "stop",
        "chatType": "p2p",
    }
    click = card_click(value, message_id="om_card1")
    body, captured = sealed(click, timestamp=int(time.time()) - WEEK)
    status, answer_body = await lark.post_raw(body, moved(captured, "absent"))
    assert status == 401 and "timestamp" in answer_body["error"]
