"""A file a user sends reaches an XpertAI agent on every platform that declares it: the PDF is
downloaded from the platform (each harness checks its wire form), uploaded to XpertAI
(``POST /api/ai/contexts/file``), and the run's ``input.files`` carries the AgentFile the upload
returned, which the fake server attaches as the real one does (tests/fakes/xpertai_files.py).
A file too large for the turn, or one the platform fails to serve, is left out, the answer's
steps say so (where the platform shows steps) and the turn runs on the text; a file sent while
a run is steered goes into that run."""

from __future__ import annotations

import os

import pytest

from gateway.edge.capabilities import Capability
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.support.conformance import Harness
from tests.support.waits import eventually

PDF = b"%PDF-1.7\n" + os.urandom(40_000) + b"\n%%EOF\n"
NAME = "季度报告.pdf"  # UTF-8, not percent-encoded, where the platform names files


async def start(platform: Harness, url: str, **options: object) -> None:
    expert = {"id": "sales", "kind": "xpert", "baseUrl": url, "apiKey": API_KEY}
    await platform.start(experts=[expert], xpertId="sales", **options)
    if not platform.can(Capability.FILES_IN):  # a platform that has no file messages
        pytest.skip(f"{platform.id} declares no files in")


async def test_a_pdf_is_uploaded_and_the_run_carries_its_agent_file(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, url = xpert
    await start(platform, url)
    sent = await platform.send_file(PDF, NAME)
    await eventually(lambda: server.requests, timeout=15)
    assert len(platform.fetched()) == 1
    [stored] = server.files.stored.values()
    assert stored.data == PDF  # the bytes the platform served, as they were
    assert stored.agent_file["originalName"] == sent.extra["name"]
    assert stored.agent_file["mimeType"] == "application/pdf"
    [thread] = server.threads
    assert stored.fields == {"threadId": thread, "xpertId": "sales"}
    files = server.requests[0]["input"]["message"]["input"]["files"]
    assert files == [stored.agent_file]  # the AgentFile as the upload returned it
    assert server.files.attached == {thread: [stored.agent_file["id"]]}
    assert server.files.legacy == {}
    await platform.answer(sent)
    if platform.can(Capability.STEPS):
        assert f"Uploaded {sent.extra['name']}" in platform.written()  # the step, on the card


async def test_a_file_past_the_turns_bytes_is_left_out_and_the_answer_says_so(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, url = xpert
    await start(platform, url, maxAttachmentBytesPerTurn=len(PDF) - 1)
    sent = await platform.send_file(PDF, "big.pdf")
    answer = await platform.answer(sent)
    mib = (len(PDF) - 1) / (1024 * 1024)
    told = f"was left out: at most {mib:g} MiB of attachments go along"
    assert (told in platform.written()) == platform.can(Capability.STEPS), answer.text
    assert server.files.uploads == []  # nothing was uploaded
    assert "files" not in server.requests[0]["input"]["message"]["input"]  # ran on the text


async def test_a_file_that_fails_to_download_is_told_and_the_turn_runs_on_the_text(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, url = xpert
    await start(platform, url)
    sent = await platform.send_file(None, "gone.pdf")
    answer = await platform.answer(sent)
    told = "was not passed on: the download from the chat failed"
    assert (told in platform.written()) == platform.can(Capability.STEPS), answer.text
    assert server.files.uploads == []
    assert "files" not in server.requests[0]["input"]["message"]["input"]


async def test_a_file_sent_while_the_run_is_steered_goes_into_the_run(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    """Issue 37 item 4: the steer carries the file as a send does (uploaded first, its AgentFile
    in the follow-up's ``message.input.files``, which XpertAI keeps as the human message's
    attachments: tests/fakes/xpertai.py), not the text only."""
    server, url = xpert
    await start(platform, url, busyPolicy="steer")
    held = await platform.send("read this [hold]")
    await eventually(lambda: [r for r in server.runs.values() if r.log], timeout=15)
    await platform.send_file(PDF, "late.pdf")
    await eventually(lambda: server.steers, timeout=15)
    server.release()
    await platform.answer(held)
    [stored] = server.files.stored.values()
    assert stored.data == PDF
    [steer] = server.steers
    assert steer["message"]["input"]["files"] == [stored.agent_file]
    [thread] = server.threads.values()
    [human] = [m for m in thread.messages if m.get("followUpMode") == "steer"]
    assert human["attachments"] == [stored.agent_file]
    assert len(server.requests) == 1  # the file went into the run, not into a turn of its own
