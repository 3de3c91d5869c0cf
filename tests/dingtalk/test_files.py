"""A DingTalk file reaches an XpertAI agent: the robot file API turns the message's
downloadCode into a download URL (``POST /v1.0/robot/messageFiles/download``), the PDF is
fetched from it, uploaded to XpertAI (``POST /api/ai/contexts/file``), and the run's
``input.files`` carries the AgentFile the upload returned (tests/fakes/xpertai_files.py)."""

from __future__ import annotations

import os
from typing import Any

from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.support.dingtalk import robot_message, running
from tests.support.waits import eventually

PDF = b"%PDF-1.4\n" + os.urandom(30_000) + b"\n%%EOF\n"


async def test_a_dingtalk_pdf_is_uploaded_and_the_run_carries_its_agent_file(
    xpert: tuple[FakeXpertAI, str], prefix: str, redis_client: Any
) -> None:
    server, url = xpert
    experts = [{"id": "sales", "kind": "xpert", "baseUrl": url, "apiKey": API_KEY}]
    async with running(prefix, experts=experts, xpertId="sales") as (dingtalk, harness):
        dingtalk.files["dc-pdf"] = (PDF, "application/pdf")
        body = robot_message(dingtalk, "")
        body["msgtype"] = "file"
        body["content"] = {"downloadCode": "dc-pdf", "fileName": "contract.pdf"}
        status, _ = await harness.post(body)
        assert status == 200
        await eventually(lambda: server.requests, timeout=15)
        downloads = [c for c in dingtalk.calls if c.path == "/v1.0/robot/messageFiles/download"]
        assert downloads[0].body == {"downloadCode": "dc-pdf", "robotCode": "dingappkey"}
        assert [c.path for c in dingtalk.calls if c.path.startswith("/f/")] == ["/f/dc-pdf"]
    [stored] = server.files.stored.values()
    assert stored.data == PDF
    assert stored.agent_file["originalName"] == "contract.pdf"
    assert stored.agent_file["mimeType"] == "application/pdf"
    [thread] = server.threads
    files = server.requests[0]["input"]["message"]["input"]["files"]
    assert files == [stored.agent_file]
    assert server.files.attached == {thread: [stored.agent_file["id"]]}
