"""DingTalk pieces without the daemon: the sign (official-style vector §2.3), its window with an
injected clock, action tokens, robot message parsing (§2.2), message rendering and splitting by
UTF-8 bytes, reading createAndDeliver answers, and which API errors are retried."""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import pytest

from adapters.dingtalk.api import DingTalkApiError
from adapters.dingtalk.cards import (
    MAX_CHARS,
    MAX_PARAM_BYTES,
    Message,
    ai_card_create_params,
    as_messages,
    fit,
    json_size,
    render_messages,
    split,
    utf8_json,
)
from adapters.dingtalk.crypto import (
    BadSignature,
    robot_sign,
    sign_action,
    verify_action,
    verify_robot_sign,
)
from adapters.dingtalk.events import card_callback_params, robot_message
from adapters.dingtalk.outbound.ai_card import delivered
from gateway.edge.parts import MARK_ROOM
from gateway.progress import Progress

SECRET = "dt-app-secret"
TS = 1_700_000_000_000


def test_sign_matches_the_reference_vector() -> None:
    assert robot_sign(SECRET, str(TS)) == "INrz4sN8SDL9wUtr7EEfaMVif4hHF8xA51V0ARHhITU="


def test_sign_window_uses_the_injected_clock() -> None:
    sign = robot_sign(SECRET, str(TS))
    verify_robot_sign(SECRET, str(TS), sign, now_ms=TS + 3_600_000)
    verify_robot_sign(SECRET, str(TS), sign, now_ms=TS - 3_600_000)
    for now in (TS + 3_600_001, TS - 3_600_001):
        with pytest.raises(BadSignature, match="window"):
            verify_robot_sign(SECRET, str(TS), sign, now_ms=now)
    with pytest.raises(BadSignature, match="mismatch"):
        verify_robot_sign("other-secret", str(TS), sign, now_ms=TS)
    for ts, sg in ((None, sign), (str(TS), None), ("abc", sign)):
        with pytest.raises(BadSignature):
            verify_robot_sign(SECRET, ts, sg, now_ms=TS)


def test_action_tokens_verify_and_expire() -> None:
    token = sign_action(SECRET, {"a": "stop", "c": "dt|p2p:x"}, expires_at=1000)
    assert verify_action(SECRET, token, now_s=999)["a"] == "stop"
    with pytest.raises(BadSignature, match="expired"):
        verify_action(SECRET, token, now_s=1001)
    with pytest.raises(BadSignature, match="mismatch"):
        verify_action("other", token, now_s=0)
    _payload, _, mac = token.partition(".")
    other = sign_action(SECRET, {"a": "new", "c": "dt|p2p:x"}, expires_at=1000)
    with pytest.raises(BadSignature):
        verify_action(SECRET, other.partition(".")[0] + "." + mac, now_s=0)
    for junk in ("", "abc", "a.b", "!!.??", "x" * 5000):
        with pytest.raises(BadSignature):
            verify_action(SECRET, junk, now_s=0)


def message(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "msgId": "m1",
        "msgtype": "text",
        "text": {"content": " hi"},
        "conversationId": "cid1",
        "conversationType": "2",
        "senderId": "$:s1",
        "senderStaffId": "staff1",
        "senderNick": "Alice",
        "chatbotUserId": "$:bot",
        "isInAtList": True,
        "atUsers": [{"dingtalkId": "$:bot"}],
        "sessionWebhook": "http://x/session/1",
        "sessionWebhookExpiredTime": 1,
        "robotCode": "dingappkey",
    }
    base.update(fields)
    return base


def test_group_text_mentions_and_reply_handles() -> None:
    env = robot_message(message(text={"content": " @Xpert  what is up"}), integration_id="dt")
    assert env.event_id == "m1" and env.chat.type == "group" and env.chat.id == "cid1"
    assert env.text == "what is up" and env.bot_mentioned
    assert env.sender.id == "staff1" and env.sender.name == "Alice" and not env.sender.is_bot
    assert env.mentions[0].is_bot
    extras = env.reply_to.model_extra if env.reply_to else {}
    assert extras == {
        "sessionWebhook": "http://x/session/1",
        "sessionWebhookExpiredTime": 1,
        "robotCode": "dingappkey",
        "conversationId": "cid1",
        "conversationType": "2",
        "senderStaffId": "staff1",
    }


