"""Files to an ``openai`` expert: with ``files: true`` a PDF goes as a ``file`` content part
(Chat Completions takes only PDFs so: the fake refuses anything else, tests/fakes/experts.py)
and a text file as text; another type, or any file without ``files``, is not passed on, the
card says so and the turn runs on the text (nothing is downloaded without ``files``)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import LarkHarness, final_card, lark_config, message_event
from tests.support.waits import eventually

PDF = b"%PDF-1.4\n" + os.urandom(5_000) + b"\n%%EOF\n"


@pytest.fixture
async def model() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        yield fake, url + "/v1"


@pytest.fixture
async def gateway(
    lark: FakeLark, prefix: str, model: tuple[FakeOpenAI, str], redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(**expert: Any) -> LarkHarness:
        config = lark_config(prefix, lark, xpertId="gpt")
        config["experts"] = [
            {
                "id": "gpt",
                "kind": "openai",
                "baseUrl": model[1],
                "apiKey": OPENAI_KEY,
                "model": "gpt-4o",
                **expert,
            }
        ]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(lark, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


async def send_file(
    lark: FakeLark, harness: LarkHarness, message_id: str, name: str, data: bytes, mime: str
) -> str:
    key = f"file_{message_id}"
    lark.resources[key] = (data, mime)
    content = {"file_key": key, "file_name": name}
    status, _ = await harness.post(
        message_event(message_id=message_id, message_type="file", content=content)
    )
    assert status == 200
    card = await eventually(final_card(lark, message_id), timeout=15)
    return json.dumps(card, ensure_ascii=False)


async def test_a_pdf_goes_to_a_model_that_takes_files_as_a_file_part(
    lark: FakeLark, model: tuple[FakeOpenAI, str], gateway: Callable[..., Any]
) -> None:
    fake, _ = model
    harness = await gateway(files=True)
    await send_file(lark, harness, "om_o1", "spec.pdf", PDF, "application/octet-stream")
    content = fake.requests[0]["messages"][-1]["content"]
    data = base64.b64encode(PDF).decode()
    assert content[0]["type"] == "text"  # the message's own text first
    assert content[1:] == [
        {
            "type": "file",
            "file": {"filename": "spec.pdf", "file_data": f"data:application/pdf;base64,{data}"},
        }
    ]
    assert lark.of("resource")[0].query == {"type": "file"}


async def test_a_text_file_goes_inline_and_a_word_file_is_refused_on_the_card(
    lark: FakeLark, model: tuple[FakeOpenAI, str], gateway: Callable[..., Any]
) -> None:
    fake, _ = model
    harness = await gateway(files=True)
    await send_file(lark, harness, "om_o2", "notes.md", "# 要点\nship it".encode(), "text/plain")
    parts = fake.requests[0]["messages"][-1]["content"]
    assert {"type": "text", "text": "File notes.md:\n# 要点\nship it"} in parts
    docx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    shown = await send_file(lark, harness, "om_o3", "plan.docx", b"PK\x03\x04 word", docx)
    assert "plan.docx was not passed on: this expert reads only PDF and text files" in shown
    assert isinstance(fake.requests[1]["messages"][-1]["content"], str)  # the text alone


async def test_without_files_the_card_says_the_expert_cannot_read_files(
    lark: FakeLark, model: tuple[FakeOpenAI, str], gateway: Callable[..., Any]
) -> None:
    fake, _ = model
    harness = await gateway()  # files: false, the default
    shown = await send_file(lark, harness, "om_o4", "spec.pdf", PDF, "application/pdf")
    assert "spec.pdf was not passed on: this expert cannot read files" in shown
    assert isinstance(fake.requests[0]["messages"][-1]["content"], str)
    assert lark.of("resource") == []  # nothing was downloaded
