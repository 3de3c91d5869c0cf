"""An answer's pictures and files, on every platform in every mode (issue 28): an
OpenAI-compatible expert answers with Markdown naming a chart and a report on its own origin, a
picture on a ``mediaHosts`` host and one on a host nobody allowed. Where the platform declares
images out, the chart and the picture are shown as pictures (uploaded, or inline), never by
their URL; where it declares files out, the report follows as a file; the picture nobody allowed
stays a link that was never fetched, and the report's link stays in the text. An upload the
platform refuses leaves the picture a link, and the answer lands, as where it shows no
pictures. (How each platform shows them is its own: tests/{lark,dingtalk,wecom}/
test_media_out.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.edge.capabilities import Capability
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.media import PDF, PNG, FakeMediaHost, png
from tests.support.conformance import Harness
from tests.support.helpers import serve

PHOTO = png(3, 3)


@pytest.fixture
def own() -> FakeMediaHost:
    return FakeMediaHost()


@pytest.fixture
async def cdn() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def stranger() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def expert(own: FakeMediaHost, cdn: FakeMediaHost) -> AsyncIterator[dict[str, Any]]:
    """An OpenAI-compatible expert that answers the message's text, its files on its origin."""
    async for base in serve(FakeOpenAI(media=own).app()):
        own.url = base
        yield {
            "id": "gpt",
            "kind": "openai",
            "baseUrl": base + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "m",
            "mediaHosts": [cdn.url.removeprefix("http://")],
        }


async def test_an_answers_pictures_are_shown_and_its_file_follows(
    platform_mode: Harness,
    own: FakeMediaHost,
    cdn: FakeMediaHost,
    stranger: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    platform = platform_mode
    own.files["/files/chart.png"] = (PNG, "image/png")
    own.files["/files/q3.pdf"] = (PDF, "application/pdf")
    cdn.files["/photo.png"] = (PHOTO, "image/png")
    stranger.files["/x.png"] = (PNG, "image/png")
    await platform.start(experts=[expert], xpertId="gpt")
    sent = await platform.send(
        f"![chart]({own.url}/files/chart.png) ![photo]({cdn.url}/photo.png) "
        f"![x]({stranger.url}/x.png) [the report]({own.url}/files/q3.pdf)"
    )
    answer = await platform.answer(sent)
    media = platform.media(sent)

    if platform.can(Capability.IMAGES_OUT):
        assert media.images == [PNG, PHOTO]
    else:
        assert media.images == [] and f"[chart]({own.url}/files/chart.png)" in answer.text
    if platform.can(Capability.FILES_OUT):
        assert media.files == [("q3.pdf", PDF)]
    else:
        assert media.files == []
    assert f"[x]({stranger.url}/x.png)" in answer.text  # not allowed: a plain link
    assert stranger.hits == []  # and never fetched
    assert f"[the report]({own.url}/files/q3.pdf)" in answer.text  # the link stays
    assert f"![chart]({own.url}" not in platform.written()  # never a picture by its URL
    assert platform.refused() == []


async def test_a_refused_upload_leaves_the_picture_a_link_and_the_answer_lands(
    platform: Harness, own: FakeMediaHost, expert: dict[str, Any]
) -> None:
    own.files["/files/chart.png"] = (PNG, "image/png")
    await platform.start(experts=[expert], xpertId="gpt")
    if not platform.refuse_uploads() and platform.can(Capability.IMAGES_OUT):
        pytest.skip("the platform takes no upload: its pictures travel inline")
    url = f"{own.url}/files/chart.png"
    sent = await platform.send(f"Here: ![chart]({url})")
    answer = await platform.answer(sent)
    assert f"[chart]({url})" in answer.text
    assert platform.media(sent).images == []
