"""External events end to end: ``POST /api/events/{integrationId}/{source}`` signed as GitHub,
GitLab and a generic sender sign, against a console chat, real Redis, the real daemon.

Payloads are the documented shapes (tests/fixtures/events/README.md names the doc of each):
GitHub deliveries carry ``X-GitHub-Event``, ``X-GitHub-Delivery`` and ``X-Hub-Signature-256:
sha256=<hex HMAC-SHA256 of the body>`` (https://docs.github.com/en/webhooks/using-webhooks/
validating-webhook-deliveries); GitLab ones ``X-Gitlab-Event``, ``X-Gitlab-Token`` and
``Idempotency-Key`` (https://docs.gitlab.com/user/project/integrations/webhooks/
#delivery-headers). Every signature is computed over the exact bytes sent.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from tests.fakes.lark import FakeLark
from tests.support.configs import base_config
from tests.support.dingtalk import running as dingtalk_running
from tests.support.events import GENERIC_SECRET, generic, post, sign
from tests.support.helpers import ConsoleClient, InProcessGateway
from tests.support.lark import INTEGRATION, lark_integration
from tests.support.waits import eventually
from tests.support.wecom import AES_KEY, TOKEN

FIXTURES = Path(__file__).parent.parent / "fixtures" / "events"
GITHUB_SECRET = "It's a Secret to Everybody"
GITLAB_TOKEN = "gl-token-3f9a"
PR_CONVERSATION = "console|group:team:t:github:pr:Codertocat/Hello-World#2"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def events_config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["experts"].append(
        {"id": "ci", "kind": "echo", "stepDelayMs": 5, "charDelayMs": 1, "chunkChars": 16}
    )
    cfg["experts"][-1]["replyPrefix"] = "CI bot:"
    cfg["integrations"][0]["events"] = [
        {
            "source": "github",
            "secret": GITHUB_SECRET,
            "chatId": "team",
            "chatType": "group",
            "xpertId": "ci",
            "text": "Review this pull request.",
        },
        {"source": "gitlab", "secret": GITLAB_TOKEN, "chatId": "team"},
        {
            "source": "generic",
            "secret": GENERIC_SECRET,
            "chatId": "team",
            "allowedChatIds": ["ops"],
        },
    ]
    plain = {"id": "plain", "platform": "console", "xpertId": "echo"}
    cfg["integrations"].append(plain)  # an integration without events
    cfg["server"] = {"maxBodyBytes": 65536}
    return cfg


async def github(
    client: ConsoleClient,
    event: str,
    body: bytes,
    delivery: str,
    *,
    secret: str = GITHUB_SECRET,
    path: str = "/api/events/console/github",
) -> tuple[int, dict[str, Any]]:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": "sha256=" + sign(secret, body),
        "User-Agent": "GitHub-Hookshot/044aadd",
    }
    return await post(client, path, body, headers)


async def gitlab(
    client: ConsoleClient, event: str, body: bytes, key: str | None, token: str = GITLAB_TOKEN
) -> tuple[int, dict[str, Any]]:
    headers = {"X-Gitlab-Event": event, "X-Gitlab-Token": token}
    if key is not None:
        headers["Idempotency-Key"] = key
    return await post(client, "/api/events/console/gitlab", body, headers)


def answers(cards: list[dict[str, Any]]) -> list[str]:
    return [c["card"]["answer"] for c in cards]


async def settled(client: ConsoleClient, chat: str, count: int, wanted: str) -> list[Any]:
    """The chat's cards once there are ``count``, all done, the last one's answer saying
    ``wanted``."""

    async def check() -> list[Any] | None:
        cards = await client.cards(chat)
        done = len(cards) == count and all(c["card"]["status"] == "done" for c in cards)
        return cards if done and wanted in cards[-1]["card"]["answer"] else None

    found: list[Any] = await eventually(check, timeout=15)
    return found


async def keys(redis_client: aioredis.Redis, prefix: str) -> set[str]:
    """The gateway's keys under the test's prefix, but its replica's heartbeat."""
    found = redis_client.scan_iter(match=f"{prefix}:*", count=500)
    return {k async for k in found if not k.startswith(f"{prefix}:replica:")}


async def no_new_keys(
    client: ConsoleClient, redis_client: aioredis.Redis, prefix: str, before: set[str]
) -> None:
    await client.idle()  # a turn would have been claimed by now
    assert await keys(redis_client, prefix) - before == set()


