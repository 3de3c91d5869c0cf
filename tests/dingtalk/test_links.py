"""DingTalk button links (issue 25, item 13): opening a link changes nothing (previewers and
scanners follow GETs); the page's button POSTs the signed token, and only that POST clicks; a
POST another site makes is refused; no link outlives the record of its click."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.dingtalk.crypto import verify_action
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.dingtalk import (
    FORM,
    SECRET,
    DingTalkHarness,
    dingtalk_config,
    robot_message,
    running,
)
from tests.support.waits import eventually

Harness = tuple[FakeDingTalk, DingTalkHarness]
SLOW = [{"id": "echo", "kind": "echo", "stepDelayMs": 300, "charDelayMs": 30}]


@pytest.fixture
async def dt(prefix: str, redis_client: Any) -> AsyncIterator[Harness]:
    async with running(prefix, experts=SLOW) as pair:
        yield pair


def _token(page: str) -> str:
    form = FORM.search(page)
    assert form is not None, page
    return form["token"]


async def test_opening_a_stop_link_does_not_stop_the_turn(dt: Harness) -> None:
    fake, h = dt
    await h.post(robot_message(fake, "a long one " * 4))
    working = await eventually(lambda: fake.sent() and fake.sent()[0])
    [stop_url] = working["urls"]
    for _ in range(2):  # a link previewer, then the person, open it
        status, page = await h.get(stop_url)
        assert status == 200 and "Stop the answer being written?" in page
        assert _token(page)
    async with h.http.head(stop_url) as resp:
        assert resp.status == 200
    final = await eventually(lambda: len(fake.sent()) >= 2 and fake.sent()[1], timeout=30)
    assert final["text"] == "You said:\n> " + ("a long one " * 4).strip()  # not stopped


async def test_the_page_cannot_be_framed_or_leak_its_url(dt: Harness) -> None:
    fake, h = dt
    await h.post(robot_message(fake, "hi"))
    working = await eventually(lambda: fake.sent() and fake.sent()[0])
    async with h.http.get(working["urls"][0]) as resp:
        assert resp.status == 200
        csp = resp.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["Cache-Control"] == "no-store"
        assert resp.headers["Referrer-Policy"] == "same-origin"


async def test_a_post_from_another_site_or_without_a_token_does_nothing(dt: Harness) -> None:
    fake, h = dt
    await h.post(robot_message(fake, "first"))
    final = await eventually(lambda: len(fake.sent()) >= 2 and fake.sent()[1], timeout=30)
    [new_url] = final["urls"]
    status, page = await h.get(new_url)
    token = _token(page)
    target = new_url.partition("?")[0]
    refused = [
        ({"Origin": "https://evil.example"}, {"t": token}),
        ({"Origin": "null"}, {"t": token}),
        ({"Sec-Fetch-Site": "cross-site"}, {"t": token}),
        ({"Sec-Fetch-Site": "same-site"}, {"t": token}),
        ({"Origin": h.base}, {}),
        ({"Origin": h.base}, {"t": token + "x"}),
    ]
    for headers, form in refused:
        async with h.http.post(target, data=form, headers=headers) as resp:
            assert resp.status == 403, (headers, form)
            assert "not valid" in await resp.text()
    body = json.dumps({"t": token})  # not a form: no browser form posts JSON
    async with h.http.post(target, data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 403
    assert len(fake.sent()) == 2  # none of them did anything
    status, page = await h.click(new_url)
    assert status == 200 and "New conversation started" in page
    notice = await eventually(lambda: len(fake.sent()) >= 3 and fake.sent()[2])
    assert notice["text"].startswith("Started a new conversation")


async def test_links_live_at_most_8_hours(dt: Harness) -> None:
    """The click of a link is remembered for runtime.dedupTtlHours, at least 8 h."""
    fake, h = dt
    await h.post(robot_message(fake, "hi"))
    working = await eventually(lambda: fake.sent() and fake.sent()[0])
    token = working["urls"][0].partition("?t=")[2]
    claims = verify_action(SECRET, token, now_s=time.time())
    assert claims["exp"] - time.time() <= 8 * 3600


def test_a_link_lifetime_past_the_dedup_window_is_a_config_error(
    prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.runtime.cli import main as cli_main

    config = dingtalk_config(prefix, FakeDingTalk(), 8080, actionTokenTtlSeconds=86_400)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["check", "--config", str(path)]) == 1
    assert "actionTokenTtlSeconds" in capsys.readouterr().err
    config["integrations"][0]["actionTokenTtlSeconds"] = 8 * 3600
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["check", "--config", str(path)]) == 0


def test_the_link_bound_is_within_the_least_dedup_window() -> None:
    """LINK_TTL_MAX_S is the least runtime.dedupTtlHours: lowering that bound needs this one
    lowered too."""
    from annotated_types import Ge

    from adapters.dingtalk.settings import LINK_TTL_MAX_S
    from gateway.config.runtime import RuntimeSettings

    field = RuntimeSettings.model_fields["dedup_ttl_hours"]
    [least] = [m.ge for m in field.metadata if isinstance(m, Ge)]
    assert LINK_TTL_MAX_S <= float(least) * 3600  # type: ignore[arg-type]


def test_check_warns_of_principals_behind_http_mode(
    prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36: HTTP mode's sign does not prove the sender; ``check`` says so where the turns
    act as their senders' XpertAI users, and not in stream mode."""
    from gateway.runtime.cli import main as cli_main

    config = dingtalk_config(prefix, FakeDingTalk(), 8080, xpertId="sales")
    expert = {"id": "sales", "kind": "xpert", "baseUrl": "https://x.example/api/ai"}
    entry = {"integrationId": "dt", "senderId": "alice", "userId": "u-1"}
    config["experts"] = [{**expert, "apiKey": "k-1", "principals": [entry]}]
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["check", "--config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "act as their senders' XpertAI users" in err and "connectionMode stream" in err
    config["integrations"][0]["connectionMode"] = "stream"
    path.write_text(yaml.safe_dump(config))
    assert cli_main(["check", "--config", str(path)]) == 0
    assert "XpertAI users" not in capsys.readouterr().err
