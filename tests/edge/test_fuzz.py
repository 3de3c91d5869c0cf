"""Every HTTP endpoint fuzzed with malformed, forged and (correctly signed) ill-typed requests:
no answer is a 5xx, nothing logs a traceback or an error, and nothing a refused request sent is
stored (the gateway's whole Redis key set is unchanged). Seeded (hypothesis, derandomized), a few
thousand cases per endpoint; the gateway is the one of ``tests.support.hostile``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzzing import (
    _dumps,
    bodies,
    check,
    fuzz,
    header_value,
    junk_headers,
    junk_query,
    mutated,
)
from tests.support.hostile import (
    ADMIN_TOKEN,
    Hostile,
    dingtalk_headers,
    event_signed,
    hostile_gateway,
    lark_signed,
    raw_request,
    request,
    wecom_aibot_signed,
    wecom_app_signed,
)
from tests.support.lark import card_click, message_event


@pytest.fixture(scope="module")
def gw() -> Iterator[Hostile]:
    yield from hostile_gateway()


# --- unauthenticated: every endpoint ------------------------------------------------------------
ENDPOINTS = [
    ("POST", "/console/api/messages"),
    ("POST", "/console/api/actions"),
    ("POST", "/api/lark/webhook/lk"),
    ("POST", "/api/dingtalk/webhook/dt"),
    ("POST", "/api/wecom/webhook/wa?msg_signature=a&timestamp=1&nonce=n"),
    ("POST", "/api/wecom/webhook/wb?msg_signature=a&timestamp=1&nonce=n"),
    ("POST", "/api/events/console/github"),
    ("POST", "/api/events/console/gitlab"),
    ("POST", "/api/events/console/generic"),
]


@pytest.mark.parametrize(("method", "target"), ENDPOINTS)
def test_fuzz_unauthenticated_bodies_and_headers(gw: Hostile, method: str, target: str) -> None:
    @fuzz
    @given(headers=junk_headers(), body=bodies)
    def run(headers: list[tuple[str, bytes]], body: bytes) -> None:
        check(gw, request(gw.port, method, target, headers=headers, body=body), (headers, body))

    run()


QUERIES: list[tuple[str, list[str]]] = [
    ("/api/wecom/webhook/wa", ["msg_signature", "timestamp", "nonce", "echostr"]),
    ("/api/wecom/webhook/wb", ["msg_signature", "timestamp", "nonce", "echostr"]),
    ("/api/dingtalk/action/dt", ["t"]),
    ("/v1.0/audit", ["count"]),
    (
        "/v1.0/audit",
        ["integrationId", "chatId", "sessionId", "outcome", "since", "limit", "count"],
    ),
    ("/v1.0/audit/events", ["event", "limit"]),
    ("/v1.0/sessions", ["integrationId", "chatId", "status", "outcome", "since", "limit"]),
    ("/v1.0/sessions/s-1/audit", ["since", "limit"]),
    ("/v1.0/sessions/s-1", ["x"]),
    ("/v1.0/usage", ["integrationId", "chatId"]),
    ("/console/api/chats/dm-alice/messages", ["integrationId"]),
]


@pytest.mark.parametrize(("path", "names"), QUERIES)
def test_fuzz_queries(gw: Hostile, path: str, names: list[str]) -> None:
    auth = [("Authorization", f"Bearer {ADMIN_TOKEN}".encode())]

    @fuzz
    @given(query=junk_query(names), method=st.sampled_from(["GET", "POST"]))
    def run(query: str, method: str) -> None:
        answer = request(gw.port, method, f"{path}?{query}", headers=auth)
        check(gw, answer, (method, query))

    run()


@fuzz
@given(
    method=st.sampled_from([b"GET", b"POST", b"PUT", b"G\xffT", b""]),
    target=st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b),
    extra=st.lists(header_value, max_size=3),
    body=st.binary(max_size=50),
)
def test_fuzz_raw_http(
    gw: Hostile, method: bytes, target: bytes, extra: list[bytes], body: bytes
) -> None:
    head = method + b" /" + target + b" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
    head += b"".join(b"X-" + v + b"\r\n" for v in extra)
    answer = raw_request(gw.port, head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    status, _ = answer
    if status == 0:  # aiohttp may close on bytes that are no HTTP at all; that is fine
        answer = (400, b"")
    check(gw, answer, (method, target, extra))


# --- correctly signed, of the wrong shape -------------------------------------------------------
def _lark_templates() -> list[dict[str, Any]]:
    value = {"conversation": "lk|p2p:oc_p2p1", "turnId": "t1", "action": "stop"}
    return [message_event(message_id="om_fz"), card_click(value, message_id="om_fz")]


def _dingtalk_template() -> dict[str, Any]:
    return {
        "msgId": "m-fz",
        "msgtype": "text",
        "text": {"content": "hi"},
        "content": {"richText": [{"text": "a"}, {"downloadCode": "d"}]},
        "conversationType": "2",
        "conversationId": "cid",
        "chatbotUserId": "$:bot",
        "senderId": "$:s",
        "senderStaffId": "s",
        "isInAtList": True,
        "atUsers": [{"dingtalkId": "$:bot", "staffId": "b"}],
        # on DingTalk's origin: a body naming another is refused (test_dingtalk_forged.py)
        "sessionWebhook": "https://oapi.dingtalk.com/robot/sendBySession?session=fz",
        "sessionWebhookExpiredTime": int(time.time() * 1000) + 60_000,
    }


def _aibot_templates() -> list[dict[str, Any]]:
    base = {"msgid": "m-fz", "chattype": "group", "chatid": "c", "from": {"userid": "alice"}}
    item = {"msgtype": "image", "image": {"url": "https://x/y", "aeskey": "k"}}
    mixed = {"msg_item": [{"msgtype": "text", "text": {"content": "a"}}, item]}
    click = {"eventtype": "template_card_event", "template_card_event": {"event_key": "k"}}
    return [
        {**base, "msgtype": "text", "text": {"content": "hi"}, "response_url": "https://r"},
        {**base, "msgtype": "mixed", "mixed": mixed},
        {**base, "msgtype": "event", "event": click},
        {"msgid": "m-s", "msgtype": "stream", "stream": {"id": "s1"}},
    ]


EVENTS = Path(__file__).parent.parent / "fixtures" / "events"


def _event_templates(*names: str) -> list[dict[str, Any]]:
    return [json.loads((EVENTS / name).read_text()) for name in names]


GENERIC_EVENT = {"key": "INC-1", "chatId": "ops", "title": "t", "status": "done", "url": "u"}

APP_FIELDS = ["FromUserName", "MsgType", "Content", "MsgId", "Event", "EventKey", "TaskId"]
xml_text = st.one_of(
    st.text(st.characters(exclude_categories=["Cs", "Cc"]), max_size=20),
    st.sampled_from(["text", "event", "template_card_event", "<a>x</a>", "<a/>", "&amp;"]),
    st.integers(1, 60).map(lambda n: "<a>" * n + "</a>" * n),
)


@st.composite
def app_xml(draw: st.DrawFn) -> str:
    fields = draw(st.dictionaries(st.sampled_from(APP_FIELDS), xml_text, max_size=7))
    inner = "".join(f"<{k}>{v}</{k}>" for k, v in fields.items())
    return f"<xml>{inner}</xml>"


SIGNED: list[tuple[str, Any]] = [
    ("lark", st.sampled_from(_lark_templates()).flatmap(mutated).map(_dumps)),
    ("dingtalk", mutated(_dingtalk_template()).map(_dumps)),
    ("wecom-aibot", st.sampled_from(_aibot_templates()).flatmap(mutated).map(_dumps)),
    ("wecom-app", app_xml().map(str.encode)),
    (
        "github",
        st.sampled_from(
            _event_templates(
                "github/pull_request.closed.json", "github/workflow_run.completed.json"
            )
        )
        .flatmap(mutated)
        .map(_dumps),
    ),
    (
        "gitlab",
        st.sampled_from(
            _event_templates("gitlab/merge_request.open.json", "gitlab/pipeline.success.json")
        )
        .flatmap(mutated)
        .map(_dumps),
    ),
    ("generic", mutated(GENERIC_EVENT).map(_dumps)),
]


def sign(kind: str, plain: bytes) -> tuple[str, Any, bytes]:
    """Signed (and encrypted) as the platform does; done here, not in a strategy, because the
    platforms' encryption draws random IVs."""
    if kind == "lark":
        body, headers = lark_signed(plain)
        return "/api/lark/webhook/lk", headers, body
    if kind == "dingtalk":
        return "/api/dingtalk/webhook/dt", dingtalk_headers(), plain
    if kind in ("github", "gitlab", "generic"):
        event = "workflow_run" if b'"workflow_run"' in plain else "pull_request"
        target, headers = event_signed(kind, plain, event)
        return target, headers, plain
    if kind == "wecom-aibot":
        query, body = wecom_aibot_signed(plain.decode())
        return f"/api/wecom/webhook/wb?{query}", {}, body
    query, body = wecom_app_signed(plain.decode())
    return f"/api/wecom/webhook/wa?{query}", {}, body


@pytest.mark.parametrize(("kind", "strategy"), SIGNED, ids=[kind for kind, _ in SIGNED])
def test_fuzz_signed_payloads_of_the_wrong_shape(gw: Hostile, kind: str, strategy: Any) -> None:
    @fuzz
    @given(plain=strategy)
    def run(plain: bytes) -> None:
        target, headers, body = sign(kind, plain)
        check(gw, request(gw.port, "POST", target, headers=headers, body=body), plain)

    run()