# --- GitHub: one card per pull request ----------------------------------------------------------
async def test_pull_request_opened_synchronize_closed_update_one_card_and_reopened_posts_another(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))

    status, data = await github(
        client, "pull_request", fixture("github/pull_request.opened.json"), "d-1"
    )
    body = fixture("github/pull_request.opened.json")
    digest = "github:body-" + hashlib.sha256(body).hexdigest()[:40]  # the signed bytes' digest
    assert (status, data) == (202, {"status": "queued", "eventId": digest})
    [card] = await settled(client, "team", 1, "opened")
    answer = card["card"]["answer"]
    # the source's expert (xpertId ci), the instruction, then the summary: never the payload
    assert answer.startswith("CI bot:")
    assert "Review this pull request." in answer
    assert "[GitHub] pull request Codertocat/Hello-World#2: opened" in answer
    assert "https://github.com/Codertocat/Hello-World/pull/2" in answer
    assert "pretty simple change" not in answer  # the PR body stays out
    assert card["conversation"] == PR_CONVERSATION
    assert await redis_client.keys(f"{prefix}:*:evcard")  # the open PR's card is kept

    body = fixture("github/pull_request.synchronize.json")
    assert (await github(client, "pull_request", body, "d-2"))[0] == 202
    [same] = await settled(client, "team", 1, "new commits pushed")
    assert same["id"] == card["id"]

    body = fixture("github/pull_request.closed.json")
    assert (await github(client, "pull_request", body, "d-3"))[0] == 202
    [closed] = await settled(client, "team", 1, "closed (merged)")
    assert closed["id"] == card["id"]
    assert await redis_client.keys(f"{prefix}:*:evcard") == []  # final: the card is let go

    body = fixture("github/pull_request.reopened.json")
    assert (await github(client, "pull_request", body, "d-4"))[0] == 202
    first, second = await settled(client, "team", 2, "reopened")
    assert first["id"] == card["id"] and "closed (merged)" in first["card"]["answer"]
    assert second["id"] != card["id"] and second["conversation"] == PR_CONVERSATION


async def test_events_of_one_pull_request_sent_at_once_keep_their_order_in_one_card(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    # busyPolicy reject answers people who write during a run; an event is never turned away.
    client = await make_gateway(events_config(prefix, busyPolicy="reject"))
    for i, name in enumerate(["opened", "synchronize", "closed"]):
        body = fixture(f"github/pull_request.{name}.json")
        assert (await github(client, "pull_request", body, f"burst-{i}"))[0] == 202
    [card] = await settled(client, "team", 1, "closed (merged)")
    assert card["card"]["answer"].rindex("closed (merged)") > card["card"]["answer"].rfind("opened")
    assert await client.texts("team") == []  # no busy notice went to the chat
    assert await redis_client.keys(f"{prefix}:*:evcard") == []


async def test_events_merged_into_one_turn_read_the_instruction_once(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix, summaryWindowSeconds=1.5))
    for i, name in enumerate(["opened", "synchronize", "closed"]):
        body = fixture(f"github/pull_request.{name}.json")
        assert (await github(client, "pull_request", body, f"merged-{i}"))[0] == 202
    [card] = await settled(client, "team", 1, "closed (merged)")
    answer = card["card"]["answer"]
    assert answer.count("Review this pull request.") == 1
    assert answer.index("Review this pull request.") < answer.index("opened")
    assert answer.index("new commits pushed") < answer.index("closed (merged)")


