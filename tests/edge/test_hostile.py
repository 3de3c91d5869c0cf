"""Hostile input gets a 4xx, never a 500 or a traceback, and nothing is stored
(docs/architecture.md, invariant 6): each case the fuzzing of issue 11 found, against the one
gateway of ``tests.support.hostile`` (every
HTTP endpoint, a Redis of its own, its whole log kept)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.dingtalk.crypto import sign_action
from tests.support.hostile import (
    ADMIN_TOKEN,
    DINGTALK_SECRET,
    Hostile,
    dingtalk_headers,
    hostile_gateway,
    lark_signed,
    raw_request,
    request,
    wecom_aibot_signed,
    wecom_app_signed,
)

JSON = {"Content-Type": "application/json"}
DEEP = b"[" * 100_000 + b"]" * 100_000
CONSOLE = "/console/api/messages"
LARK = "/api/lark/webhook/lk"
DINGTALK = "/api/dingtalk/webhook/dt"
WECOM_APP = "/api/wecom/webhook/wa"
WECOM_BOT = "/api/wecom/webhook/wb"
UNSIGNED_QUERY = "?msg_signature=abc&timestamp=1&nonce=n"


@pytest.fixture(scope="module")
def gw() -> Iterator[Hostile]:
    yield from hostile_gateway()


def refused(gw: Hostile, answer: tuple[int, bytes], status: int) -> bytes:
    """``answer`` has ``status``; nothing was stored and nothing logged a traceback or error."""
    got, body = answer
    assert got == status, (got, body[:200])
    assert gw.snapshot() == gw.keys and gw.writes() == gw.written
    assert gw.problems() == []
    return body


def accepted(gw: Hostile) -> None:
    gw.keys, gw.written = gw.snapshot(), gw.writes()


def dingtalk_message(**fields: Any) -> bytes:
    base = {
        "msgId": "m-hostile",
        "msgtype": "text",
        "text": {"content": "hello"},
        "conversationType": "1",
        "conversationId": "cid1",
        "senderId": "$:s1",
        "senderStaffId": "s1",
    }
    return json.dumps({**base, **fields}).encode()


def aibot(**fields: Any) -> str:
    base = {"msgid": "m-bot", "chattype": "single", "from": {"userid": "alice"}}
    return json.dumps({**base, "msgtype": "text", "text": {"content": "hi"}, **fields})


@pytest.mark.parametrize(
    ("target", "signed"),
    [
        (CONSOLE, False),
        (LARK, False),  # Lark parsed the body before checking its signature
        (DINGTALK, True),
        (WECOM_BOT + UNSIGNED_QUERY, False),  # parsed before verification
        (WECOM_APP + UNSIGNED_QUERY, False),
    ],
)
def test_deeply_nested_json_is_a_400_before_any_parser_recurses(
    gw: Hostile, target: str, signed: bool
) -> None:
    # DingTalk's sign is made as the test runs, not when it is collected: a suite can take longer
    # than the 5-minute sign window (signWindowSeconds).
    headers = {} if target.startswith(WECOM_APP) else dict(JSON)
    if signed:
        headers |= dingtalk_headers()
    refused(gw, request(gw.port, "POST", target, headers=headers, body=DEEP), 400)


def test_deeply_nested_payloads_inside_signed_bodies_are_400s(gw: Hostile) -> None:
    body, headers = lark_signed(DEEP)
    refused(gw, request(gw.port, "POST", LARK, headers=headers, body=body), 400)
    query, body = wecom_aibot_signed("[" * 5000 + "]" * 5000)
    refused(gw, request(gw.port, "POST", f"{WECOM_BOT}?{query}", body=body), 400)
    nested = "<a>" * 500 + "x" + "</a>" * 500
    xml = f"<xml><FromUserName>u</FromUserName><MsgType>text</MsgType><Content>{nested}</Content>"
    query, body = wecom_app_signed(xml + "<MsgId>1</MsgId></xml>")
    refused(gw, request(gw.port, "POST", f"{WECOM_APP}?{query}", body=body), 400)


ENDPOINTS = [
    (CONSOLE, {}),
    (LARK, {}),
    (DINGTALK, "dingtalk"),
    (WECOM_APP + UNSIGNED_QUERY, {}),
    (WECOM_BOT + UNSIGNED_QUERY, {}),
]


@pytest.mark.parametrize(("target", "auth"), ENDPOINTS)
@pytest.mark.parametrize(
    ("content", "body"),
    [
        ({"Content-Type": "application/json"}, b'{"text": "caf\xe9"}'),  # Latin-1, not UTF-8
        ({"Content-Type": "application/json; charset=bogus"}, b"{}"),
        ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, b"{}"),
        ({"Content-Type": "application/json", "Content-Encoding": "deflate"}, b"{}"),
    ],
)
def test_undecodable_bodies_are_400s(
    gw: Hostile, target: str, auth: Any, content: dict[str, str], body: bytes
) -> None:
    headers = {**content, **(dingtalk_headers() if auth == "dingtalk" else {})}
    refused(gw, request(gw.port, "POST", target, headers=headers, body=body), 400)


@pytest.mark.parametrize("value", [b"\xff\xfe", "é".encode(), "签名".encode()])
def test_non_ascii_auth_headers_are_refused_before_authentication(
    gw: Hostile, value: bytes
) -> None:
    admin = [("Authorization", b"Bearer " + value)]
    refused(gw, request(gw.port, "GET", "/v1.0/audit", headers=admin), 401)
    now = str(int(time.time()))
    lark = [("X-Lark-Signature", value), ("X-Lark-Request-Timestamp", now)]
    body = json.dumps({"encrypt": "AAAA"}).encode()
    refused(gw, request(gw.port, "POST", LARK, headers=lark, body=body), 401)
    lark_ts = [("X-Lark-Request-Timestamp", value)]
    refused(gw, request(gw.port, "POST", LARK, headers=lark_ts, body=body), 401)
    dingtalk = [("timestamp", now + "000"), ("sign", value)]
    refused(gw, request(gw.port, "POST", DINGTALK, headers=dingtalk, body=b"{}"), 401)
    dingtalk = [("timestamp", value), ("sign", b"AAAA")]
    refused(gw, request(gw.port, "POST", DINGTALK, headers=dingtalk, body=b"{}"), 401)


def test_non_ascii_query_signatures_are_refused(gw: Hostile) -> None:
    target = f"{WECOM_APP}?msg_signature=%C3%A9&timestamp=1&nonce=n"
    refused(gw, request(gw.port, "POST", target, body=b"<xml/>"), 400)
    refused(gw, request(gw.port, "GET", "/api/dingtalk/action/dt?t=%C3%A9.%C3%A9"), 403)


@pytest.mark.parametrize(
    "fields",
    [
        {"atUsers": 5},
        {"atUsers": [5]},
        {"text": {"content": 5}},
        {"text": "hi"},
        {"isInAtList": {"a": 1}},
        {"conversationType": 7},
        {"sessionWebhookExpiredTime": "soon"},  # was accepted; the turn then failed on int()
        {"msgtype": "richText", "content": {"richText": "x"}},
    ],
)
def test_signed_dingtalk_messages_of_the_wrong_shape_are_400s(
    gw: Hostile, fields: dict[str, Any]
) -> None:
    headers = {**JSON, **dingtalk_headers()}
    body = dingtalk_message(**fields)
    refused(gw, request(gw.port, "POST", DINGTALK, headers=headers, body=body), 400)


def test_signed_dingtalk_message_with_a_lone_surrogate_is_a_400(gw: Hostile) -> None:
    body = dingtalk_message(text={"content": "x"}).replace(b'"x"', b'"\\ud800"')
    headers = {**JSON, **dingtalk_headers()}
    refused(gw, request(gw.port, "POST", DINGTALK, headers=headers, body=body), 400)
    # A proper surrogate pair (an emoji, as JSON encoders escape it) is fine.
    ok = dingtalk_message(msgId="m-emoji", text={"content": "x"}).replace(
        b'"x"', b'"\\ud83d\\ude00"'
    )
    status, _ = request(gw.port, "POST", DINGTALK, headers=headers, body=ok)
    assert status == 200
    accepted(gw)


@pytest.mark.parametrize(
    "message",
    [
        aibot(**{"from": "u"}),
        aibot(**{"from": None, "msgid": 5}),
        aibot(msgtype="mixed", mixed={"msg_item": "x"}),
        aibot(msgtype="event", event={"eventtype": 5}),
        aibot(msgtype="stream", stream="s"),
        aibot(text={"content": "\ud800"}),
        "[1, 2]",
        "not json",
    ],
)
def test_signed_aibot_callbacks_of_the_wrong_shape_are_400s(gw: Hostile, message: str) -> None:
    query, body = wecom_aibot_signed(message)
    refused(gw, request(gw.port, "POST", f"{WECOM_BOT}?{query}", body=body), 400)


@pytest.mark.parametrize(
    "inner",
    [
        "<FromUserName>u</FromUserName><MsgType>text</MsgType><Content><a>x</a></Content>",
        "<FromUserName><a>u</a></FromUserName><MsgType>text</MsgType>",
        "<FromUserName>u</FromUserName><MsgType><a/></MsgType>",
        "<FromUserName>u</FromUserName><MsgType>event</MsgType><Event><e>1</e></Event>",
    ],
)
def test_signed_app_callbacks_of_the_wrong_shape_are_400s(gw: Hostile, inner: str) -> None:
    query, body = wecom_app_signed(f"<xml>{inner}<MsgId>1</MsgId></xml>")
    refused(gw, request(gw.port, "POST", f"{WECOM_APP}?{query}", body=body), 400)


def test_app_callback_xml_with_a_dtd_is_a_400(gw: Hostile) -> None:
    laughs = '<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
    query, body = wecom_app_signed(laughs + "<xml><FromUserName>&b;</FromUserName></xml>")
    refused(gw, request(gw.port, "POST", f"{WECOM_APP}?{query}", body=body), 400)


def _click(gw: Hostile, token: str) -> tuple[int, bytes]:
    """The POST a link's page makes (its GET changes nothing: tests/dingtalk/test_links.py)."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = b"t=" + token.encode()
    return request(gw.port, "POST", "/api/dingtalk/action/dt", headers=form, body=body)


