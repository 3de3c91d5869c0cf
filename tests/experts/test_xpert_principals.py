"""Each sender as their own XpertAI user: the xpert expert's ``principals`` choose every
request's ``x-principal-user-id`` (console -> daemon -> fake XpertAI -> card), and a user id
XpertAI refuses (401, tests/fakes/xpertai.py) ends the turn with a card and a log line naming
the entry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from structlog.testing import capture_logs

from gateway.experts.base import TurnInput
from gateway.experts.xpert_principals import choose, resolve, runtime_entries
from gateway.experts.xpert_settings import PrincipalEntry, XpertExpertSettings
from sessions import PrincipalStore
from sessions.keys import KeyBuilder
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.xpert import config

PRINCIPALS = [
    {"integrationId": "elsewhere", "senderId": "dave", "userId": "u-7"},  # another integration
    {"integrationId": "console", "senderId": "bob", "userId": "u-7"},
    {"integrationId": "console", "email": "Carol@Example.com", "userId": "u-9"},
    {"integrationId": "console", "senderId": "carol", "userId": "u-7"},  # never reached for her
]


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    fake.principals["u-9"] = Principal("fr-FR", "carol@example.com", "Europe/Paris")
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


def _ids(fake: FakeXpertAI, thread_id: str) -> set[str | None]:
    """The x-principal-user-id of every request about one thread."""
    return {named for path, named in fake.principal_ids if f"/threads/{thread_id}/" in path}


async def test_each_sender_runs_as_their_own_user_and_an_unmapped_one_as_the_default(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url, {"principals": PRINCIPALS}))
    senders = (("bob", None), ("carol", "carol@example.com"), ("dave", None))
    for sender, email in senders:
        await console.send(f"hi from {sender}", chat=f"dm-{sender}", sender=sender, email=email)
        await console.wait_cards(chat=f"dm-{sender}")
    emails = {}
    for thread in fake.threads.values():
        emails[thread.values["sys"]["user_email"]] = _ids(fake, thread.id)
    # bob by sender id, carol by her email (any case), dave by nothing: principalUserId u-42.
    assert emails == {
        "bob@example.com": {"u-7"},
        "carol@example.com": {"u-9"},
        "alice@example.com": {"u-42"},
    }
    creates = [named for path, named in fake.principal_ids if path.endswith("/threads")]
    assert creates == ["u-7", "u-9", "u-42"]  # each thread created as its sender's user


async def test_a_refused_user_id_ends_the_turn_with_a_card_and_a_log_naming_the_entry(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    entries = [{"integrationId": "console", "senderId": "bob", "userId": "u-gone"}]
    console = await make_gateway(config(prefix, url, {"principals": entries}))
    with capture_logs() as logs:
        await console.send("hello", chat="dm-bob", sender="bob")
        [card] = await console.wait_cards(chat="dm-bob", status="error")
    error = card["card"]["error"]
    assert (
        "HTTP 401" in error
        and "u-gone" in error
        and "principals[0] (integrationId=console, senderId=bob)" in error
    )
    assert fake.principal_ids == [("/api/ai/threads", "u-gone")]  # refused: nothing ran
    [line] = [e for e in logs if e["event"] == "xpert refused the principal user"]
    assert (
        line["entry"] == "principals[0] (integrationId=console, senderId=bob)"
        and line["user_id"] == "u-gone"
    )
    assert line["log_level"] == "warning" and line["sender_id"] == "bob"
    # The default user still works for everyone else.
    await console.send("hello", chat="dm-alice", sender="alice")
    await console.wait_cards(chat="dm-alice")  # done
    assert fake.principal_ids[-1][1] == "u-42"


async def test_a_user_without_access_to_the_assistant_is_named_on_the_card(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    fake.no_access = {"u-7"}  # a user of the tenant the assistant is not shared with
    entries = [{"integrationId": "console", "senderId": "bob", "userId": "u-7"}]
    console = await make_gateway(config(prefix, url, {"principals": entries}))
    with capture_logs() as logs:
        await console.send("hello", chat="dm-bob", sender="bob")
        [card] = await console.wait_cards(chat="dm-bob", status="error")
    error = card["card"]["error"]
    assert "user u-7" in error and "does not have access to this assistant" in error
    assert fake.principal_ids == [("/api/ai/threads", "u-7")]  # POST /threads refused: 403
    [line] = [e for e in logs if e["event"] == "xpert refused the principal user"]
    assert line["entry"] == "principals[0] (integrationId=console, senderId=bob)"
    assert line["status"] == 403
    # A thread that exists, then the access is taken away: the run stream's error frame.
    await console.send("hello", chat="dm-alice", sender="alice")
    await console.wait_cards(chat="dm-alice")
    fake.no_access.add("u-42")
    with capture_logs() as logs:
        await console.send("again", chat="dm-alice", sender="alice")

        async def refused() -> list[dict[str, Any]] | None:
            cards = await console.cards("dm-alice")
            return cards if cards[-1]["card"]["status"] == "error" else None

        cards = await eventually(refused, timeout=15)
    assert [c["card"]["status"] for c in cards] == ["done", "error"]
    assert "user u-42" in cards[-1]["card"]["error"]
    [line] = [e for e in logs if e["event"] == "xpert refused the principal user"]
    assert line["entry"] == "principalUserId" and line["user_id"] == "u-42"


def _turn(**kw: Any) -> TurnInput:
    base: dict[str, Any] = dict(
        turn_id="t", session_id="s", integration_id="lark-main", xpert_id="sales", text="x"
    )
    base.update(chat_id="c", chat_type="p2p", sender_id="ou_1")
    return TurnInput(**{**base, **kw})


def test_an_entry_matches_only_when_every_field_it_gives_does() -> None:
    settings = XpertExpertSettings.model_validate(
        {
            "id": "sales",
            "kind": "xpert",
            "baseUrl": "https://x.example/api/ai",
            "apiKey": "k",
            "principals": [
                {"integrationId": "lark-main", "email": "a@x.cn", "userId": "u-1"},
                {"integrationId": "lark-main", "userId": "u-2"},
            ],
        }
    )
    mailed = _turn(variables={"sys.user_email": "A@X.cn"})
    assert choose(settings, mailed).headers == {"x-principal-user-id": "u-1"}
    assert choose(settings, _turn()).user_id == "u-2"  # no email: the integration-wide entry
    other = choose(settings, _turn(integration_id="wecom"))
    assert other.headers == {} and other.entry == "none"  # no principalUserId: no header


def test_an_entry_that_matches_every_sender_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one of integrationId, senderId, email"):
        PrincipalEntry.model_validate({"userId": "u-1"})


def test_runtime_entries_are_the_experts_oldest_first_and_an_unreadable_one_is_left_out() -> None:
    raw = {
        "b": json.dumps(
            {
                "expertId": "sales",
                "integrationId": "lark-main",
                "senderId": "ou_1",
                "userId": "u-2",
                "createdAt": 2,
            }
        ),
        "a": json.dumps(
            {
                "expertId": "sales",
                "integrationId": "lark-main",
                "senderId": "ou_1",
                "userId": "u-1",
                "createdAt": 1,
            }
        ),
        "other": json.dumps(
            {"expertId": "hr", "integrationId": "lark-main", "senderId": "ou_1", "userId": "u-3"}
        ),
        "broken": "{not json",
        "no-user": json.dumps({"expertId": "sales", "senderId": "ou_1"}),
    }
    with capture_logs() as logs:
        entries = runtime_entries(raw, "sales")
    assert [(i, e.user_id) for i, e in entries] == [("a", "u-1"), ("b", "u-2")]
    assert sorted(e["entry_id"] for e in logs) == ["broken", "no-user"]
    chosen = choose(_settings(), _turn(), entries)
    assert (chosen.user_id, chosen.entry) == (
        "u-1",
        "runtime principal a (integrationId=lark-main, senderId=ou_1)",
    )


class _DownStore:
    async def entries_as(self, name: str, convert: Callable[[dict[str, str]], Any]) -> Any:
        raise RedisConnectionError("down")


async def test_runtime_entries_are_read_and_parsed_again_only_after_a_change(
    prefix: str, redis_client: aioredis.Redis
) -> None:
    store = PrincipalStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    other = PrincipalStore(client=redis_client, keys=KeyBuilder(prefix=prefix))  # a replica
    parsed: list[dict[str, str]] = []

    def convert(raw: dict[str, str]) -> list[str]:
        parsed.append(raw)
        return sorted(raw)

    entry = json.dumps(
        {"expertId": "sales", "integrationId": "lark-main", "senderId": "ou_1", "userId": "u-1"}
    )
    assert await store.entries_as("sales", convert) == []
    assert await other.add("a", entry, limit=2) == 1
    assert await store.entries_as("sales", convert) == ["a"]
    assert await store.entries_as("sales", convert) == ["a"]
    assert len(parsed) == 2, "an unchanged map is not parsed again"
    assert await other.add("b", entry, limit=2) == 1
    assert await other.add("c", entry, limit=2) == -1, "the version field is no entry"
    assert await store.entries_as("sales", convert) == ["a", "b"]
    assert await other.remove("a") and not await other.remove("a")
    assert await store.entries_as("sales", convert) == ["b"]
    assert await store.entries() == {"b": entry}
    assert len(parsed) == 4


async def test_with_redis_down_the_configs_entries_still_apply() -> None:
    settings = _settings({"principalUserId": "u-42"})
    with capture_logs() as logs:
        chosen = await resolve(settings, cast(PrincipalStore, _DownStore()), _turn())
    assert chosen.user_id == "u-42"
    assert logs[0]["event"] == "runtime principals unreadable; config only"


def _settings(extra: dict[str, Any] | None = None) -> XpertExpertSettings:
    base = {"id": "sales", "kind": "xpert", "baseUrl": "https://x.example/api/ai", "apiKey": "k"}
    return XpertExpertSettings.model_validate({**base, **(extra or {})})