async def test_a_workflow_run_requested_then_completed_is_one_card(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    body = fixture("github/workflow_run.requested.json")
    assert (await github(client, "workflow_run", body, "run-1"))[0] == 202
    await settled(client, "team", 1, "requested")
    body = fixture("github/workflow_run.completed.json")
    assert (await github(client, "workflow_run", body, "run-2"))[0] == 202
    [card] = await settled(client, "team", 1, "completed: failure")
    assert 'workflow run "test" #6 on octo-org/octo-repo' in card["card"]["answer"]


async def test_a_redelivery_is_a_duplicate_and_makes_no_second_turn(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    body = fixture("github/pull_request.opened.json")
    assert (await github(client, "pull_request", body, "same-guid"))[0] == 202
    status, data = await github(client, "pull_request", body, "same-guid")
    assert (status, data["status"]) == (200, "duplicate")
    [card] = await settled(client, "team", 1, "opened")
    # GitHub's redelivery, later, keeps the X-GitHub-Delivery of the original
    assert (await github(client, "pull_request", body, "same-guid"))[0] == 200
    await client.idle()
    assert [c["id"] for c in await client.cards("team")] == [card["id"]]
    assert answers(await client.cards("team")) == [card["card"]["answer"]]


async def test_the_same_signed_body_under_new_delivery_ids_is_one_turn(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    # Delivery id headers are not signed: whoever captured one delivery could resend its body
    # under a new id. The dedup id is the body's digest, for every source (issue 25).
    client = await make_gateway(events_config(prefix))
    body = fixture("github/pull_request.opened.json")
    assert (await github(client, "pull_request", body, "first-guid"))[0] == 202
    await settled(client, "team", 1, "opened")
    for i in range(3):
        status, data = await github(client, "pull_request", body, f"replayed-{i}")
        assert (status, data["status"]) == (200, "duplicate")
    mr = fixture("gitlab/merge_request.open.json")
    assert (await gitlab(client, "Merge Request Hook", mr, "key-1"))[0] == 202
    await settled(client, "team", 2, "merge request gitlabhq/gitlab-test!1: opened")
    assert (await gitlab(client, "Merge Request Hook", mr, "key-2"))[0] == 200
    assert (await gitlab(client, "Merge Request Hook", mr, None))[0] == 200
    event = {"key": "INC-9", "title": "Disk full", "status": "investigating"}
    assert (await generic(client, event, delivery="gen-1"))[0] == 202
    await settled(client, "team", 3, "INC-9: investigating")
    assert (await generic(client, event, delivery="gen-2"))[0] == 200
    assert (await generic(client, event))[0] == 200
    # a new body about the same object is a new event
    assert (await generic(client, {**event, "status": "resolved"}, delivery="gen-2"))[0] == 202
    await settled(client, "team", 3, "INC-9: resolved")


async def test_a_generic_event_signed_with_its_time_is_refused_outside_the_replay_window(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))
    event = {"key": "INC-3", "title": "Queue backlog", "status": "investigating"}
    before = await keys(redis_client, prefix)
    for stale in (time.time() - 301, time.time() + 301):  # older, or from the future
        status, data = await generic(client, {**event, "sentAt": int(stale)})
        assert (status, data) == (401, {"error": "stale event"})
    for bad in ("yesterday", True, 1e400):
        body = json.dumps({**event, "sentAt": bad}).encode()  # 1e400 reads as Infinity
        headers = {"X-Signature-256": "sha256=" + sign(GENERIC_SECRET, body)}
        assert (await post(client, "/api/events/console/generic", body, headers))[0] == 400
    assert await keys(redis_client, prefix) == before  # nothing stored
    assert (await generic(client, {**event, "sentAt": time.time()}))[0] == 202
    await settled(client, "team", 1, "INC-3: investigating")


async def test_ping_and_event_types_not_configured_are_ignored_and_store_nothing(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))
    before = await keys(redis_client, prefix)
    status, data = await github(client, "ping", fixture("github/ping.json"), "ping-1")
    assert (status, data) == (202, {"status": "ignored", "reason": "ping"})
    labeled = json.loads(fixture("github/pull_request.opened.json"))
    labeled.update(action="labeled", label={"id": 1362934389, "name": "bug", "color": "d73a4a"})
    status, data = await github(client, "pull_request", json.dumps(labeled).encode(), "lb-1")
    assert (status, data["status"]) == (202, "ignored")
    star = {
        "action": "created",
        "starred_at": "2019-05-15T15:20:40Z",
        **json.loads(fixture("github/ping.json")),
    }
    assert (await github(client, "star", json.dumps(star).encode(), "st-1"))[0] == 202
    note = {"object_kind": "note", "event_type": "note", "object_attributes": {"id": 1243}}
    status, data = await gitlab(client, "Note Hook", json.dumps(note).encode(), "n-1")
    assert (status, data["status"]) == (202, "ignored")
    await no_new_keys(client, redis_client, prefix, before)
    assert await client.messages("team") == []


# --- refusals ------------------------------------------------------------------------------------
async def test_bad_or_missing_signatures_are_401_and_store_nothing(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))
    before = await keys(redis_client, prefix)
    body = fixture("github/pull_request.opened.json")
    assert (await github(client, "pull_request", body, "x-1", secret="wrong"))[0] == 401
    tampered = body.replace(b"Update the README", b"Delete the README")
    headers = {
        "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": "x-2",
        "X-Hub-Signature-256": "sha256=" + sign(GITHUB_SECRET, body),
    }
    assert (await post(client, "/api/events/console/github", tampered, headers))[0] == 401
    del headers["X-Hub-Signature-256"]
    assert (await post(client, "/api/events/console/github", body, headers))[0] == 401
    headers["X-Hub-Signature-256"] = sign(GITHUB_SECRET, body)  # without "sha256="
    assert (await post(client, "/api/events/console/github", body, headers))[0] == 401
    mr = fixture("gitlab/merge_request.open.json")
    assert (await gitlab(client, "Merge Request Hook", mr, "k-1", token="wrong"))[0] == 401
    no_token = {"X-Gitlab-Event": "Merge Request Hook"}
    assert (await post(client, "/api/events/console/gitlab", mr, no_token))[0] == 401
    bad = {"X-Signature-256": "sha256=" + sign("other", b"{}")}
    assert (await post(client, "/api/events/console/generic", b"{}", bad))[0] == 401
    await no_new_keys(client, redis_client, prefix, before)
    assert await client.messages("team") == []