def test_a_respelled_dingtalk_action_link_is_the_same_click(gw: Hostile) -> None:
    claims = {"a": "stop", "c": "dt|p2p:cid9", "tu": "t1", "ch": "cid9", "g": 0, "u": "s1"}
    token = sign_action(DINGTALK_SECRET, claims, expires_at=int(time.time()) + 600)
    status, page = _click(gw, token)
    assert status == 200 and b"Stop requested" in page
    accepted(gw)
    payload, _, mac = token.partition(".")
    last = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    flipped = mac[:-1] + last[last.index(mac[-1]) ^ 1]  # other trailing bits, same digest
    for spelling in (f"{token}=", f"{token}==", f"{payload}.{flipped}", f"{payload}.{mac}%3D"):
        refused(gw, _click(gw, spelling), 403)
        answer = request(gw.port, "GET", f"/api/dingtalk/action/dt?t={spelling}")
        refused(gw, answer, 403)
    again = _click(gw, token)
    assert again[0] == 200 and b"Already done" in again[1]
    assert gw.snapshot() == gw.keys  # the same dedup key, found


def test_admin_audit_count_must_be_a_positive_number(gw: Hostile) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for count in ("0", "-1", "abc", "1e3", "%D9%A1%D9%A2"):  # the last: Arabic digits
        answer = request(gw.port, "GET", f"/v1.0/audit?count={count}", headers=auth)
        assert json.loads(refused(gw, answer, 400))["code"] == "bad_request"
    status, body = request(gw.port, "GET", "/v1.0/audit?count=5000", headers=auth)
    assert status == 200 and json.loads(body)["success"] is True


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /x\xff\x00 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
        b"POST /console/api/messages HTTP/1.1\r\nHost: a\r\nContent-Type: a/b\r\n"
        b"Content-Type: c/d\r\nContent-Length: 0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n"
        b"Connection: close\r\n\r\nabc",
    ],
)
def test_aiohttps_own_refusals_log_one_line_and_no_traceback(gw: Hostile, raw: bytes) -> None:
    gw.capture.entries.clear()
    status, _ = raw_request(gw.port, raw)
    assert status in (200, 400)  # /healthz answers before its unread body fails to decode
    lines = [e["event"] for e in gw.capture.entries if e["event"] != "ingested"]
    assert lines in (["bad HTTP request refused"], ["request body unreadable"]), lines
    assert gw.problems() == []
    assert gw.snapshot() == gw.keys and gw.writes() == gw.written
