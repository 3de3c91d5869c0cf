"""Images and files out on DingTalk, what is DingTalk's own (the behaviour on every platform,
in every mode, is tests/conformance/test_media_out.py): the answer's markdown keeps its images
as links (robot markdown shows only images DingTalk can fetch itself), then each fetched image
follows as a ``sampleImageMsg`` whose ``photoURL`` is the ``media_id`` of an oapi
``/media/upload``, and each file of a type DingTalk takes as a ``sampleFile`` (a .txt is none:
it stays a link), in a group too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.dingtalk import SEND_PATHS, FakeDingTalk
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.media import PDF, PNG, FakeMediaHost
from tests.support.dingtalk import robot_message, running
from tests.support.helpers import serve
from tests.support.waits import eventually


@pytest.fixture
def own() -> FakeMediaHost:
    return FakeMediaHost()


@pytest.fixture
async def expert(own: FakeMediaHost) -> AsyncIterator[dict[str, Any]]:
    async for base in serve(FakeOpenAI(media=own).app()):
        own.url = base
        yield {
            "id": "gpt",
            "kind": "openai",
            "baseUrl": base + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "m",
        }


@pytest.fixture
async def stranger() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


def media_sends(fake: FakeDingTalk) -> list[tuple[str, dict[str, Any]]]:
    return [
        (c.body["msgKey"], json.loads(c.body["msgParam"]))
        for c in fake.calls
        if c.path in SEND_PATHS
        and c.status < 300
        and c.body["msgKey"] in ("sampleImageMsg", "sampleFile")
    ]


async def test_in_a_group_images_and_pdfs_follow_as_messages_and_a_txt_stays_a_link(
    prefix: str,
    redis_client: Any,
    own: FakeMediaHost,
    stranger: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    own.files["/files/chart.png"] = (PNG, "image/png")
    own.files["/files/q3.pdf"] = (PDF, "application/pdf")
    own.files["/files/notes.txt"] = (b"plain notes", "text/plain")  # no sampleFile type
    stranger.files["/x.png"] = (PNG, "image/png")
    text = (
        f"![chart]({own.url}/files/chart.png) ![x]({stranger.url}/x.png) "
        f"[the report]({own.url}/files/q3.pdf) [notes]({own.url}/files/notes.txt)"
    )
    async with running(prefix, experts=[expert], xpertId="gpt") as (fake, harness):
        status, _ = await harness.post(robot_message(fake, text, group=True))
        assert status == 200
        sends = await eventually(lambda: len(media_sends(fake)) == 2 and media_sends(fake), 15)
        answer = next(m["text"] for m in fake.sent() if m["text"] and "chart" in m["text"])
    (image_key, image), (file_key, file) = sends
    assert image_key == "sampleImageMsg"
    assert fake.media[image["photoURL"]] == ("image", "chart.png", PNG)
    assert file_key == "sampleFile"
    assert file["fileName"] == "q3.pdf" and file["fileType"] == "pdf"
    assert fake.media[file["mediaId"]] == ("file", "q3.pdf", PDF)
    assert "![" not in answer  # links only in the markdown
    assert f"[chart]({own.url}/files/chart.png)" in answer
    assert f"[x]({stranger.url}/x.png)" in answer
    assert f"[notes]({own.url}/files/notes.txt)" in answer  # a .txt stays a link
    assert stranger.hits == []
    uploads = [c for c in fake.calls if c.path == "/media/upload"]
    assert [c.body for c in uploads] == [
        {"type": "image", "filename": "chart.png"},
        {"type": "file", "filename": "q3.pdf"},
    ]
