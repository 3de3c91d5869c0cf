"""Each sender acts only as themself in a group (issue 36), console -> daemon -> fake XpertAI,
whose fake records each request's ``x-principal-user-id`` (tests/fakes/xpertai.py): a message
Bob sends while Alice's run goes on is not steered into her run (it waits for a turn of its
own, run as him); messages of two senders held in one burst become one turn each, each run as
its sender; Bob's turn does not continue Alice's XpertAI thread; every message's sender is in
the audit record of the turn it went into. ``groupIdentity: shared`` says the group is one
identity: then messages merge and share one thread, as ``principalUserId``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_input import Principal
from tests.support.admin import admin
from tests.support.helpers import ConsoleClient, serve
from tests.support.waits import eventually
from tests.support.xpert import config

PRINCIPALS = [
    {"integrationId": "console", "senderId": "alice", "userId": "u-a"},
    {"integrationId": "console", "senderId": "bob", "userId": "u-b"},
]


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    fake.principals["u-a"] = Principal("en-US", "alice@example.com", "Europe/Berlin")
    fake.principals["u-b"] = Principal("en-US", "bob@example.com", "Europe/Berlin")
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


def _runs_as(fake: FakeXpertAI) -> list[tuple[str, str | None]]:
    """Each run's thread and ``x-principal-user-id``, in the order they started."""
    return [
        (path.split("/threads/")[1].split("/")[0], named)
        for path, named in fake.principal_ids
        if path.endswith("/runs/stream")
    ]


def _inputs(fake: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in fake.requests]


async def _records(console: ConsoleClient) -> list[dict[str, Any]]:
    status, body = await admin(console, "GET", "/v1.0/audit", chatId="team")
    assert status == 200, body
    return sorted(body["result"], key=lambda r: r["timings"]["finishedAt"])


