"""DingTalk HTTP mode end to end: signed webhook -> Envelope -> echo expert -> markdown replies
through the sessionWebhook or the robot OpenAPI; signed action links (docs/dingtalk.md)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from structlog.testing import capture_logs

from adapters.dingtalk.cards import MAX_CHARS
from adapters.dingtalk.crypto import sign_action, verify_action
from tests.fakes.dingtalk import USER_GET_PATH, WEBHOOK_PATH, FakeDingTalk
from tests.support.dingtalk import SECRET, DingTalkHarness, robot_message, running
from tests.support.waits import eventually

TOKEN_PATH = "/v1.0/oauth2/accessToken"

Harness = tuple[FakeDingTalk, DingTalkHarness]
MARK = re.compile(r"\n\n\(\d+/\d+\)$")  # a part's marker (i/n)


@pytest.fixture
async def dt(prefix: str, redis_client: Any) -> AsyncIterator[Harness]:
    async with running(prefix) as pair:
        yield pair


async def final_answer(fake: FakeDingTalk, count: int = 2) -> list[dict[str, Any]]:
    """Waits for ``count`` messages: the "working on it" one and the answer."""
    return await eventually(lambda: len(fake.sent()) >= count and fake.sent())  # type: ignore[no-any-return]


async def test_signed_message_gets_working_then_final_answer_by_webhook(dt: Harness) -> None:
    fake, h = dt
    status, body = await h.post(robot_message(fake, "hello world"))
    assert status == 200 and json.loads(body)["status"] == "queued"
    working, final = await final_answer(fake)
    assert working["via"] == final["via"] == "webhook"
    assert working["text"] == "**Working on it…**" and working["buttons"] == ["Stop"]
    assert final["text"] == "You said:\n> hello world"
    assert final["buttons"] == ["New conversation"]
    await h.idle()  # intermediate states are not sent: messages can't be edited
    assert len(fake.sent()) == 2
    # The webhook needs no token: only the sender's email look-up (oapi) fetched one.
    assert {c.path for c in fake.calls} == {WEBHOOK_PATH, TOKEN_PATH, USER_GET_PATH}
    assert fake.token_requests == 1


async def test_bad_sign_and_stale_timestamp_are_401_and_store_nothing(dt: Harness) -> None:
    fake, h = dt
    message = robot_message(fake, "forged", msg_id="msg-once")
    assert (await h.post(message, sign="AAAA" + "="))[0] == 401
    stale = int(time.time() * 1000) - 3_601_000
    assert (await h.post(message, timestamp=stale))[0] == 401
    assert (await h.post(message, sign=""))[0] == 401
    status, body = await h.post({"not": "a message"})
    assert status == 400
    # Nothing was stored: the same msgId, properly signed, is still new.
    status, body = await h.post(message)
    assert status == 200 and json.loads(body)["status"] == "queued"
    await final_answer(fake)


async def test_a_captured_sign_pair_speaks_only_for_its_first_chat_and_sender(
    dt: Harness,
) -> None:
    """Issue 36: the sign covers the timestamp, not the body, so a captured (timestamp, sign)
    pair could carry a body naming anyone, in any chat the robot is in. The first body binds
    the pair to its chat and sender for its window: another body under it naming another
    sender or chat is 401 and stores nothing; the same sender in the same chat (two of their
    messages in one millisecond) still gets through."""
    fake, h = dt
    ts = int(time.time() * 1000)
    first = robot_message(fake, "mine", group=True, sender="alice")
    assert (await h.post(first, timestamp=ts))[0] == 200
    as_bob = robot_message(fake, "as bob", group=True, sender="bob")
    elsewhere = robot_message(fake, "elsewhere", group=True, sender="alice", conversation="cidX")
    for forged in (as_bob, elsewhere):
        status, body = await h.post(forged, timestamp=ts)
        assert status == 401 and "bad signature" in body
    again = robot_message(fake, "mine again", group=True, sender="alice")
    status, body = await h.post(again, timestamp=ts)
    assert status == 200 and json.loads(body)["status"] == "queued"
    # A fresh pair is bob's own: he is not locked out.
    assert (await h.post(as_bob, timestamp=ts + 1))[0] == 200


async def test_group_message_without_mention_is_ignored(dt: Harness) -> None:
    fake, h = dt
    _, body = await h.post(robot_message(fake, "chatter", group=True, mention=False))
    assert json.loads(body)["status"] == "ignored"
    _, body = await h.post(robot_message(fake, "@Xpert what now?", group=True))
    assert json.loads(body)["status"] == "queued"
    _, final = await final_answer(fake)
    assert final["text"] == "You said:\n> what now?"  # the leading @-mention stripped


async def test_duplicate_msg_id_gets_one_reply(dt: Harness) -> None:
    fake, h = dt
    message = robot_message(fake, "once", msg_id="msg-dup")
    statuses = [json.loads((await h.post(message))[1])["status"] for _ in range(3)]
    assert statuses == ["queued", "duplicate", "duplicate"]
    await final_answer(fake)
    await h.idle()
    assert len(fake.sent()) == 2


@pytest.mark.parametrize("group", [False, True])
async def test_expired_session_webhook_falls_back_to_openapi(dt: Harness, group: bool) -> None:
    fake, h = dt
    await h.post(robot_message(fake, "late", group=group, expired_webhook=True))
    working, final = await final_answer(fake)
    assert working["via"] == final["via"] == "openapi"
    assert final["msgKey"] == "sampleActionCard" and final["text"] == "You said:\n> late"
    path = "/v1.0/robot/groupMessages/send" if group else "/v1.0/robot/oToMessages/batchSend"
    [first, *_] = fake.bodies(path)
    assert first["robotCode"] == "dingappkey"
    if group:
        assert first["openConversationId"] == "cidGROUP"
    else:
        assert first["userIds"] == ["staff1"]
    assert fake.token_requests == 1  # cached for the second send


async def test_no_webhook_and_flow_control_retry_until_the_answer_lands(dt: Harness) -> None:
    fake, h = dt
    fake.flow_control("/v1.0/robot/groupMessages/send", times=2)
    fake.fail("/v1.0/robot/groupMessages/send", status=502, times=1)
    # The robot send APIs' own throttling answer is a 400 (the-robot-sends-a-group-message).
    fake.fail("/v1.0/robot/groupMessages/send", status=400, code="send.too.fast", times=1)
    await h.post(robot_message(fake, "busy day", group=True, webhook=False))
    _, final = await final_answer(fake)
    assert final["text"] == "You said:\n> busy day"
    fake.flow_controlled = 2  # batchSend lists the recipient as throttled twice
    await h.post(robot_message(fake, "direct", webhook=False))
    await eventually(lambda: len(fake.sent()) >= 4)
    assert fake.sent()[-1]["text"] == "You said:\n> direct"


def _token(url: str) -> str:
    return parse_qs(urlparse(url).query)["t"][0]


async def test_signed_action_links_valid_forged_and_expired(dt: Harness) -> None:
    fake, h = dt
    await h.post(robot_message(fake, "first"))
    _, final = await final_answer(fake)
    [new_url] = final["urls"]
    assert new_url.startswith(f"{h.base}/api/dingtalk/action/dt?t=")
    claims = verify_action(SECRET, _token(new_url), now_s=time.time())
    assert claims["a"] == "new" and claims["c"].startswith("dt|")

    _payload, _, mac = _token(new_url).partition(".")
    forged = new_url.replace(mac, mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB"))
    status, page = await h.click(forged)
    assert status == 403 and "not valid" in page
    stale = sign_action(
        SECRET, {k: v for k, v in claims.items() if k != "exp"}, expires_at=int(time.time()) - 1
    )
    status, _ = await h.click(new_url.replace(_token(new_url), stale))
    assert status == 403
    assert len(fake.sent()) == 2  # neither did anything

    status, page = await h.click(new_url)
    assert status == 200 and "New conversation started" in page
    notice = await eventually(lambda: len(fake.sent()) >= 3 and fake.sent()[2])
    assert notice["text"].startswith("Started a new conversation")
    assert notice["via"] == "openapi"  # a link click carries no sessionWebhook
    status, page = await h.click(new_url)  # the same link again is the same click
    assert status == 200 and "Already done" in page


async def test_stop_link_cancels_the_running_turn(prefix: str, redis_client: Any) -> None:
    slow = [{"id": "echo", "kind": "echo", "stepDelayMs": 400, "charDelayMs": 40}]
    async with running(prefix, experts=slow) as (fake, h):
        await h.post(robot_message(fake, "a long one " * 5))
        working = await eventually(lambda: fake.sent() and fake.sent()[0])
        [stop_url] = working["urls"]
        status, page = await h.click(stop_url)
        assert status == 200 and "Stop requested" in page
        final = await eventually(lambda: len(fake.sent()) >= 2 and fake.sent()[1])
        assert final["text"].endswith("*Stopped*")
        assert final["buttons"] == ["New conversation"]


async def test_a_revoked_access_token_is_fetched_again(dt: Harness) -> None:
    """An unknown or expired token is refused with 400 InvalidAuthentication (not 401)."""
    fake, h = dt
    await h.post(robot_message(fake, "first", webhook=False))
    await final_answer(fake)
    assert fake.token_requests == 1
    fake.expire_tokens()
    await h.post(robot_message(fake, "second", webhook=False))
    await eventually(lambda: len(fake.sent()) >= 4)
    assert fake.sent()[-1]["text"] == "You said:\n> second"
    assert fake.token_requests == 2
    refused = [c for c in fake.calls if c.status == 400]
    assert len(refused) == 1 and refused[0].path == "/v1.0/robot/oToMessages/batchSend"


async def test_a_long_cjk_answer_is_split_within_bytes_and_characters(
    prefix: str, redis_client: Any
) -> None:
    """Each robot message stays within DingTalk's 15000-byte msgParam (the fake refuses more
    with 400 invalidParameter.msgParam.tooLong; a CJK character counts 3 bytes) and MAX_CHARS
    characters (markdown stops rendering past ~3,500: docs/dingtalk.md, "Limits"), marked (i/n)."""
    fast = [{"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 4000}]
    async with running(prefix, experts=fast) as (fake, h):
        text = "钉钉让进步发生，" * 1500  # 12000 characters, 36000 bytes
        await h.post(robot_message(fake, text, group=True, webhook=False))
        await eventually(lambda: len(fake.sent()) >= 5)
        sends = fake.bodies("/v1.0/robot/groupMessages/send")
        assert all(len(b["msgParam"].encode()) <= 15_000 for b in sends)
        assert not [c for c in fake.calls if c.status >= 300]  # nothing was refused
        answer = [m["text"] for m in fake.sent()[1:]]
        assert len(answer) == 4 and all(len(a) <= MAX_CHARS for a in answer)
        assert [a[-7:] for a in answer] == [f"\n\n({i}/4)" for i in range(1, 5)]
        assert "".join(MARK.sub("", a) for a in answer) == f"You said:\n> {text}"


async def test_a_long_answer_does_not_hold_up_other_requests(
    prefix: str, redis_client: Any
) -> None:
    """Issue 25: splitting a 300 KB answer into robot messages rescanned the rest of the text
    for every piece, on the event loop: for half a minute no request (webhooks, action links,
    health checks) was answered. A client on a thread of its own (the gateway's loop does not
    run it) asks for /healthz all along: every request is answered within two seconds, and
    the whole answer arrives."""
    fast = [
        {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
    ]
    # Parts, not the file answer.md (issue 38): the split itself is what is under test.
    async with running(prefix, experts=fast, maxAnswerParts=1000) as (fake, h):
        done = threading.Event()
        waits: list[float] = []

        def poll() -> None:
            while not done.is_set():
                began = time.monotonic()
                with urllib.request.urlopen(f"{h.base}/healthz", timeout=60) as resp:
                    assert resp.status == 200
                waits.append(time.monotonic() - began)
                done.wait(0.05)

        poller = asyncio.create_task(asyncio.to_thread(poll))
        text = "word " * 60_000  # 300 KB: well within server.maxBodyBytes
        status, _ = await h.post(robot_message(fake, text, webhook=False))
        assert status == 200
        try:
            await eventually(
                lambda: len(fake.sent()) > 2 and fake.sent()[-1]["buttons"] == ["New conversation"],
                timeout=90,
            )
        finally:
            done.set()
            await poller
        assert waits and max(waits) < 2.0, f"a request waited {max(waits):.1f} s"
        answer = "".join(MARK.sub("", m["text"]) for m in fake.sent()[1:])
        assert answer == f"You said:\n> {text}".rstrip()  # the answer's end is trimmed


async def test_a_refused_send_is_one_log_line_with_its_code(dt: Harness) -> None:
    """Issue 25: an API refusal during a turn (here every group send, 400
    invalidParameter.robotCode.notExsit) is the platform's answer, not a gateway bug: logged as
    one warning with its code, never with a traceback or at error level."""
    fake, h = dt
    code = "invalidParameter.robotCode.notExsit"
    fake.fail("/v1.0/robot/groupMessages/send", status=400, code=code, times=1000)
    with capture_logs() as logs:
        await h.post(robot_message(fake, "refused", group=True, webhook=False))
        failed = await eventually(
            lambda: [e for e in logs if str(e["event"]).startswith("turn failed")], timeout=30
        )
    assert [e["code"] for e in failed] == [code] and failed[0]["log_level"] == "warning"
    assert failed[0]["status"] == 400 and failed[0]["error"] == "DingTalkApiError"
    noisy = [e for e in logs if e.get("exc_info") or e["log_level"] in ("error", "critical")]
    assert noisy == []
