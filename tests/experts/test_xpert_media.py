"""What an XpertAI run takes of a message's media, through Lark (platform and XpertAI faked at the
network): audio and video are not handed over (XpertAI fails the whole run on them,
tests/fakes/xpertai_agent.py ``media_error``) and the card names them; a parse that fails or
reads only part of a file is told; a picture's type comes from its bytes; the integration's
``projectId`` goes with the run; a tool step's icon never reaches the card."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, final_card, lark_config, message_event
from tests.support.waits import eventually


@pytest.fixture
async def gateway(
    lark: FakeLark, prefix: str, xpert: tuple[FakeXpertAI, str], redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(integ: dict[str, Any] | None = None, **expert: Any) -> LarkHarness:
        config = lark_config(prefix, lark, xpertId="sales", **(integ or {}))
        config["experts"] = [
            {"id": "sales", "kind": "xpert", "baseUrl": xpert[1], "apiKey": API_KEY, **expert}
        ]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(lark, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


async def shown(lark: FakeLark, harness: LarkHarness, message_id: str, **event: Any) -> str:
    status, _ = await harness.post(message_event(message_id=message_id, **event))
    assert status == 200
    card = await eventually(final_card(lark, message_id), timeout=40)
    return json.dumps(card, ensure_ascii=False)


def run_input(server: FakeXpertAI, index: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = server.requests[index]["input"]
    return found


async def test_audio_and_video_are_named_on_the_card_and_the_run_goes_on(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    harness = await gateway()
    lark.resources["file_mp3"] = (b"ID3\x03" + b"\x00" * 512, "audio/mpeg")
    content = {"file_key": "file_mp3", "file_name": "memo.mp3"}
    card = await shown(lark, harness, "om_a1", message_type="file", content=content)
    assert "memo.mp3 was not passed on: XpertAI does not take audio files yet" in card
    assert "Hello from xpert" in card  # the run went on, on the rest of the message
    assert "files" not in run_input(server)["message"]["input"]
    assert not server.files.stored  # not uploaded either
    # A voice message (Lark's audio type) and a video: not downloaded, named by kind.
    card = await shown(lark, harness, "om_a2", message_type="audio", content={"file_key": "file_v"})
    assert "a voice message was not passed on: XpertAI does not take audio files yet" in card
    content = {"file_key": "file_mp4", "image_key": "img_t", "file_name": "clip.mp4"}
    card = await shown(lark, harness, "om_a3", message_type="media", content=content)
    assert "clip.mp4 was not passed on: XpertAI cannot read video files in most set-ups" in card
    assert len(server.requests) == 3
    for index in range(3):
        assert "files" not in run_input(server, index)["message"]["input"]
    assert not any(c.path.endswith(("file_v", "file_mp4")) for c in lark.calls)


@pytest.mark.parametrize(
    ("outcome", "error", "told"),
    [
        ("failed", "Unsupported PDF structure", "XpertAI could not read a.pdf: Unsupported PDF"),
        ("partial", None, "XpertAI could read only part of a.pdf"),
    ],
)
async def test_a_parse_that_fails_or_reads_part_is_told(
    lark: FakeLark,
    xpert: tuple[FakeXpertAI, str],
    gateway: Callable[..., Any],
    outcome: str,
    error: str | None,
    told: str,
) -> None:
    server, _ = xpert
    server.files.parse_outcome = (outcome, error)
    harness = await gateway()
    lark.resources["file_pdf"] = (b"%PDF-1.4\n" + b"x" * 1000, "application/pdf")
    content = {"file_key": "file_pdf", "file_name": "a.pdf"}
    card = await shown(lark, harness, "om_p1", message_type="file", content=content)
    assert told in card
    assert "Hello from xpert" in card


async def test_a_pictures_type_comes_from_its_bytes(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    harness = await gateway()
    jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 64
    lark.resources["img_j"] = (jpeg, "application/octet-stream")  # the platform says "bytes"
    await shown(lark, harness, "om_i1", message_type="image", content={"image_key": "img_j"})
    [picture] = run_input(server)["message"]["input"]["files"]
    assert picture["mimeType"] == "image/jpeg"
    assert picture["fileUrl"].startswith("data:image/jpeg;base64,")


async def test_the_integrations_project_goes_with_the_run(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    harness = await gateway({"projectId": "p-1"})
    await shown(lark, harness, "om_j1", content={"text": "hi"})
    assert run_input(server)["projectId"] == "p-1"
    [thread] = server.threads.values()
    assert thread.project == "p-1"  # the server binds the thread to it


async def test_a_tool_steps_title_shows_and_its_icon_markup_never_does(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    harness = await gateway()
    card = await shown(lark, harness, "om_t1", content={"text": "[icon] weather"})
    assert "Search the wiki" in card  # the title, already a string
    assert "<svg" not in card and "svg" not in card and "M12 2" not in card


async def test_a_turns_request_grows_as_its_pictures_base64_and_stays_under_50_mb(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    harness = await gateway()
    keys = [f"img_{i}" for i in range(2)]
    size = 1536 * 1024  # over the 1 MiB aiohttp refuses as raw bytes: sent as a stream
    for key in keys:
        lark.resources[key] = (b"\xff\xd8\xff\xe0" + b"\x01" * (size - 4), "image/jpeg")
    row = [{"tag": "img", "image_key": key} for key in keys]
    content = {"title": "", "content": [[*row, {"tag": "text", "text": "two pictures"}]]}
    card = await shown(lark, harness, "om_b1", message_type="post", content=content)
    assert "Hello from xpert" in card and "left out" not in card
    assert len(run_input(server)["message"]["input"]["files"]) == 2
    [sent] = server.body_bytes
    overhead = sent - 4 * 2 * size // 3  # the request less its pictures' base64
    assert 0 < overhead < 64 * 1024
    # At the most maxAttachmentBytesPerTurn allows, the request stays under XpertAI's limit.
    assert 4 * (36 * 1024 * 1024) // 3 + overhead < 50 * 1024 * 1024