async def test_unknown_integration_or_source_is_404(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    body = fixture("github/pull_request.opened.json")
    for path in (
        "/api/events/nope/github",
        "/api/events/plain/github",  # an integration without events
        "/api/events/console/bitbucket",
    ):
        status, data = await github(client, "pull_request", body, "u-1", path=path)
        assert status == 404, path
        assert "error" in data


async def test_oversized_and_malformed_bodies_are_refused(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))
    before = await keys(redis_client, prefix)
    big = json.dumps({"key": "k", "title": "t", "status": "open", "text": "x" * 70_000}).encode()
    headers = {"X-Signature-256": "sha256=" + sign(GENERIC_SECRET, big)}
    assert (await post(client, "/api/events/console/generic", big, headers))[0] == 413
    for bad in (b"{not json", b"[1, 2]", b'{"key": "k", "title": "t"}', b'{"key": 7}'):
        headers = {"X-Signature-256": sign(GENERIC_SECRET, bad)}
        status, data = await post(client, "/api/events/console/generic", bad, headers)
        assert status == 400, (bad, data)
    body = b"{not json"
    assert (await github(client, "pull_request", body, "m-1"))[0] == 400
    assert (await gitlab(client, "Merge Request Hook", body, "m-2"))[0] == 400
    await no_new_keys(client, redis_client, prefix, before)


