"""Images out on Lark, what is Lark's own (the behaviour on every platform is
tests/conformance/test_media_out.py): an image is uploaded as a message's image, and a final
card Lark refuses becomes a text message that keeps the picture as its link."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.fakes.media import PNG, FakeMediaHost
from tests.support.helpers import InProcessGateway, serve
from tests.support.lark import LarkHarness, lark_config, message_event
from tests.support.waits import eventually


async def test_a_final_card_lark_refuses_becomes_text_with_the_links(
    fake: FakeLark, prefix: str, redis_client: object
) -> None:
    own = FakeMediaHost()
    own.files["/files/chart.png"] = (PNG, "image/png")
    fake.fail("patch", status=400, code=230099, times=50)  # every card update refused
    openai: AsyncIterator[str] = serve(FakeOpenAI(media=own).app())
    own.url = await anext(openai)
    config = lark_config(prefix, fake, xpertId="gpt", cardMode="patch")
    config["experts"] = [
        {
            "id": "gpt",
            "kind": "openai",
            "baseUrl": own.url + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "m",
        }
    ]
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    try:
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
    finally:
        await lark.close()
        await openai.aclose()
    assert f"[chart]({url})" in text and "img_v3" not in text
    [upload] = fake.of("image_upload")  # uploaded as a message's image
    assert upload.body["image"]["filename"] == "chart.png"
    assert upload.body["image_type"] == "message"