def test_mention_rules() -> None:
    # chatbotUserId among atUsers counts even without isInAtList
    assert robot_message(message(isInAtList=False), integration_id="dt").bot_mentioned
    other = message(isInAtList=False, atUsers=[{"dingtalkId": "$:bob", "staffId": "bob"}])
    env = robot_message({**other, "text": {"content": "@Bob look"}}, integration_id="dt")
    assert not env.bot_mentioned and env.text == "@Bob look"  # another person's @ is kept
    assert not robot_message(
        message(isInAtList=False, atUsers=[]), integration_id="dt"
    ).bot_mentioned
    assert robot_message(
        message(conversationType="1", isInAtList=False), integration_id="dt"
    ).bot_mentioned
    own = robot_message(message(senderId="$:bot"), integration_id="dt")
    assert own.sender.is_bot


def test_media_messages_become_attachments() -> None:
    rich = message(
        msgtype="richText",
        content={
            "richText": [
                {"text": "see "},
                {"downloadCode": "dc1", "type": "picture"},
                {"text": "this"},
            ]
        },
    )
    env = robot_message(rich, integration_id="dt")
    assert env.text == "see this"
    assert [(a.kind, a.key) for a in env.attachments] == [("image", "dc1")]
    for msgtype, kind, content in (
        ("picture", "image", {"downloadCode": "p1"}),
        ("file", "file", {"downloadCode": "f1", "fileName": "a.pdf"}),
        ("audio", "audio", {"downloadCode": "v1", "recognition": "spoken words"}),
        ("video", "video", {"downloadCode": "vd1", "duration": 3}),
    ):
        env = robot_message(message(msgtype=msgtype, content=content), integration_id="dt")
        [att] = env.attachments
        assert att.kind == kind and att.key == content["downloadCode"]
    assert env.text == ""
    audio = robot_message(
        message(msgtype="audio", content={"downloadCode": "v", "recognition": "hello"}),
        integration_id="dt",
    )
    assert audio.text == "hello"


def test_stream_message_id_is_the_fallback_event_id() -> None:
    data = message()
    del data["msgId"]
    assert robot_message(data, integration_id="dt", stream_id="s-1").event_id == "s-1"
    with pytest.raises(ValueError):
        robot_message(data, integration_id="dt")


def test_card_callback_params() -> None:
    content = {"cardPrivateData": {"actionIds": ["stop"], "params": {"action": "stop"}}}
    assert card_callback_params({"content": json.dumps(content)}) == {"action": "stop"}
    assert card_callback_params({"content": ""}) == {}
    assert card_callback_params({}) == {}


def test_two_buttons_use_sample_action_card_2() -> None:
    msg = Message("Please confirm", "Go?", (("Confirm", "http://a"), ("Reject", "http://b")))
    key, param = msg.openapi_param()
    assert key == "sampleActionCard2"
    assert json.loads(param)["actionURL2"] == "http://b"
    body = msg.webhook_body()
    assert body["msgtype"] == "actionCard" and len(body["actionCard"]["btns"]) == 2


MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def unmarked(messages: list[Message]) -> str:
    """The parts' texts joined without their (i/n) markers, each checked in its place."""
    n = len(messages)
    for i, m in enumerate(messages, start=1):
        found = MARK.search(m.text)
        assert found and found[0] == f"\n\n({i}/{n})", m.text[-20:]
    return "".join(MARK.sub("", m.text) for m in messages)


def test_long_answers_are_split_in_numbered_parts_with_buttons_on_the_last() -> None:
    """A part holds at most MAX_CHARS characters (DingTalk's markdown stops rendering past
    ~3,500: limits.md, secondary) and its msgParam at most 15000 bytes; each ends at a
    paragraph, is marked (i/n), and only the last carries the buttons."""
    answer = "\n\n".join(f"paragraph {i} " + "x" * 600 for i in range(40))  # ~24 KB
    progress = Progress(turn_id="t", status="done", answer=answer)
    messages = render_messages(progress, lambda action: f"http://gw/{action}")
    assert len(messages) == 8
    assert all(m.size() <= MAX_PARAM_BYTES and len(m.text) <= MAX_CHARS for m in messages)
    assert unmarked(messages) == answer
    assert all(MARK.sub("", m.text).endswith("x\n\n") for m in messages[:-1])  # paragraphs
    assert [bool(m.buttons) for m in messages] == [False] * 7 + [True]
    assert split("short", 100) == ["short"] and split("", 100) == [""]
    assert as_messages("t", "short") == [Message("t", "short")]  # one part: no marker