# --- GitLab ---------------------------------------------------------------------------------------
async def test_a_gitlab_merge_request_opened_then_merged_is_one_card(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    client = await make_gateway(events_config(prefix))
    mr = fixture("gitlab/merge_request.open.json")
    status, data = await gitlab(client, "Merge Request Hook", mr, "f5e5f430-1")
    assert (status, data["eventId"]) == (202, "gitlab:body-" + hashlib.sha256(mr).hexdigest()[:40])
    [card] = await settled(client, "team", 1, "opened")
    answer = card["card"]["answer"]
    assert answer.startswith("You said:")  # no xpertId: the integration's expert
    assert "[GitLab] merge request gitlabhq/gitlab-test!1: opened" in answer
    assert "MS-Viewport" in answer and "http://example.com/diaspora/merge_requests/1" in answer
    # a retry carries the same Idempotency-Key
    assert (await gitlab(client, "Merge Request Hook", mr, "f5e5f430-1"))[0] == 200
    merged = fixture("gitlab/merge_request.merge.json")
    assert (await gitlab(client, "Merge Request Hook", merged, "f5e5f430-2"))[0] == 202
    [same] = await settled(client, "team", 1, "merged")
    assert same["id"] == card["id"]
    assert await redis_client.keys(f"{prefix}:*:evcard") == []


async def test_a_gitlab_pipeline_without_idempotency_key_is_deduplicated_by_its_body(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    running = fixture("gitlab/pipeline.running.json")
    assert (await gitlab(client, "Pipeline Hook", running, None))[0] == 202
    assert (await gitlab(client, "Pipeline Hook", running, None))[0] == 200  # a retry
    await settled(client, "team", 1, "pipeline #31 of gitlab-org/gitlab-test (master): running")
    done = fixture("gitlab/pipeline.success.json")
    assert (await gitlab(client, "Pipeline Hook", done, None))[0] == 202
    [card] = await settled(client, "team", 1, "): success")
    assert "Pipeline for branch: master" in card["card"]["answer"]


# --- generic --------------------------------------------------------------------------------------
async def test_generic_events_about_one_key_update_one_card_until_a_final_status(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    incident = {"key": "INC-7", "title": "Checkout errors", "url": "https://status.example.com/7"}
    status, data = await generic(client, {**incident, "status": "investigating"}, delivery="i-1")
    assert status == 202
    assert data["eventId"].startswith("generic:body-")
    [card] = await settled(client, "team", 1, "INC-7: investigating")
    # the bare hex signature is taken too; without X-Delivery-Id the body is the dedup id
    update = {**incident, "status": "mitigated", "text": "Rolled back to v41."}
    assert (await generic(client, update, prefix=False))[0] == 202
    assert (await generic(client, update, prefix=False))[0] == 200
    [same] = await settled(client, "team", 1, "Rolled back to v41.")
    assert same["id"] == card["id"]
    assert (await generic(client, {**incident, "status": "Resolved"}))[0] == 202
    [same] = await settled(client, "team", 1, "INC-7: Resolved")
    assert same["id"] == card["id"]
    assert (await generic(client, {**incident, "status": "reopened"}))[0] == 202
    await settled(client, "team", 2, "INC-7: reopened")


async def test_a_generic_event_picks_its_chat_only_among_the_allowed_ones(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    client = await make_gateway(events_config(prefix))
    event = {"key": "deploy-9", "title": "Deploy api", "status": "running"}
    assert (await generic(client, {**event, "chatId": "ops"}))[0] == 202
    await settled(client, "ops", 1, "deploy-9: running")
    assert (await generic(client, {**event, "chatId": "elsewhere", "status": "done"}))[0] == 202
    await settled(client, "team", 1, "deploy-9: done")  # not allowed: the configured chat
    assert await client.messages("elsewhere") == []


async def test_an_integration_that_cannot_post_unprompted_ignores_events(
    make_gateway: Callable[..., Any], prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = events_config(prefix)
    # A WeCom AI bot in callback mode only answers what WeCom polls for: no card could be shown.
    cfg["integrations"].append(
        {
            "id": "wb",
            "platform": "wecom",
            "connectionMode": "aibot",
            "token": TOKEN,
            "encodingAesKey": AES_KEY,
            "xpertId": "echo",
            "events": [{"source": "github", "secret": GITHUB_SECRET, "chatId": "wrk-chat"}],
        }
    )
    client = await make_gateway(cfg)
    before = await keys(redis_client, prefix)
    body = fixture("github/pull_request.opened.json")
    status, data = await github(client, "pull_request", body, "wb-1", path="/api/events/wb/github")
    assert (status, data["status"]) == (202, "ignored")
    assert "unprompted" in data["reason"]
    await no_new_keys(client, redis_client, prefix, before)


async def test_on_dingtalk_markdown_each_event_of_an_object_gets_its_own_answer(
    prefix: str,
) -> None:
    # DingTalk markdown messages cannot be edited: the object's card is not reused (it would
    # swallow the later answers), and every event's turn posts its answer to the group.
    events = [{"source": "generic", "secret": GENERIC_SECRET, "chatId": "cidGROUP"}]
    async with dingtalk_running(prefix, events=events) as (fake, harness):
        client = ConsoleClient(harness.base)
        try:
            for status in ("investigating", "resolved"):
                event = {"key": "INC-9", "title": "Checkout errors", "status": status}
                assert (await generic(client, event, integration="dt"))[0] == 202

                def answered(status: str = status) -> bool:
                    return any(f"INC-9: {status}" in (m["text"] or "") for m in fake.sent())

                await eventually(answered, timeout=15)
        finally:
            await client.close()
    assert all(m["via"] == "openapi" for m in fake.sent())  # no message to reply to


async def test_on_lark_an_objects_events_create_one_card_in_the_chat_and_patch_it(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    fake = FakeLark()
    await fake.start()
    cfg = base_config(prefix)
    events = [{"source": "generic", "secret": GENERIC_SECRET, "chatId": "oc_ops"}]
    cfg["integrations"] = [lark_integration(fake, events=events)]
    gw = InProcessGateway(cfg)
    await gw.start()
    try:
        for status in ("investigating", "mitigated", "resolved", "reopened"):
            event = {"key": "INC-3", "title": "Checkout errors", "status": status}
            assert (await generic(gw.client, event, integration=INTEGRATION))[0] == 202

            def shown(status: str = status) -> bool:
                cards = [m for m in fake.messages.values() if m["msg_type"] == "interactive"]
                last = fake.card_of(cards[-1]["message_id"]) if cards else {}
                return f"INC-3: {status}" in json.dumps(last) and "Done" in json.dumps(last)

            await eventually(shown, timeout=15)
    finally:
        await gw.stop()
        await fake.stop()
    cards = [m for m in fake.messages.values() if m["msg_type"] == "interactive"]
    # created in the chat (no message to reply to); resolved finished the first card
    assert [(m["chat_id"], m["parent_id"]) for m in cards] == [("oc_ops", None)] * 2
    assert "INC-3: resolved" in json.dumps(fake.card_of(cards[0]["message_id"]))
    assert cards[0]["patches"] > 0 and not fake.of("reply")