async def test_another_senders_message_is_not_steered_into_a_run_but_runs_as_them(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(
        config(prefix, url, {"principals": PRINCIPALS}, busyPolicy="steer")
    )
    await console.send("alice plans [hold]", chat="team", sender="alice", mention=True)
    await eventually(lambda: [r for r in fake.runs.values() if r.log])
    await console.send("bob's own ask", chat="team", sender="bob", mention=True)
    await console.send("alice adds the budget", chat="team", sender="alice", mention=True)
    # Alice's second message waits behind Bob's: a steer never skips him, nor takes his.
    fake.release()
    cards = await console.wait_cards(chat="team", count=3, timeout=30)
    assert fake.steers == []
    runs = _runs_as(fake)
    assert [named for _, named in runs] == ["u-a", "u-b", "u-a"]
    assert _inputs(fake) == ["alice plans [hold]", "bob's own ask", "alice adds the budget"]
    # Bob's turn has his own XpertAI thread; Alice's second continues hers.
    assert runs[0][0] == runs[2][0] != runs[1][0]
    assert len(cards) == 3
    records = await _records(console)
    assert [(r["senderId"], r["input"]["senders"]) for r in records] == [
        ("alice", ["alice"]),
        ("bob", ["bob"]),
        ("alice", ["alice"]),
    ]


async def test_a_senders_own_follow_up_is_steered_and_named_in_the_audit_record(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(
        config(prefix, url, {"principals": PRINCIPALS}, busyPolicy="steer")
    )
    await console.send("alice plans [hold]", chat="team", sender="alice", mention=True)
    await eventually(lambda: [r for r in fake.runs.values() if r.log])
    await console.send("and the budget", chat="team", sender="alice", mention=True)
    await eventually(lambda: fake.steers)
    fake.release()
    [card] = await console.wait_cards(chat="team")
    assert "(steer: and the budget)" in card["card"]["answer"]
    steer_ids = [n for p, n in fake.principal_ids if p.endswith("/runs")]
    assert steer_ids == ["u-a"]
    [record] = await _records(console)
    assert record["input"]["senders"] == ["alice"]
    assert (record["input"]["messages"], record["input"]["steered"]) == (2, 1)
    assert record["input"]["text"] == "alice plans [hold]\n\nand the budget"


async def test_two_senders_held_in_one_burst_run_as_two_turns_each_as_its_sender(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(
        config(prefix, url, {"principals": PRINCIPALS}, summaryWindowSeconds=1)
    )
    await console.send("alice asks", chat="team", sender="alice", mention=True)
    await console.send("bob asks", chat="team", sender="bob", mention=True)
    await console.wait_cards(chat="team", count=2, timeout=30)
    runs = _runs_as(fake)
    assert [named for _, named in runs] == ["u-a", "u-b"]
    assert _inputs(fake) == ["alice asks", "bob asks"]
    assert runs[0][0] != runs[1][0]  # two XpertAI users, two threads
    creates = [n for p, n in fake.principal_ids if p.endswith("/threads")]
    assert creates == ["u-a", "u-b"]
    records = await _records(console)
    assert [r["input"]["senders"] for r in records] == [["alice"], ["bob"]]


async def test_a_shared_group_identity_merges_senders_into_one_thread_as_the_default_user(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    expert = {"principals": PRINCIPALS, "groupIdentity": "shared"}
    console = await make_gateway(config(prefix, url, expert, summaryWindowSeconds=1))
    await console.send("alice asks", chat="team", sender="alice", mention=True)
    await console.send("bob asks", chat="team", sender="bob", mention=True)
    await console.wait_cards(chat="team", timeout=30)
    await console.send("alice again", chat="team", sender="alice", mention=True)
    await console.wait_cards(chat="team", count=2, timeout=30)
    runs = _runs_as(fake)
    assert [named for _, named in runs] == ["u-42", "u-42"]  # principalUserId, whoever sent
    assert runs[0][0] == runs[1][0]  # one thread for the group
    records = await _records(console)
    assert records[0]["input"]["senders"] == ["bob", "alice"]  # ran as bob's turn, both in it
    assert records[0]["input"]["messages"] == 2


async def test_url_credentials_are_masked_in_check_and_in_the_stored_snapshot(
    xpert: tuple[FakeXpertAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    redis_client: Any,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 36: an expert's ``baseUrl`` may carry credentials; ``check -v`` prints them
    masked, a session's snapshot stores them masked, and its turns still use the real URL (put
    back from the config in force, as the secrets are)."""
    import yaml

    from gateway.config.file import load_settings
    from gateway.config.settings import rebuild_expert
    from gateway.runtime.cli import main as cli_main
    from gateway.runtime.cli import settings_model
    from sessions import KeyBuilder

    fake, url = xpert
    with_creds = url.replace("http://", "http://gw:s3cr3t-t0k@")
    cfg = config(prefix, with_creds)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["check", "-v", "--config", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "s3cr3t-t0k" not in printed and "http://***@127.0.0.1" in printed
    console = await make_gateway(cfg)
    await console.send("hello")
    await console.wait_cards()
    assert fake.requests  # the turn reached XpertAI through the real URL
    keys = KeyBuilder(prefix=prefix)
    stored = [
        await redis_client.get(k)
        async for k in redis_client.scan_iter(match=keys.snapshot("*"), count=1000)
    ]
    assert stored and all("s3cr3t-t0k" not in s and "***@" in s for s in stored)
    snapshot = json.loads(stored[0])["expert"]
    settings = load_settings(cfg, model=settings_model(), env={})
    rebuilt = rebuild_expert(snapshot, settings.expert("sales"), settings.expert_kinds)
    assert rebuilt.base_url == with_creds  # type: ignore[attr-defined]


async def test_the_console_matches_only_principals_entries_that_name_it(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    """Issue 36: the console's request names its sender (and email) itself, so an entry that
    does not name the console integration never matches there; one naming it does."""
    fake, url = xpert
    entries = [
        {"email": "alice@example.com", "userId": "u-a"},  # any platform that proves the sender
        {"integrationId": "console", "senderId": "bob", "userId": "u-b"},
    ]
    console = await make_gateway(config(prefix, url, {"principals": entries}))
    await console.send("hi", chat="dm-alice", sender="alice", email="alice@example.com")
    await console.wait_cards(chat="dm-alice")
    await console.send("hi", chat="dm-bob", sender="bob")
    await console.wait_cards(chat="dm-bob")
    assert [named for _, named in _runs_as(fake)] == ["u-42", "u-b"]


def test_an_entry_naming_a_sender_must_name_its_integration() -> None:
    from gateway.experts.xpert_settings import PrincipalEntry

    with pytest.raises(ValueError, match="senderId needs integrationId"):
        PrincipalEntry.model_validate({"senderId": "ou_1", "userId": "u-1"})