def test_cjk_answers_are_measured_in_characters_and_utf8_bytes() -> None:
    """A CJK character is 3 bytes of the 15000 a msgParam holds (the-robot-sends-a-group-
    message), so the render limit in characters decides first; an answer of 4-byte emoji
    with five long buttons (whose room every part keeps) is held by the bytes instead."""
    cjk = "钉钉让进步发生。" * 2500  # 20000 characters, 60000 bytes
    latin = "dingtalk" * 2500  # 20000 characters, 20000 bytes
    cjk_messages = as_messages("答案", cjk)
    assert len(as_messages("answer", latin)) == 6 and len(cjk_messages) == 6
    assert unmarked(cjk_messages) == cjk
    assert all(len(m.text) > 3_300 for m in cjk_messages[:-1])  # the room is used
    buttons = tuple((f"button {i}", "https://gw/a?t=" + "t" * 600) for i in range(5))
    emoji = "😀" * 20_000  # 80000 bytes
    messages = as_messages("answer", emoji, buttons)
    assert unmarked(messages) == emoji and messages[-1].buttons == buttons
    for m in messages:
        _key, param = m.openapi_param()
        assert len(param.encode()) <= MAX_PARAM_BYTES
        assert len(utf8_json(m.webhook_body())) <= MAX_PARAM_BYTES
        assert len(m.text) < MAX_CHARS - 300  # the bytes decided
    probe = Message("answer", "", buttons)
    assert all(probe.size() + len(m.text.encode()) > 14_000 for m in messages[:-1])


def test_a_cut_never_tears_a_character_apart() -> None:
    text = "e\u0301" * 700 + "👩\u200d💻" * 500 + "中\n" * 500 + '"\x01\\' * 300
    for budget in (101, 997, 4000):
        pieces = split(text, budget)
        assert "".join(pieces) == text
        for piece in pieces:
            assert len(utf8_json(piece)) - 2 <= budget - MARK_ROOM  # "\n" counts 2 bytes
            assert json_size(piece) == len(utf8_json(piece)) - 2
            assert not unicodedata.combining(piece[0]) and piece[0] != "\u200d"
            assert piece[-1] != "\u200d"
    assert fit("中" * 500) == "中" * 332 + "…" and len(fit("中" * 500).encode()) <= 1000
    assert fit("中" * 500, keep_end=True).startswith("…中")


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        ({"success": True, "result": {"deliverResults": [{"success": True}]}}, True),
        ({"success": True, "result": {"deliverResults": [{"success": False}]}}, False),
        (
            {
                "success": True,
                "result": {"deliverResults": [{"success": False}, {"success": True}]},
            },
            True,
        ),
        ({"success": False, "result": {}}, False),
        ({"success": True, "result": {}}, True),  # the doc's own example: nothing to go by
    ],
)
def test_a_card_counts_as_shown_when_delivered_somewhere(
    answer: dict[str, Any], shown: bool
) -> None:
    assert delivered(answer) is shown


def test_which_api_errors_are_retried() -> None:
    assert DingTalkApiError(403, "Forbidden.AccessDenied.QpsLimitForApi", "").refused is False
    assert DingTalkApiError(400, "send.too.fast", "").refused is False
    assert DingTalkApiError(502, "system.busy", "").refused is False
    assert DingTalkApiError(0, "ClientConnectorError", "").refused is False
    assert DingTalkApiError(400, "param.templateNotExist", "").refused is True
    assert DingTalkApiError(403, "Forbidden.AccessDenied.ApiCountLimitForOrg", "").refused is True


def test_the_public_card_is_created_inputting_when_it_has_something_to_show() -> None:
    """Created at 2 with the steps, so no later PUT only changes the status; empty at 1."""
    shown = ai_card_create_params("⏳ Echo", "[Stop](https://x)")
    assert shown["flowStatus"] == "2" and shown["msgContent"] == "⏳ Echo"
    assert shown["config"] == '{"autoLayout": true}'
    assert ai_card_create_params("", "")["flowStatus"] == "1"
