"""WeCom self-built app end to end: official sample vectors, the 32-byte padding trap, dedup,
bad callbacks, template card + update + markdown answer, Stop clicks, token and rate errors."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.metrics import scrape
from tests.support.waits import eventually
from tests.support.wecom import (
    AES_KEY,
    ECHO_SLOW,
    SAMPLE_BODY,
    SAMPLE_QUERY,
    SAMPLE_TIME,
    VERIFY,
    app_message,
    card_click,
    encrypt_xml,
    post,
    start_gateway,
    url,
)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def app_gateway(
    gateways: list[Any], prefix: str, fake: FakeWeCom, **kw: Any
) -> InProcessGateway:
    gw = await start_gateway(prefix, fake, **kw)
    gateways.append(gw)
    return gw


async def stored_keys(redis_client: aioredis.Redis, prefix: str) -> set[str]:
    return {k async for k in redis_client.scan_iter(match=f"{prefix}:*") if ":hb" not in k}


async def test_url_verification_answers_the_official_echostr(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake, clock=SAMPLE_TIME)
    async with http.get(url(gw), params=VERIFY) as resp:
        assert resp.status == 200
        assert await resp.text() == "1616140317555161061"
    async with http.get(url(gw), params={**VERIFY, "msg_signature": "0" * 40}) as resp:
        assert resp.status == 401


async def test_official_sample_message_gets_a_card_then_the_answer(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake, clock=SAMPLE_TIME)
    status, body = await post(http, url(gw), SAMPLE_QUERY, SAMPLE_BODY)
    assert (status, body) == (200, "")
    await eventually(lambda: fake.texts("mycreate"))
    assert fake.texts("mycreate") == ["You said:\n> hello"]
    [card] = fake.cards()
    assert card["card_type"] == "button_interaction"
    [stop] = card["button_list"]
    assert stop["text"] == "Stop"
    assert json.loads(stop["key"])["action"] == "stop"
    assert json.loads(stop["key"])["turnId"]
    # The card is updated exactly once, with the response_code message/send returned.
    [update] = fake.updates
    assert update["template_card"]["task_id"] == card["task_id"]
    assert update["template_card"]["main_title"]["title"] == "Done"
    assert fake.sent[0]["touser"] == "mycreate" and fake.sent[0]["agentid"] == 218
    assert fake.token_fetches == 1


async def test_message_with_32_byte_padding_is_read(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    key = base64.b64decode(AES_KEY + "=")
    for n in range(1, 40):
        text = "p" * n
        query, body = encrypt_xml(app_message("zoe", text, "7001"))
        encrypted = body.split("<Encrypt><![CDATA[")[1].split("]]>")[0]
        decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
        plain = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
        if plain[-1] == 32:  # a whole padding block: stock 16-byte unpadders reject this
            break
    else:
        raise AssertionError("no length gave 32 bytes of padding")
    assert await post(http, url(gw), query, body) == (200, "")
    await eventually(lambda: fake.texts("zoe"))
    assert fake.texts("zoe") == [f"You said:\n> {text}"]


async def test_duplicate_msgid_gets_one_reply(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    query, body = encrypt_xml(app_message("amy", "once", "9001"))
    assert await post(http, url(gw), query, body) == (200, "")
    assert await post(http, url(gw), query, body) == (200, "")
    await eventually(lambda: fake.texts("amy"))
    query, body = encrypt_xml(app_message("amy", "once", "9001"), nonce="other")
    assert await post(http, url(gw), query, body) == (200, "")
    await gw.idle()
    assert fake.texts("amy") == ["You said:\n> once"]
    assert len(fake.cards()) == 1


@pytest.mark.parametrize(
    "case",
    ["bad_signature", "wrong_receive_id", "garbage_xml", "stale", "garbage_inner", "no_query"],
)
async def test_bad_callbacks_are_refused_and_nothing_is_stored(
    case: str,
    gateways: list[Any],
    prefix: str,
    fake: FakeWeCom,
    http: aiohttp.ClientSession,
    redis_client: aioredis.Redis,
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    before = await stored_keys(redis_client, prefix)
    query, body = encrypt_xml(app_message("eve", "hi", "666"))
    expected = 400
    if case == "bad_signature":
        query["msg_signature"] = "f" * 40
        expected = 401
    elif case == "wrong_receive_id":
        query, body = encrypt_xml(app_message("eve", "hi", "666"), corp_id="wwsomeoneelse")
    elif case == "garbage_xml":
        body = "<xml><Encrypt>"
    elif case == "stale":
        query, body = encrypt_xml(app_message("eve", "hi", "666"), timestamp=1_000_000_000)
        expected = 401
    elif case == "garbage_inner":
        query, body = encrypt_xml("not xml at all <<<")
    elif case == "no_query":
        query = {}
    status, text = await post(http, url(gw), query, body)
    assert status == expected and len(text) < 100
    await gw.idle()
    assert await stored_keys(redis_client, prefix) == before
    assert fake.sent == []


async def test_unknown_integration_is_404(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    query, body = encrypt_xml(app_message("eve", "hi", "667"))
    assert (await post(http, url(gw, "nope"), query, body))[0] == 404


async def test_stop_click_stops_the_turn_and_updates_the_card_with_the_clicks_code(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake, expert=ECHO_SLOW)
    query, body = encrypt_xml(app_message("bob", "a long question " * 5, "8001"))
    assert await post(http, url(gw), query, body) == (200, "")
    [card] = await eventually(fake.cards)
    code = fake.issue_code()
    click = card_click("bob", card["button_list"][0]["key"], card["task_id"], code, 1_700_000_000)
    query, body = encrypt_xml(click)
    assert await post(http, url(gw), query, body) == (200, "")
    assert await post(http, url(gw), query, body) == (200, "")  # a retried click: no effect
    [update] = await eventually(lambda: fake.updates)
    assert update["response_code"] == code
    assert update["template_card"]["main_title"]["title"] == "Stopped"
    assert [b["text"] for b in update["template_card"]["button_list"]] == ["New conversation"]
    await gw.idle()
    assert len(fake.updates) == 1
    assert all("stopped" in t for t in fake.texts("bob"))


async def test_confirm_flow_updates_the_card_at_each_stage(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    query, body = encrypt_xml(app_message("cat", "deploy [confirm]", "8101"))
    assert await post(http, url(gw), query, body) == (200, "")
    [waiting] = await eventually(lambda: fake.updates)
    buttons = waiting["template_card"]["button_list"]
    assert [b["text"] for b in buttons] == ["Confirm", "Reject"]
    code = fake.issue_code()
    click = card_click("cat", buttons[0]["key"], waiting["template_card"]["task_id"], code, 1_700)
    query, body = encrypt_xml(click)
    assert await post(http, url(gw), query, body) == (200, "")
    await eventually(lambda: len(fake.updates) == 2)
    assert fake.updates[1]["response_code"] == code
    assert fake.updates[1]["template_card"]["main_title"]["title"] == "Done"
    await eventually(lambda: fake.texts("cat"))


@pytest.mark.parametrize(("how", "errcode"), [("expired", 42001), ("unknown", 40014)])
async def test_a_refused_token_is_refreshed_and_the_call_retried_once(
    how: str,
    errcode: int,
    gateways: list[Any],
    prefix: str,
    fake: FakeWeCom,
    http: aiohttp.ClientSession,
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    query, body = encrypt_xml(app_message("dan", "first", "8201"))
    await post(http, url(gw), query, body)
    await eventually(lambda: fake.texts("dan"))
    if how == "expired":
        fake.expire_token()  # WeCom ended the token early: 42001
    else:
        fake.tokens.clear()  # a token WeCom never issued (or no longer knows): 40014
    query, body = encrypt_xml(app_message("dan", "second", "8202"))
    await post(http, url(gw), query, body)
    await eventually(lambda: len(fake.texts("dan")) == 2)
    assert fake.token_fetches == 2
    assert fake.texts("dan")[1] == "You said:\n> second"
    assert [code for _, code in fake.refusals] == [errcode]


async def test_frequency_limit_backs_off_and_delivers(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    # One message/send a (1.5 s) minute: the answer after the card hits 45009, and WeCom keeps
    # the API blocked for the rest of that minute (doc 90454); the backoff outlasts it.
    fake.limit("message/send", per_minute=1, minute_s=1.5)
    query, body = encrypt_xml(app_message("fay", "limited", "8301"))
    await post(http, url(gw), query, body)
    await eventually(lambda: fake.texts("fay"), timeout=15)
    assert len(fake.cards()) == 1 and fake.texts("fay") == ["You said:\n> limited"]
    assert fake.refusals and set(fake.refusals) == {("message/send", 45009)}


def unmarked(parts: list[str]) -> str:
    """The parts joined, each without its marker (i/n) (gateway/edge/parts.py)."""
    n = len(parts)
    return "".join(p.removesuffix(f"\n\n({i}/{n})") for i, p in enumerate(parts, start=1))


async def test_long_answer_is_split_to_the_markdown_limit(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    gw = await app_gateway(gateways, prefix, fake)
    text = "\n".join("第" + str(i) + "行" + "长" * 60 for i in range(40))
    query, body = encrypt_xml(app_message("gus", text, "8401"))
    await post(http, url(gw), query, body)
    parts = await eventually(lambda: len(fake.texts("gus")) > 1 and fake.texts("gus"))
    await gw.idle()
    parts = fake.texts("gus")
    assert fake.dropped == []  # within WeCom's 30 messages a minute per member (doc 90454)
    assert all(len(p.encode()) <= 2048 for p in parts)
    assert unmarked(parts) == "You said:\n" + "\n".join(f"> {line}" for line in text.split("\n"))


def _xml(kind: str, fields: str, msg_id: str = "<MsgId>55</MsgId>") -> str:
    return (
        "<xml><ToUserName>c</ToUserName><FromUserName>ivy</FromUserName>"
        f"<CreateTime>1700000000</CreateTime><MsgType>{kind}</MsgType>{fields}{msg_id}"
        "<AgentID>218</AgentID></xml>"
    )


@pytest.mark.parametrize(
    ("xml", "text", "attachment"),
    [
        (_xml("image", "<PicUrl>http://p/1</PicUrl><MediaId>m1</MediaId>"), "[image]", "image"),
        (
            _xml("voice", "<MediaId>m2</MediaId><Format>amr</Format><Recognition>hi</Recognition>"),
            "hi",
            "audio",
        ),
        (_xml("file", "<MediaId>m3</MediaId><FileName>a.pdf</FileName>"), "[file] a.pdf", "file"),
        (
            _xml(
                "location",
                "<Location_X>23.1</Location_X><Location_Y>113.3</Location_Y><Label>Office</Label>",
            ),
            "[location] Office (23.1, 113.3)",
            None,
        ),
        (
            _xml("link", "<Title>T</Title><Description>D</Description><Url>http://u</Url>"),
            "[link] T\nD\nhttp://u",
            None,
        ),
    ],
)
def test_app_message_types_become_envelopes(xml: str, text: str, attachment: str | None) -> None:
    from adapters.wecom.events import app_envelope, parse_app_xml

    envelope = app_envelope("wc", parse_app_xml(xml))
    assert envelope is not None
    assert (envelope.text, envelope.event_id, envelope.chat.type) == (text, "55", "p2p")
    assert [a.kind for a in envelope.attachments] == ([attachment] if attachment else [])


def test_other_events_are_skipped() -> None:
    from adapters.wecom.events import app_envelope, parse_app_xml

    xml = _xml("event", "<Event>enter_agent</Event>", msg_id="")
    assert app_envelope("wc", parse_app_xml(xml)) is None


def test_two_buttons_clicked_in_one_second_are_two_clicks_and_a_retry_is_one() -> None:
    """Regression: a click's event id was FromUserName + CreateTime only, so a second button
    clicked within the same second was dropped as a duplicate."""
    from adapters.wecom.cards import button_key
    from adapters.wecom.events import app_envelope, parse_app_xml
    from gateway.progress import Progress
    from tests.support.wecom import card_click

    progress = Progress(turn_id="t1", conversation="wc|p2p:alice", status="done")
    stop, new = button_key(progress, "retry"), button_key(progress, "new")
    ids = [
        app_envelope("wc", parse_app_xml(card_click("alice", key, "task-1", "rc", 1700000000)))
        for key in (stop, new, stop)
    ]
    assert all(env is not None for env in ids)
    first, second, retried = (env.event_id for env in ids if env is not None)
    assert first != second and first == retried


async def test_a_long_answer_past_a_members_per_minute_cap_waits_instead_of_being_dropped(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    """WeCom silently drops app messages past 30 a minute to one member (doc 90454). The fake's
    minute is 1 s here, the budget's member window too (chatSendsPerSecond 30): an answer of
    more than 30 messages goes out whole, the rest after the window slides, none dropped."""
    fake.minute_s = 1.0
    limits = {"chatSendsPerSecond": 30, "chatSendsPerMinute": None, "chatSendsPerHour": None}
    # parts, not the file answer.md (issue 38): 40 messages are what is under test
    gw = await app_gateway(gateways, prefix, fake, platformLimits=limits, maxAnswerParts=100)
    text = "\n".join("第" + str(i) + "行" + "长" * 600 for i in range(40))
    query, body = encrypt_xml(app_message("hal", text, "8501"))
    await post(http, url(gw), query, body)
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.split("\n"))
    await eventually(lambda: unmarked(fake.texts("hal")) == expected, timeout=30)
    assert len(fake.texts("hal")) > 30
    assert fake.dropped == []


async def test_an_app_card_gets_no_live_update_and_the_final_waits_for_none(
    gateways: list[Any], prefix: str, fake: FakeWeCom, http: aiohttp.ClientSession
) -> None:
    """App messages show no live progress: the card's only update is its final state, sent
    when the turn ends, not after an intermediate update's gap (issue 38: a WeCom final came
    up to 0.5 s after an update that called nothing)."""
    expert = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 3, "chunkChars": 1}
    gw = await app_gateway(gateways, prefix, fake, expert=expert, updateIntervalMs=100)
    text = "one delta a character, streamed for longer than the update interval " * 2
    query, body = encrypt_xml(app_message("gil", text, "8401"))
    await post(http, url(gw), query, body)
    await eventually(lambda: fake.texts("gil"))
    assert fake.texts("gil") == ["You said:\n> " + text.strip()]
    [update] = fake.updates
    assert update["template_card"]["main_title"]["title"] == "Done"
    s = await scrape(f"http://127.0.0.1:{gw.port}")
    assert s.value("xgw_card_updates_total", integration="wc", kind="update") == 1  # the final
    assert s.value("xgw_card_updates_coalesced_total", integration="wc") == 0
