"""Lark end to end: signed, encrypted webhooks through the daemon (real Redis, echo expert) to the
fake Lark OpenAPI; verification failures; dedup; callbacks; rate limits; CardKit (issue 3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from gateway.envelope import Chat, Envelope, Sender
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import (
    INTEGRATION,
    TOKEN,
    LarkHarness,
    answer,
    bot_mention,
    final_card,
    lark_config,
    message_event,
    reply_to,
    sealed,
    stored_keys,
)
from tests.support.waits import eventually


async def test_signed_encrypted_message_gets_one_quoting_card_patched_to_done(
    lark: LarkHarness, fake: FakeLark
) -> None:
    event = message_event("hello there", message_id="om_user1")
    status, body = await lark.post(event)
    assert (status, body) == (200, {})
    card = await eventually(final_card(fake, "om_user1"))
    assert answer(card) == "You said:\n> hello there"
    assert card["header"]["template"] == "green"
    [reply] = fake.of("reply")
    assert reply.path == "/open-apis/im/v1/messages/om_user1/reply"  # quotes the message
    assert reply.body["msg_type"] == "interactive" and reply.body["uuid"]
    assert fake.of("patch"), "the card is updated in place"
    buttons = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    value = buttons[0]["behaviors"][0]["value"]
    assert value["action"] == "new" and value["conversation"].startswith(INTEGRATION)
    # The typing reaction was on the user's message while working, and is gone now.
    [added] = fake.of("reaction_add")
    assert added.path.endswith("/om_user1/reactions")
    await eventually(lambda: fake.of("reaction_delete"))
    assert fake.reactions == {}


async def test_url_verification_encrypted_and_plain(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    challenge = {"type": "url_verification", "challenge": "c-123", "token": TOKEN}
    lark = await make_lark()
    body, headers = sealed(challenge)
    assert await lark.post_raw(body, headers) == (200, {"challenge": "c-123"})
    unsigned = {"Content-Type": "application/json"}  # the SDK answers it on the token alone
    assert await lark.post_raw(body, unsigned) == (200, {"challenge": "c-123"})
    wrong = dict(challenge, token="nope")
    assert (await lark.post_raw(*sealed(wrong)))[0] == 401
    plain = await make_lark(encryptKey=None)
    raw = json.dumps(challenge).encode()
    assert await plain.post_raw(raw, {"Content-Type": "application/json"}) == (
        200,
        {"challenge": "c-123"},
    )


@pytest.mark.parametrize(
    "tamper",
    ["signature", "token", "stale", "garbage", "not_json_inside", "unsigned", "wrong_key"],
)
async def test_bad_input_is_4xx_and_nothing_is_stored(
    lark: LarkHarness, fake: FakeLark, redis_client: aioredis.Redis, prefix: str, tamper: str
) -> None:
    event = message_event("should not arrive")
    if tamper == "signature":
        body, headers = sealed(event)
        headers["X-Lark-Signature"] = "0" * 64
    elif tamper == "token":
        body, headers = sealed(message_event("x", token="forged"))
    elif tamper == "stale":
        body, headers = sealed(event, timestamp=1_700_000_000)
    elif tamper == "garbage":
        body, headers = b"\x00not json{", {"Content-Type": "application/json"}
    elif tamper == "not_json_inside":
        body, headers = sealed(b"hello world")
    elif tamper == "unsigned":
        body, headers = sealed(event)
        del headers["X-Lark-Signature"]
    else:
        body, headers = sealed(event, key="another key")
    status, answer_body = await lark.post_raw(body, headers)
    assert status in (400, 401) and "error" in answer_body
    expected = 400 if tamper in ("garbage", "not_json_inside") else 401
    assert status == expected
    assert await stored_keys(redis_client, prefix) == []
    assert fake.of("reply") == []


async def test_unknown_integration_is_404(lark: LarkHarness) -> None:
    body, headers = sealed(message_event())
    async with lark.http.post(lark.url + "-nope", data=body, headers=headers) as resp:
        assert resp.status == 404


async def test_same_event_three_times_gets_one_reply(lark: LarkHarness, fake: FakeLark) -> None:
    event = message_event("once only", message_id="om_dup")
    for _ in range(3):
        assert (await lark.post(event))[0] == 200
    await eventually(final_card(fake, "om_dup"))
    assert (await lark.post(event))[0] == 200  # a late retry after the turn
    assert len(reply_to(fake, "om_dup")) == 1
    assert len(fake.of("reply")) == 1


async def test_group_message_needs_a_mention_of_this_bot(lark: LarkHarness, fake: FakeLark) -> None:
    other = {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob"}
    quiet = message_event(
        "@_user_2 lunch?", chat_id="oc_g1", chat_type="group", message_id="om_g0", mentions=[other]
    )
    assert (await lark.post(quiet))[0] == 200
    asked = message_event(
        "@_user_1 summarize for @_user_2",
        chat_id="oc_g1",
        chat_type="group",
        message_id="om_g1",
        mentions=[bot_mention(), other],
    )
    assert (await lark.post(asked))[0] == 200
    card = await eventually(final_card(fake, "om_g1"))
    assert answer(card) == "You said:\n> summarize for @Bob"
    assert reply_to(fake, "om_g0") == []


async def test_rate_limits_are_retried_and_the_final_state_lands(
    lark: LarkHarness, fake: FakeLark
) -> None:
    fake.fail("reply", status=429, code=99991400, times=2)
    fake.fail("patch", code=230020, times=3)
    await lark.post(message_event("busy day", message_id="om_r1"))
    card = await eventually(final_card(fake, "om_r1"))
    assert answer(card) == "You said:\n> busy day"
    assert len(reply_to(fake, "om_r1")) == 1
    assert len(fake.of("reply")) == 3  # two refused, one sent; uuid kept it single


async def test_card_error_degrades_to_a_text_reply(lark: LarkHarness, fake: FakeLark) -> None:
    fake.fail("reply", status=400, code=230099, times=1)
    await lark.post(message_event("plain please", message_id="om_t1"))

    def texts() -> list[str]:
        return [
            json.loads(fake.messages[m]["content"])["text"]
            for m in reply_to(fake, "om_t1")
            if fake.messages[m]["msg_type"] == "text"
        ]

    await eventually(lambda: "You said:\n> plain please" in texts())


async def test_updates_stay_under_five_per_second_per_message(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark(slow=True)
    await lark.post(message_event("count the updates " * 4, message_id="om_q1"))
    await eventually(final_card(fake, "om_q1"), timeout=20)
    times = [c.at for c in fake.of("patch")]
    assert len(times) >= 5
    for i in range(len(times) - 5):
        assert times[i + 5] - times[i] >= 0.99, "more than 5 updates within one second"


async def test_cardkit_streams_with_strictly_increasing_sequence(
    make_lark: Callable[..., Any], fake: FakeLark
) -> None:
    lark = await make_lark(slow=True, cardMode="cardkit")
    await lark.post(message_event("stream this", message_id="om_k1"))
    card = await eventually(final_card(fake, "om_k1"), timeout=20)
    assert answer(card) == "You said:\n> stream this"
    [entity] = fake.cards.values()
    seqs = entity["sequences"]
    assert seqs == sorted(set(seqs)) and entity["rejected"] == []
    assert fake.of("card_content"), "the answer streamed into its element"
    assert entity["streaming"] is False, "streaming mode closed at the end"
    assert fake.of("patch") == []


async def test_cardkit_failure_falls_back_to_message_cards(
    lark: LarkHarness, fake: FakeLark, make_lark: Callable[..., Any]
) -> None:
    ck = await make_lark(cardMode="cardkit")
    fake.fail("card_create", status=400, code=300100)
    await ck.post(message_event("no cardkit today", message_id="om_k2"))
    card = await eventually(final_card(fake, "om_k2"))
    assert answer(card) == "You said:\n> no cardkit today"
    assert fake.of("patch")


async def test_readyz_shows_the_bot_identified(lark: LarkHarness) -> None:
    url = f"http://127.0.0.1:{lark.gw.port}/readyz"
    async with lark.http.get(url) as resp:
        body = await resp.json()
    assert resp.status == 200
    assert body["checks"][INTEGRATION]["botIdentified"] is True


async def test_a_turn_with_no_message_to_quote_posts_its_card_to_the_chat(
    lark: LarkHarness, fake: FakeLark
) -> None:
    """A scheduled turn (an Envelope of kind schedule, as a scheduler would hand to the pipeline)
    has no message to reply to: its card goes to the chat (receive_id_type=chat_id)."""
    env = Envelope(
        integration_id=INTEGRATION,
        platform="lark",
        event_id="schedule-daily-1",
        kind="schedule",
        chat=Chat(id="oc_sched", type="group"),
        sender=Sender(id="scheduler"),
        text="daily report",
        bot_mentioned=True,
    )
    outcome = await lark.gw.gateway.pipeline.ingest(env)
    assert outcome.status == "queued"
    [create] = await eventually(lambda: fake.of("create") or None)
    assert create.query == {"receive_id_type": "chat_id"}
    assert create.body["receive_id"] == "oc_sched" and create.body["msg_type"] == "interactive"

    def done() -> Any:
        [message_id] = [m for m, v in fake.messages.items() if v["chat_id"] == "oc_sched"]
        card = fake.card_of(message_id)
        return card if card["header"]["title"]["content"] == "Done" else None

    card = await eventually(done)
    assert "daily report" in answer(card)
    assert not fake.of("reply") and not fake.of("reaction_add")


async def test_the_senders_email_is_looked_up_once_and_offered_as_sys_user_email(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    model = FakeOpenAI()
    async for url in serve(model.app()):
        config = lark_config(prefix, fake, xpertId="gpt")
        config["experts"] = [
            {
                "id": "gpt",
                "kind": "openai",
                "baseUrl": url + "/v1",
                "apiKey": OPENAI_KEY,
                "model": "qwen2.5",
                "systemPrompt": "You talk to <{{sys.user_email}}>.",
            }
        ]
        gw = InProcessGateway(config)
        await gw.start()
        lark = LarkHarness(fake, gw)
        try:
            fake.users["ou_alice"] = {"open_id": "ou_alice", "email": "alice@example.com"}
            await lark.post(message_event("hi", message_id="om_e1"))
            await eventually(lambda: len(model.requests) == 1, timeout=15)
            await lark.post(message_event("again", message_id="om_e2"))
            await eventually(lambda: len(model.requests) == 2, timeout=15)
            systems = [r["messages"][0] for r in model.requests]
            assert all(m["content"] == "You talk to <alice@example.com>." for m in systems)
            [lookup] = fake.of("user")  # the second turn read it from Redis
            assert lookup.path == "/open-apis/contact/v3/users/ou_alice"
            # A sender the app may not see (no contact scope, outside its range): no email, and
            # not asked again on every turn either.
            await lark.post(message_event("one", message_id="om_e3", sender="ou_bob"))
            await eventually(lambda: len(model.requests) == 3, timeout=15)
            await lark.post(message_event("two", message_id="om_e4", sender="ou_bob"))
            await eventually(lambda: len(model.requests) == 4, timeout=15)
            assert model.requests[3]["messages"][0]["content"] == "You talk to <>."
            assert len(fake.of("user")) == 2
        finally:
            await lark.close()


async def test_a_refused_reply_is_one_log_line_with_its_code(
    lark: LarkHarness, fake: FakeLark
) -> None:
    """Issue 25: every reply refused (10014, the app not authorized, DOC-ERR): the turn fails
    with one warning that carries the code, never a traceback or an error-level line."""
    for op in ("reply", "create"):
        fake.fail(op, code=10014, times=1000)
    with capture_logs() as logs:
        await lark.post(message_event("refused", message_id="om_x1"))
        failed = await eventually(
            lambda: [e for e in logs if "a platform API call failed" in str(e["event"])],
            timeout=30,
        )
        await eventually(lambda: [e for e in logs if str(e["event"]).startswith("turn")])
    assert failed[0]["code"] == 10014 and failed[0]["log_level"] == "warning"
    noisy = [e for e in logs if e.get("exc_info") or e["log_level"] in ("error", "critical")]
    assert noisy == []
