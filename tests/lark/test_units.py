"""Lark pieces on their own: the official crypto vectors, verification with an injected clock,
event parsing (text, post, attachments, mentions), card rendering and answer splitting."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from adapters.lark.cards import (
    CARD_ANSWER_BYTES,
    answer_parts,
    card_answer,
    clicked_card,
    inert,
    render_card,
)
from adapters.lark.crypto import CryptoError, EventCipher
from adapters.lark.events import BadEvent, action_envelope, message_envelope
from adapters.lark.inbound import LarkInbound
from adapters.lark.outbound import lark_uuid
from adapters.lark.settings import LarkIntegration
from gateway.errors import Refused
from gateway.progress import Progress, Step
from tests.support.lark import bot_mention, card_click, message_event, sealed

VECTOR = "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="


def test_official_decrypt_vector() -> None:
    assert EventCipher("test key").decrypt(VECTOR) == b"hello world"


def test_signature_vector() -> None:
    body = b'{"encrypt":"' + VECTOR.encode() + b'"}'
    expected = "bed8fdd3e4bbc581364c140b572ec676edff3db612d57bbc07a24d062c40ddf3"
    assert EventCipher("test key").signature("1700000000", "n0nce", body) == expected
    assert EventCipher("test key").signature_ok("1700000000", "n0nce", body, expected.upper())


@pytest.mark.parametrize("bad", ["not base64!", "QUJD", VECTOR[:-8] + "AAAAAAA="])
def test_undecryptable_bodies_raise(bad: str) -> None:
    with pytest.raises(CryptoError):
        EventCipher("test key").decrypt(bad)


def settings(**kw: Any) -> LarkIntegration:
    base = {
        "id": "lk",
        "platform": "lark",
        "xpertId": "echo",
        "appId": "cli_x",
        "appSecret": "s",
        "verificationToken": "v_token_test",
        "encryptKey": "test key",
    }
    return LarkIntegration.model_validate(base | kw)


def test_timestamp_window_uses_the_injected_clock() -> None:
    clock = lambda: 1_700_000_000.0  # noqa: E731
    inbound = LarkInbound(settings=settings(), adapter=None, clock=clock)  # type: ignore[arg-type]
    body, headers = sealed(message_event(), timestamp=1_700_000_000 - 299)
    assert inbound.verify(headers, body)["header"]["event_type"] == "im.message.receive_v1"
    body, headers = sealed(message_event(), timestamp=1_700_000_000 - 301)
    with pytest.raises(Refused) as err:
        inbound.verify(headers, body)
    assert err.value.status == 401


def test_the_signature_vector_passes_verify_and_its_timestamp_cannot_move_into_the_nonce() -> None:
    """The vector of docs/lark.md, "Signature and encryption", at its own time: signature and window
    pass, so the body is decrypted (to "hello world", not JSON: 400). Moved into the nonce it signs
    the same: 401."""
    inbound = LarkInbound(settings=settings(), adapter=None, clock=lambda: 1_700_000_000.0)  # type: ignore[arg-type]
    body = b'{"encrypt":"' + VECTOR.encode() + b'"}'
    sign = "bed8fdd3e4bbc581364c140b572ec676edff3db612d57bbc07a24d062c40ddf3"
    headers = {
        "X-Lark-Request-Timestamp": "1700000000",
        "X-Lark-Request-Nonce": "n0nce",
        "X-Lark-Signature": sign,
    }
    with pytest.raises(Refused) as err:
        inbound.verify(headers, body)
    assert (err.value.status, str(err.value)) == (400, "encrypt: not a JSON object")
    for timestamp in (None, ""):
        replay = {"X-Lark-Request-Nonce": "1700000000n0nce", "X-Lark-Signature": sign}
        if timestamp is not None:
            replay["X-Lark-Request-Timestamp"] = timestamp
        with pytest.raises(Refused) as err:
            inbound.verify(replay, body)
        assert err.value.status == 401


def test_settings_reject_plain_http_off_localhost_and_webhooks_without_token() -> None:
    with pytest.raises(ValueError, match="plain http"):
        settings(apiBase="http://open.feishu.cn")
    with pytest.raises(ValueError, match="verificationToken"):
        settings(verificationToken=None)
    assert settings(apiBase="https://open.larksuite.com/").api_base == "https://open.larksuite.com"
    assert repr(settings()).count("test key") == 0  # secrets masked


def test_text_message_mentions() -> None:
    other = {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob"}
    env = message_event(
        "@_user_1  ask @_user_2 please",
        chat_type="group",
        chat_id="oc_g",
        mentions=[bot_mention(), other],
    )
    envelope = message_envelope("lk", env, "ou_bot")
    assert envelope.text == "ask @Bob please"
    assert envelope.bot_mentioned and envelope.chat.type == "group"
    assert [(m.id, m.is_bot) for m in envelope.mentions] == [("ou_bot", True), ("ou_bob", False)]
    assert envelope.event_id == env["event"]["message"]["message_id"]
    # Another bot's open_id is not ours: no mention of this bot.
    assert not message_envelope("lk", env, "ou_other_bot").bot_mentioned


def test_post_is_flattened_with_links_images_and_locale_wrapper() -> None:
    post = {
        "zh_cn": {
            "title": "Notes",
            "content": [
                [
                    {"tag": "at", "user_id": "@_user_1", "user_name": "Xpert"},
                    {"tag": "text", "text": " see "},
                    {"tag": "a", "text": "here", "href": "https://example.com"},
                ],
                [{"tag": "img", "image_key": "img_v3_1"}],
            ],
        }
    }
    event = message_event(message_type="post", content=post, mentions=[bot_mention()])
    envelope = message_envelope("lk", event, "ou_bot")
    assert envelope.text == "**Notes**\nsee [here](https://example.com)\n[image]"
    assert [(a.kind, a.key) for a in envelope.attachments] == [("image", "img_v3_1")]


@pytest.mark.parametrize(
    ("msg_type", "content", "kind", "key"),
    [
        ("image", {"image_key": "img_1"}, "image", "img_1"),
        ("file", {"file_key": "file_1", "file_name": "r.pdf"}, "file", "file_1"),
        ("audio", {"file_key": "au_1", "duration": 3}, "audio", "au_1"),
        ("media", {"file_key": "mv_1", "image_key": "thumb"}, "video", "mv_1"),
    ],
)
def test_resource_messages_become_attachments(
    msg_type: str, content: dict[str, Any], kind: str, key: str
) -> None:
    envelope = message_envelope("lk", message_event(message_type=msg_type, content=content), None)
    assert [(a.kind, a.key) for a in envelope.attachments] == [(kind, key)]


def test_a_sticker_is_text_not_a_downloadable_image() -> None:
    """Lark does not serve sticker resources (get message resource doc): a sticker reaches the
    expert as the text "[sticker]", with no attachment to fetch."""
    event = message_event(message_type="sticker", content={"file_key": "v2_sticker_1"})
    envelope = message_envelope("lk", event, None)
    assert envelope.attachments == () and envelope.text == "[sticker]"


def test_bot_messages_are_marked_and_bad_content_rejected() -> None:
    assert message_envelope("lk", message_event(sender_type="app"), "ou_bot").sender.is_bot
    assert message_envelope("lk", message_event(sender="ou_bot"), "ou_bot").sender.is_bot
    broken = message_event()
    broken["event"]["message"]["content"] = "{not json"
    with pytest.raises(BadEvent):
        message_envelope("lk", broken, "ou_bot")


def test_card_click_becomes_an_action_envelope() -> None:
    value = {"conversation": "lk|group:oc_g", "turnId": "t1", "action": "confirm"}
    envelope = action_envelope("lk", card_click(value, message_id="om_c", chat_id="oc_g"))
    assert envelope.kind == "action" and envelope.action is not None
    assert envelope.action.id == "confirm" and envelope.action.message_id == "om_c"
    with pytest.raises(BadEvent):
        action_envelope("lk", card_click({"action": "explode"}, message_id="om_c"))


def test_card_is_json_2_with_valid_element_ids_and_button_values() -> None:
    progress = Progress(
        turn_id="t1",
        conversation="lk|p2p:oc_1",
        steps=(Step("s1", "Reading", "done"), Step("s2", "Thinking", "running")),
        answer="partial",
    )
    card = render_card(progress, chat_type="p2p", streaming=True)
    assert card["schema"] == "2.0" and card["config"]["update_multi"] is True
    ids = [e["element_id"] for e in card["body"]["elements"]]
    assert len(ids) == len(set(ids)) and all(len(i) <= 20 and i[0].isalpha() for i in ids)
    [button] = [e for e in card["body"]["elements"] if e["tag"] == "button"]
    value = button["behaviors"][0]["value"]
    assert value == {
        "conversation": "lk|p2p:oc_1",
        "turnId": "t1",
        "action": "stop",
        "chatType": "p2p",
    }


def test_long_answers_are_split_within_byte_limits() -> None:
    text = ("长" * 50 + "\n") * 400  # ~60 KB of three-byte characters
    parts = answer_parts(text)
    n = len(parts)
    assert n >= 2 and all(p.endswith(f"\n\n({i}/{n})") for i, p in enumerate(parts, 1))
    assert "".join(p.removesuffix(f"\n\n({i}/{n})") for i, p in enumerate(parts, 1)) == text
    assert len(parts[0].encode()) <= CARD_ANSWER_BYTES


def test_the_cards_share_stops_before_a_fifth_table() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    parts = answer_parts("intro\n\n" + table * 7)
    assert len(parts) == 2 and parts[0].count("|---|") == 4 and parts[1].count("|---|") == 3
    assert card_answer(Progress(turn_id="t", answer="short")) == "short"


def test_uuid_fits_lark_limit() -> None:
    assert lark_uuid("short-key") == "short-key"
    assert len(lark_uuid("x" * 80)) <= 50 and lark_uuid("x" * 80) == lark_uuid("x" * 80)


@pytest.mark.parametrize("block", [b"A" * 15 + b"\x02", b"A" * 16, b"A" * 15 + b"\x00"])
def test_bad_padding_is_refused(block: bytes) -> None:
    iv = b"\x01" * 16
    key = hashlib.sha256(b"test key").digest()
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    sealed_block = base64.b64encode(iv + enc.update(block) + enc.finalize()).decode()
    with pytest.raises(CryptoError):
        EventCipher("test key").decrypt(sealed_block)
    assert EventCipher("test key").decrypt(EventCipher("test key").encrypt(b"x" * 16)) == b"x" * 16


def test_a_click_turns_the_card_it_changes_and_no_other() -> None:
    running = Progress(turn_id="t1", conversation="c", steps=(Step("s", "Plan", "running"),))
    card = render_card(running, chat_type="p2p", streaming=True)
    stopping = clicked_card(card, "stop", "t1")
    assert stopping is not None
    assert stopping["header"]["title"]["content"] == "Stopping…"
    assert not [e for e in stopping["body"]["elements"] if e["tag"] == "button"]
    assert "streaming_mode" not in stopping["config"] and stopping["config"]["update_multi"]
    assert card["body"]["elements"][-1]["tag"] == "button"  # the stored card is left alone
    assert clicked_card(card, "stop", "another-turn") is None
    assert clicked_card(card, "new", "t1") is None  # no such button on this card
    done = render_card(running.finish("done", ""), chat_type="p2p")
    ended = clicked_card(done, "new", "t1")
    assert ended is not None and ended["header"] == done["header"]
    assert "ended" in ended["body"]["elements"][-1]["content"]


@pytest.mark.parametrize(
    "tag",
    [
        '<at user_id="all"></at>',
        "<at id=all></at>",
        "<AT ID=ALL></AT>",
        "<  at\tid=all>< /  at >",
        "<at email=a@b.c/>",
        "&lt;at id=all&gt;",
        "&LT;at id=all&gt;",
        "&lt at id=all>",
        "&#60;at id=all>",
        "&#x3C;at id=all>",
        "&#x003c;at id=all>",
        "<at",
    ],
)
def test_inert_leaves_no_mention_tag(tag: str) -> None:
    out = inert(f"x {tag} y")
    assert "\uff1c" in out
    assert not re.search(r"<\s*/?\s*at(?![\w-])", html.unescape(out), re.IGNORECASE)
    assert inert(out) == out  # once is enough


def test_inert_keeps_everything_else() -> None:
    text = "**bold** <a href='x'>l</a> <attention> <atom/> @all @Bob <font color=red>r</font> a<b"
    assert inert(text) == text
    card = render_card(Progress(turn_id="t", answer=text, status="done"), chat_type="p2p")
    assert json.dumps(card, ensure_ascii=False).count("\uff1c") == 0


def test_every_part_of_a_long_hostile_answer_is_inert_and_fits() -> None:
    """Made inert before the cut: "＜" is 3 bytes, "<" one, so the card's share still fits."""
    answer = '<at user_id="all"></at>' * 5_000
    parts = answer_parts(answer)
    assert len(parts) > 2 and all("<" not in p for p in parts)
    assert len(parts[0].encode()) <= CARD_ANSWER_BYTES
    card = render_card(
        Progress(
            turn_id="t",
            status="waiting",
            prompt="<at id=all></at> confirm?",  # the agent's question is the card's title
            answer=answer,
            error="<at id=all>",
            steps=(Step(id="s", title="<at id=all>", status="done"),),
            tools=(Step(id="t", title="search", status="done", detail="<at id=all>"),),
        ),
        chat_type="group",
    )
    assert "<" not in json.dumps(card, ensure_ascii=False)
