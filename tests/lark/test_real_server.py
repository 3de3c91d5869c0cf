"""The fake Lark refuses what the real server refuses (tests/fakes/lark.py names each source),
and the adapter copes: tenant-token renewal, rate limits with their headers, PATCH rules, the
CardKit sequence and streaming-mode rules, stickers (issue 10)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from adapters.lark.api import LarkApi, LarkApiError
from adapters.lark.events import message_envelope
from gateway.progress import Progress
from gateway.turns.render import CardRenderer
from tests.fakes.lark import FakeLark
from tests.support.lark import INTEGRATION, answer, final_card, message_event, reply_to
from tests.support.waits import eventually

CARD = {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": []}}


@pytest.fixture
async def api(fake: FakeLark) -> AsyncIterator[LarkApi]:
    client = LarkApi(base_url=fake.base_url, app_id="cli_test", app_secret="secret")
    yield client
    await client.close()


async def refused(coro: Any) -> LarkApiError:
    with pytest.raises(LarkApiError) as info:
        await coro
    return info.value


# --- tenant token --------------------------------------------------------------------------
async def test_the_same_token_while_30_minutes_remain_and_a_new_one_after_expiry(
    api: LarkApi, fake: FakeLark
) -> None:
    first = await api.token()
    assert await api.token(refresh=True) == first  # ≥ 30 min left: the same token
    await api.bot_info()
    fake.expire_tokens()
    # The cached token is now refused (99991663); the call renews it once and goes through.
    fake.receive(message_event(message_id="om_tok"))
    await api.add_reaction("om_tok", "Typing")
    assert len(fake.of("token")) == 3 and api._token is not None and api._token[0] != first


async def test_a_wrong_app_secret_is_refused_at_the_token(fake: FakeLark) -> None:
    client = LarkApi(base_url=fake.base_url, app_id="cli_test", app_secret="not-it")
    try:
        error = await refused(client.bot_info())
    finally:
        await client.close()
    assert error.code == 10014


async def test_a_call_without_a_token_is_refused(fake: FakeLark) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{fake.base_url}/open-apis/bot/v3/info") as resp:
            body = await resp.json()
    assert body["code"] == 99991661


# --- rate limits ---------------------------------------------------------------------------
async def test_99991400_comes_as_429_with_the_reset_header_and_the_client_waits_for_it(
    api: LarkApi, fake: FakeLark
) -> None:
    fake.fail("create", code=99991400, reset=1)
    started = time.monotonic()
    await api.create("chat_id", "oc_1", "text", '{"text":"hi"}', "u-rl-1")
    assert time.monotonic() - started >= 1.0 and api.retries == 1
    async with aiohttp.ClientSession() as http:
        fake.fail("create", code=99991400, reset=52)
        token = await api.token()
        async with http.post(
            f"{fake.base_url}/open-apis/im/v1/messages",
            params={"receive_id_type": "chat_id"},
            json={"receive_id": "oc_1", "msg_type": "text", "content": '{"text":"x"}'},
            headers={"Authorization": f"Bearer {token}"},
        ) as resp:
            assert resp.status == 429
            assert resp.headers["x-ogw-ratelimit-reset"] == "52"
            assert "x-ogw-ratelimit-limit" in resp.headers


async def test_more_than_five_patches_a_second_on_one_message_get_230020(
    api: LarkApi, fake: FakeLark
) -> None:
    mid = await api.create("chat_id", "oc_1", "interactive", json.dumps(CARD), "u-qps")
    api.attempts = 1  # see the refusal itself, not the client's retry
    for _ in range(5):
        await api.patch(mid, json.dumps(CARD))
    error = await refused(api.patch(mid, json.dumps(CARD)))
    assert error.code == 230020 and error.status == 400 and error.rate_limited


async def test_patch_needs_update_multi_before_and_after_and_only_on_the_apps_cards(
    api: LarkApi, fake: FakeLark
) -> None:
    plain = {"schema": "2.0", "body": {"elements": []}}  # update_multi not declared
    mid = await api.create("chat_id", "oc_1", "interactive", json.dumps(plain), "u-um")
    assert (await refused(api.patch(mid, json.dumps(CARD)))).code == 230099
    mid = await api.create("chat_id", "oc_1", "interactive", json.dumps(CARD), "u-um2")
    assert (await refused(api.patch(mid, json.dumps(plain)))).code == 230099
    fake.receive(message_event(message_id="om_user1"))
    assert (await refused(api.patch("om_user1", json.dumps(CARD)))).code == 230001
    off = {**CARD, "config": {"update_multi": False}}  # JSON 2.0 supports only true
    error = await refused(api.reply("om_user1", "interactive", json.dumps(off), "u-off"))
    assert error.code == 230099
    assert (await refused(api.reply("om_nowhere", "text", '{"text":"x"}', "u-x"))).code == 230001


# --- CardKit -------------------------------------------------------------------------------
def _entity(*, streaming: bool) -> dict[str, Any]:
    elements = [
        {"tag": "markdown", "element_id": "answer", "content": "…"},
        {"tag": "button", "element_id": "btn_stop", "text": {"tag": "plain_text", "content": "S"}},
    ]
    config = {"update_multi": True, "streaming_mode": streaming}
    return {"schema": "2.0", "config": config, "body": {"elements": elements}}


async def test_cardkit_refuses_a_sequence_that_does_not_increase_across_endpoints(
    api: LarkApi, fake: FakeLark
) -> None:
    cid = await api.create_card(_entity(streaming=True))
    await api.stream_text(cid, "answer", "a", 1, "u1")
    await api.card_settings(cid, {"streaming_mode": True}, 2)
    for seq in (2, 1):
        assert (await refused(api.stream_text(cid, "answer", "ab", seq, f"u{seq}"))).code == 300317
    assert (await refused(api.replace_card(cid, _entity(streaming=True), 2))).code == 300317
    await api.replace_card(cid, _entity(streaming=True), 3)
    assert fake.cards[cid]["sequences"] == [1, 2, 3] and fake.cards[cid]["rejected"] == [2, 1, 2]


async def test_cardkit_streams_text_only_while_streaming_mode_is_on(
    api: LarkApi, fake: FakeLark
) -> None:
    cid = await api.create_card(_entity(streaming=False))
    assert (await refused(api.stream_text(cid, "answer", "a", 1, "u1"))).code == 300309
    await api.card_settings(cid, {"streaming_mode": True}, 1)
    assert (await refused(api.stream_text(cid, "btn_stop", "a", 2, "u2"))).code == 300310
    await api.stream_text(cid, "answer", "a", 3, "u3")
    fake.end_streaming_by_timeout(cid)
    assert (await refused(api.stream_text(cid, "answer", "ab", 4, "u4"))).code == 200850
    v1 = {"config": {"update_multi": True}, "elements": []}
    assert (await refused(api.create_card(v1))).code == 300303
    assert (await refused(api.stream_text("7000", "answer", "a", 9, "u9"))).code == 200740


async def test_a_streaming_timeout_mid_turn_falls_back_to_patch_and_the_answer_lands(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark(slow=True, cardMode="cardkit")
    await lark.post(message_event("a long streamed answer " * 3, message_id="om_to1"))
    await eventually(lambda: fake.of("card_content"), timeout=10)
    [cid] = fake.cards
    fake.end_streaming_by_timeout(cid)
    card = await eventually(final_card(fake, "om_to1"), timeout=20)
    assert (
        answer(card) == "You said:\n> " + "a long streamed answer " * 2 + "a long streamed answer"
    )
    assert fake.cards[cid]["streaming"] is False


# --- a first render that is already final (issue 10, item 4) ---------------------------------
async def test_a_cardkit_card_whose_first_render_is_final_is_not_left_streaming(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    """A turn given up (or failing at once) renders its card first and last in one go: the
    card must not stay in streaming mode, which no later update would close."""
    lark = await make_lark(cardMode="cardkit")
    adapter = lark.gw.gateway.adapters[INTEGRATION]
    event = message_event("doomed", message_id="om_f1")
    fake.receive(event)
    reply_to_env = message_envelope(INTEGRATION, event, "ou_bot")
    final = Progress(turn_id="t-final", conversation=f"{INTEGRATION}|p2p:oc_p2p1").finish(
        "error", "This message could not be processed after several attempts."
    )
    renderer = CardRenderer(
        adapter=adapter, reply_to=reply_to_env, interval_ms=100, idempotency_key="t-final"
    )
    await renderer.close(final)  # what the runner's give-up path does
    [cid] = fake.cards
    assert fake.cards[cid]["streaming"] is False
    assert "streaming_mode" not in fake.of("card_create")[0].body["data"]
    [mid] = reply_to(fake, "om_f1")
    shown = fake.card_of(mid)
    assert shown["header"]["title"]["content"] == "Something went wrong"
    assert {e["element_id"] for e in shown["body"]["elements"] if e["tag"] == "button"} == {
        "btn_retry",
        "btn_new",
    }


# --- stickers (issue 10, item 3) -----------------------------------------------------------
async def test_a_sticker_reaches_the_expert_as_text_and_nothing_is_downloaded(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark()
    event = message_event(
        message_id="om_st1", message_type="sticker", content={"file_key": "v2_sticker_1"}
    )
    status, _ = await lark.post(event)
    assert status == 200
    card = await eventually(final_card(fake, "om_st1"))
    assert answer(card) == "You said:\n> [sticker]" and fake.of("resource") == []


async def test_lark_refuses_a_sticker_download_and_a_key_of_another_message(
    api: LarkApi, fake: FakeLark
) -> None:
    fake.receive(
        message_event(message_id="om_st2", message_type="sticker", content={"file_key": "stk"})
    )
    error = await refused(api.resource("om_st2", "stk", "image", max_bytes=1024))
    assert error.code == 234043 and len(fake.of("resource")) == 1  # refused once, not retried
    fake.receive(
        message_event(message_id="om_im2", message_type="image", content={"image_key": "img2"})
    )
    assert await api.resource("om_im2", "img2", "image", max_bytes=1024) is not None
    assert (await refused(api.resource("om_im2", "img9", "image", max_bytes=1024))).code == 234003
