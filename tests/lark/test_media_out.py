"""Images and files out on Lark (issue 28): an OpenAI-compatible expert answers with Markdown
naming a chart and a report on its own origin and a picture on a ``mediaHosts`` host; the
final card shows the chart and the picture by the ``image_key`` the fake Lark gave their
uploads, the report follows as a file message, and an image on a host nobody allowed stays a
plain link that was never fetched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.fakes.media import PDF, PNG, FakeMediaHost, png
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import LarkHarness, answer, lark_config, message_event, reply_to
from tests.support.waits import eventually


@pytest.fixture
def own() -> FakeMediaHost:
    return FakeMediaHost()


@pytest.fixture
async def openai(own: FakeMediaHost) -> AsyncIterator[str]:
    async for url in serve(FakeOpenAI(media=own).app()):
        own.url = url
        yield url


@pytest.fixture
async def cdn() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def stranger() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def gateway(
    fake: FakeLark, prefix: str, openai: str, cdn: FakeMediaHost, redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(**integration: Any) -> LarkHarness:
        config = lark_config(prefix, fake, xpertId="gpt", **integration)
        config["experts"] = [
            {
                "id": "gpt",
                "kind": "openai",
                "baseUrl": openai + "/v1",
                "apiKey": OPENAI_KEY,
                "model": "m",
                "mediaHosts": [cdn.url.removeprefix("http://")],
            }
        ]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(fake, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


def final_reply(fake: FakeLark, message_id: str) -> Callable[[], Any]:
    """The card replying to ``message_id`` once it shows Done, and the other replies."""

    def check() -> Any:
        replies = [fake.messages[m] for m in reply_to(fake, message_id)]
        cards = [m for m in replies if m["msg_type"] == "interactive"]
        if len(cards) != 1:
            return None
        card = fake.card_of(cards[0]["message_id"])
        if card["header"]["title"]["content"] != "Done":
            return None
        return card, [m for m in replies if m["msg_type"] != "interactive"]

    return check


@pytest.mark.parametrize("card_mode", ["patch", "cardkit"])
async def test_an_answers_images_are_uploaded_and_its_file_follows_the_card(
    fake: FakeLark,
    own: FakeMediaHost,
    cdn: FakeMediaHost,
    stranger: FakeMediaHost,
    gateway: Callable[..., Any],
    card_mode: str,
) -> None:
    own.files["/files/chart.png"] = (PNG, "image/png")
    own.files["/files/q3.pdf"] = (PDF, "application/pdf")
    photo = png(3, 3)
    cdn.files["/photo.png"] = (photo, "image/png")
    stranger.files["/x.png"] = (PNG, "image/png")
    lark = await gateway(cardMode=card_mode)
    text = (
        f"![chart]({own.url}/files/chart.png) ![photo]({cdn.url}/photo.png) "
        f"![x]({stranger.url}/x.png) [the report]({own.url}/files/q3.pdf)"
    )
    status, _ = await lark.post(message_event(text, message_id="om_media1"))
    assert status == 200
    card, others = await eventually(final_reply(fake, "om_media1"), timeout=15)
    shown = answer(card)
    by_data = {data: key for key, (data, _, _) in fake.images.items()}
    assert f"![chart]({by_data[PNG]})" in shown
    assert f"![photo]({by_data[photo]})" in shown
    assert f"[x]({stranger.url}/x.png)" in shown  # not allowed: a plain link
    assert stranger.hits == []  # and never fetched
    assert f"[the report]({own.url}/files/q3.pdf)" in shown  # the link stays in the text
    [upload] = [c for c in fake.of("image_upload") if c.body["image"]["filename"] == "chart.png"]
    assert upload.body["image_type"] == "message"
    # The file message follows the final card (it is sent after it): wait for it.
    _, others = await eventually(lambda: (r := final_reply(fake, "om_media1")()) and r[1] and r)
    [message] = others
    assert message["msg_type"] == "file"
    file_key = json.loads(message["content"])["file_key"]
    assert fake.files[file_key] == (PDF, "pdf", "q3.pdf")
    # the live card showed the images as links: no card ever named an image by its URL
    for call in fake.calls:
        if call.op in ("reply", "patch", "card_create", "card_update", "card_content"):
            assert f"![chart]({own.url}" not in json.dumps(call.body)


async def test_an_image_lark_refuses_stays_a_link_and_the_card_lands(
    fake: FakeLark, own: FakeMediaHost, gateway: Callable[..., Any]
) -> None:
    own.files["/files/chart.png"] = (PNG, "image/png")
    fake.fail("image_upload", status=400, code=234001, times=5)
    lark = await gateway()
    url = f"{own.url}/files/chart.png"
    status, _ = await lark.post(message_event(f"![chart]({url})", message_id="om_media2"))
    assert status == 200
    card, others = await eventually(final_reply(fake, "om_media2"), timeout=15)
    assert f"[chart]({url})" in answer(card)
    assert others == [] and fake.images == {}


async def test_a_final_card_lark_refuses_becomes_text_with_the_links(
    fake: FakeLark, own: FakeMediaHost, gateway: Callable[..., Any]
) -> None:
    own.files["/files/chart.png"] = (PNG, "image/png")
    fake.fail("patch", status=400, code=230099, times=50)  # every card update refused
    lark = await gateway(cardMode="patch")
    url = f"{own.url}/files/chart.png"
    status, _ = await lark.post(message_event(f"![chart]({url})", message_id="om_media3"))
    assert status == 200

    def final_text() -> str | None:
        texts = [
            json.loads(m["content"])["text"]
            for m in fake.messages.values()
            if m["parent_id"] == "om_media3" and m["msg_type"] == "text"
        ]
        return texts[0] if texts else None

    text = await eventually(final_text, timeout=15)
    assert f"[chart]({url})" in text and "img_v3" not in text
