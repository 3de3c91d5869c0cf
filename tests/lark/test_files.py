"""A Lark file message reaches an XpertAI agent: the PDF is downloaded from the message's
resources (``type=file``), uploaded to XpertAI (``POST /api/ai/contexts/file``), and the run's
``input.files`` carries the AgentFile the upload returned, which the fake server attaches as
the real one does (tests/fakes/xpertai_files.py). A file too large for the turn is left out,
the card says so and the turn runs on the text."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, final_card, lark_config, message_event
from tests.support.waits import eventually

PDF = b"%PDF-1.7\n" + os.urandom(40_000) + b"\n%%EOF\n"


@pytest.fixture
async def gateway(
    fake: FakeLark, prefix: str, xpert: tuple[FakeXpertAI, str], redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(**integration: Any) -> LarkHarness:
        config = lark_config(prefix, fake, xpertId="sales", **integration)
        config["experts"] = [
            {"id": "sales", "kind": "xpert", "baseUrl": xpert[1], "apiKey": API_KEY}
        ]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(fake, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


def file_message(message_id: str, key: str, name: str) -> dict[str, Any]:
    content = {"file_key": key, "file_name": name}
    return message_event(message_id=message_id, message_type="file", content=content)


async def test_a_lark_pdf_is_uploaded_and_the_run_carries_its_agent_file(
    fake: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    lark = await gateway()
    # Lark serves a file's bytes without saying what they are: the name tells (PDF).
    fake.resources["file_v3_pdf"] = (PDF, "application/octet-stream")
    status, _ = await lark.post(file_message("om_pdf1", "file_v3_pdf", "季度报告.pdf"))
    assert status == 200
    await eventually(lambda: server.requests, timeout=15)
    [call] = fake.of("resource")
    assert call.path == "/open-apis/im/v1/messages/om_pdf1/resources/file_v3_pdf"
    assert call.query == {"type": "file"}
    [stored] = server.files.stored.values()
    assert stored.data == PDF  # the bytes Lark served, as they were
    assert stored.agent_file["originalName"] == "季度报告.pdf"  # UTF-8, not percent-encoded
    assert stored.agent_file["mimeType"] == "application/pdf"
    [thread] = server.threads
    assert stored.fields == {"threadId": thread, "xpertId": "sales"}
    files = server.requests[0]["input"]["message"]["input"]["files"]
    assert files == [stored.agent_file]  # the AgentFile as the upload returned it
    assert server.files.attached == {thread: [stored.agent_file["id"]]}
    assert server.files.legacy == {}
    card = await eventually(final_card(fake, "om_pdf1"), timeout=15)
    assert "Uploaded 季度报告.pdf" in json.dumps(card, ensure_ascii=False)


async def test_a_file_past_the_turns_bytes_is_left_out_and_the_card_says_so(
    fake: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    lark = await gateway(maxAttachmentBytesPerTurn=len(PDF) - 1)
    fake.resources["file_v3_big"] = (PDF, "application/pdf")
    status, _ = await lark.post(file_message("om_big1", "file_v3_big", "big.pdf"))
    assert status == 200
    card = await eventually(final_card(fake, "om_big1"), timeout=15)
    shown = json.dumps(card, ensure_ascii=False)
    mib = (len(PDF) - 1) / (1024 * 1024)
    assert f"big.pdf was left out: at most {mib:g} MiB of attachments go along" in shown
    assert server.files.uploads == []  # nothing was uploaded
    message = server.requests[0]["input"]["message"]["input"]
    assert "files" not in message  # the turn ran on the text


async def test_a_file_that_fails_to_download_is_told_and_the_turn_runs_on_the_text(
    fake: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    lark = await gateway()
    fake.fail("resource", status=400, code=234003, times=5)  # "File not in message."
    status, _ = await lark.post(file_message("om_gone1", "file_v3_gone", "gone.pdf"))
    assert status == 200
    card = await eventually(final_card(fake, "om_gone1"), timeout=15)
    shown = json.dumps(card, ensure_ascii=False)
    assert "gone.pdf was not passed on: the download from the chat failed" in shown
    assert server.files.uploads == []
    assert "files" not in server.requests[0]["input"]["message"]["input"]


async def test_a_file_sent_while_the_run_is_steered_goes_into_the_run(
    fake: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    """Issue 37 item 4: the steer carries the file as a send does (uploaded first, its AgentFile
    in the follow-up's ``message.input.files``, which XpertAI keeps as the human message's
    attachments: tests/fakes/xpertai.py), not the text only."""
    server, _ = xpert
    lark = await gateway(busyPolicy="steer")
    fake.resources["file_v3_late"] = (PDF, "application/pdf")
    status, _ = await lark.post(message_event("read this [hold]", message_id="om_s1"))
    assert status == 200
    await eventually(lambda: [r for r in server.runs.values() if r.log], timeout=15)
    status, _ = await lark.post(file_message("om_s2", "file_v3_late", "late.pdf"))
    assert status == 200
    await eventually(lambda: server.steers, timeout=15)
    server.release()
    card = await eventually(final_card(fake, "om_s1"), timeout=15)
    [stored] = server.files.stored.values()
    assert stored.data == PDF
    [steer] = server.steers
    assert steer["message"]["input"]["files"] == [stored.agent_file]
    [thread] = server.threads.values()
    [human] = [m for m in thread.messages if m.get("followUpMode") == "steer"]
    assert human["attachments"] == [stored.agent_file]
    assert len(server.requests) == 1  # the file went into the run, not into a turn of its own
    assert "Uploaded late.pdf" in json.dumps(card, ensure_ascii=False)
