"""Every button a card shows is accepted by its platform's callback path (issue 10).

For every state a turn's card can be in (``gateway.progress.Status``) and every platform, the
card is rendered with that platform's ``cards.py``, every button is taken from the rendered card,
and each is clicked the way the platform delivers the click: Lark's signed, encrypted webhook and
its long connection, DingTalk's signed link and its AI-card callback on the stream, WeCom's
encrypted app callback and AI-bot callback, the console's API. Each click must get the platform's
success answer and reach intake as an action it knows (not "ignored: unknown action"); Lark, for
one, shows the user error 200671 for any non-200 answer to a click (open.feishu.cn/document/
feishu-cards/card-callback-communication), which a refused Retry used to get. A button
the state has but the card cannot show is a gap too: those are listed in ``NOT_ON_THE_CARD``.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, get_args
from urllib.parse import urljoin

import aiohttp
import pytest
import redis.asyncio as aioredis

from adapters.console import cards as console_cards
from adapters.dingtalk import cards as dingtalk_cards
from adapters.dingtalk.events import robot_message as dingtalk_envelope
from adapters.lark import cards as lark_cards
from adapters.lark.events import message_envelope as lark_envelope
from adapters.wecom import cards as wecom_cards
from adapters.wecom.events import aibot_envelope, app_envelope, parse_app_xml
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Chat, Envelope, ReplyTo, Sender
from gateway.events import Interrupt
from gateway.progress import Progress, Status
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.lark import BOT_OPEN_ID, FakeLark
from tests.fakes.wecom import FakeWeCom
from tests.support.configs import base_config
from tests.support.dingtalk import FORM, dingtalk_config, robot_message
from tests.support.helpers import InProcessGateway, free_port
from tests.support.lark import INTEGRATION, LarkHarness, card_click, lark_config, message_event
from tests.support.waits import eventually
from tests.support.wecom import (
    CORP_ID,
    ECHO_FAST,
    aibot_click,
    aibot_message,
    app_message,
    control_subscribed,
    decrypt_reply,
    encrypt_json,
    encrypt_xml,
    integration,
    post,
    url,
)
from tests.support.wecom import card_click as wecom_click

ROOT = Path(__file__).resolve().parents[2]
CARD_TOPIC = "/v1.0/card/instances/callback"
# Buttons a state has that a platform's card cannot show (a gap, not a refusal); none today.
NOT_ON_THE_CARD: dict[str, dict[str, set[str]]] = {}


def card_states(conversation: str) -> dict[str, Progress]:
    """One Progress per status the renderer can show."""
    base = Progress(turn_id="", conversation=conversation)
    states = {
        "running": replace(base, turn_id="t-running"),
        "waiting": replace(base, turn_id="t-waiting").apply(Interrupt(prompt="Deploy it?")),
        "done": replace(base, turn_id="t-done", answer="42").finish("success"),
        "rejected": replace(base, turn_id="t-rejected").resumed("reject").finish("success"),
        "error": replace(base, turn_id="t-error").finish("error", "the model was unreachable"),
        "cancelled": replace(base, turn_id="t-cancelled").finish("cancelled"),
        "ended": replace(base, turn_id="t-ended", status="ended"),
    }
    assert {p.status for p in states.values()} == set(get_args(Status)), "a status is missing"
    return states


@dataclass
class Button:
    label: str
    payload: Any


class Recorder:
    """Every Envelope intake sees, with what became of it."""

    def __init__(self, gw: InProcessGateway) -> None:
        self.seen: list[tuple[Envelope, IngestOutcome]] = []
        pipeline = gw.gateway.pipeline
        inner = pipeline._ingest

        async def recording(envelope: Envelope) -> IngestOutcome:
            outcome = await inner(envelope)
            self.seen.append((envelope, outcome))
            return outcome

        pipeline._ingest = recording  # type: ignore[method-assign]


class Platform:
    """One platform's cards and its real inbound click path, against its fake server."""

    integration_id: str
    gw: InProcessGateway
    env: Envelope

    async def start(self, prefix: str) -> None:
        raise NotImplementedError

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        raise NotImplementedError

    async def click(self, button: Button) -> None:
        """Click; asserts the platform's success answer."""
        raise NotImplementedError

    async def close(self) -> None:
        await self.gw.stop()

    @property
    def adapter(self) -> Any:
        return self.gw.gateway.adapters[self.integration_id]

    def conversation(self) -> str:
        integ = self.gw.settings.integration(self.integration_id)
        assert integ is not None
        return self.gw.gateway.pipeline.conversation(integ, self.env)


class Lark(Platform):
    integration_id = INTEGRATION
    options: ClassVar[dict[str, Any]] = {}

    async def start(self, prefix: str) -> None:
        self.fake = FakeLark()
        await self.fake.start()
        self.gw = InProcessGateway(lark_config(prefix, self.fake, **self.options))
        await self.gw.start()
        self.harness = LarkHarness(self.fake, self.gw)
        event = message_event("show me the buttons", message_id="om_buttons")
        self.fake.receive(event)
        self.env = lark_envelope(INTEGRATION, event, BOT_OPEN_ID)

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        message_id = await self.adapter.send_card(self.env, progress, idempotency_key=key)
        card = lark_cards.render_card(progress, chat_type=self.env.chat.type)
        return [
            Button(e["text"]["content"], (message_id, e["behaviors"][0]["value"]))
            for e in card["body"]["elements"]
            if e["tag"] == "button"
        ]

    async def click(self, button: Button) -> None:
        message_id, value = button.payload
        status, answer = await self.harness.post(card_click(value, message_id=message_id))
        # What Lark shows: a non-200 answer is the user's error 200671 (card-callback doc).
        assert self.fake.judge_callback(status, answer) is None, (status, answer)
        assert answer["toast"]["type"] in ("info", "success"), answer

    async def close(self) -> None:
        await self.harness.close()
        await self.fake.stop()


class LarkLongConnection(Lark):
    options: ClassVar[dict[str, Any]] = {
        "connectionMode": "long_connection",
        "verificationToken": None,
        "encryptKey": None,
    }

    async def start(self, prefix: str) -> None:
        await super().start(prefix)
        await eventually(lambda: self.fake.sockets)

    async def click(self, button: Button) -> None:
        message_id, value = button.payload
        frame = await self.fake.push(card_click(value, message_id=message_id))
        ack = await self.fake.wait_ack(frame)
        assert ack["code"] == 200 and "data" in ack, ack  # a refused click gets no answer
        answer = json.loads(base64.b64decode(ack["data"]))
        assert self.fake.judge_callback(200, answer) is None, answer
        assert answer["toast"]["type"] in ("info", "success"), answer


class DingTalkLinks(Platform):
    """No card template: markdown / actionCard messages whose buttons are signed links."""

    integration_id = "dt"
    options: ClassVar[dict[str, Any]] = {}

    async def start(self, prefix: str) -> None:
        self.fake = FakeDingTalk()
        await self.fake.start()
        port = free_port()
        self.gw = InProcessGateway(dingtalk_config(prefix, self.fake, port, **self.options))
        self.gw.port = port
        await self.gw.start()
        self.http = aiohttp.ClientSession()
        self.env = dingtalk_envelope(robot_message(self.fake, "buttons"), integration_id="dt")

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        link = self.adapter.outbound._links(self.env, progress, f"md:{key}")
        messages = dingtalk_cards.render_messages(progress, link)
        return [Button(label, href) for m in messages for label, href in m.buttons]

    async def click(self, button: Button) -> None:
        """Open the link (a page; nothing is done yet) and press its button (a form POST)."""
        async with self.http.get(button.payload) as resp:
            page = await resp.text()
        form = FORM.search(page)
        assert resp.status == 200 and form is not None, page
        action = urljoin(button.payload, html.unescape(form["action"]))
        data = {"t": html.unescape(form["token"])}
        async with self.http.post(action, data=data) as resp:
            page = await resp.text()
        assert resp.status == 200 and "not valid" not in page, page

    async def close(self) -> None:
        await self.http.close()
        await super().close()
        await self.fake.stop()


class DingTalkCard(DingTalkLinks):
    """With a card template: the AI card, its buttons as the template declares them."""

    options: ClassVar[dict[str, Any]] = {"connectionMode": "stream", "cardTemplateId": "tpl.schema"}
    template = json.loads((ROOT / "config/examples/dingtalk-card-template.json").read_text())

    async def start(self, prefix: str) -> None:
        await super().start(prefix)
        await eventually(lambda: self.fake.stream.connects >= 1)

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        handle = await self.adapter.send_card(self.env, progress, idempotency_key=key)
        assert handle.startswith("card:"), handle
        params = dingtalk_cards.card_params(progress)
        shown = []
        for button in self.template["buttons"]:
            flag = re.fullmatch(r"(\w+) == 'true'", button["visibleWhen"])
            assert flag is not None, button
            if params[flag.group(1)] == "true":
                value = {
                    k: re.sub(r"\$\{(\w+)\}", lambda m: params[m.group(1)], v)
                    for k, v in button["params"].items()
                }
                shown.append(Button(button["label"], (handle.removeprefix("card:"), value)))
        return shown

    async def click(self, button: Button) -> None:
        track, value = button.payload
        content = {"cardPrivateData": {"actionIds": [value["action"]], "params": value}}
        data = {
            "type": "actionCallback",
            "outTrackId": track,
            "corpId": "dingcorp",
            "userId": "staff1",
            "userIdType": 1,
            "spaceType": "IM_ROBOT",
            "spaceId": "staff1",
            "content": json.dumps(content),
            "extension": "{}",
        }
        mid = await self.fake.push("CALLBACK", CARD_TOPIC, data)
        [ack] = await eventually(lambda: self.fake.stream.acks.get(mid))
        assert ack["code"] == 200 and "cardData" in json.loads(ack["data"])["response"], ack


class WeComApp(Platform):
    integration_id = "wc"
    mode = "app"

    async def start(self, prefix: str) -> None:
        self.fake = FakeWeCom(corp_id=CORP_ID)
        await self.fake.start()
        config = base_config(prefix)
        config["experts"] = [ECHO_FAST]
        config["integrations"] = [integration(self.fake, self.mode)]
        self.gw = InProcessGateway(config)
        await self.gw.start()
        await control_subscribed(self.gw)
        self.http = aiohttp.ClientSession()
        self.clicked_at = int(time.time())
        env = app_envelope("wc", parse_app_xml(app_message("alice", "buttons", "m-buttons")))
        assert env is not None
        self.env = env

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        await self.adapter.send_card(self.env, progress, idempotency_key=key)
        task_id = wecom_cards.task_id_for(key)
        card = wecom_cards.template_card(progress, task_id)
        return [Button(b["text"], (task_id, b["key"])) for b in card["button_list"]]

    async def click(self, button: Button) -> None:
        task_id, key = button.payload
        # every click in the same second: a click is told apart by its card and button too
        xml = wecom_click("alice", key, task_id, self.fake.issue_code(), self.clicked_at)
        status, body = await post(self.http, url(self.gw), *encrypt_xml(xml))
        assert status == 200, body

    async def close(self) -> None:
        await self.http.close()
        await super().close()
        await self.fake.stop()


class WeComAiBot(WeComApp):
    """The AI bot's callback mode; its template cards are the ones its long connection sends."""

    mode = "aibot"

    async def start(self, prefix: str) -> None:
        await super().start(prefix)
        env = aibot_envelope("wc", aibot_message("m-buttons", "text", {"content": "buttons"}))
        assert env is not None
        self.env = env

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        task_id = wecom_cards.task_id_for(key)
        card = wecom_cards.template_card(progress, task_id)
        return [Button(b["text"], (task_id, b["key"])) for b in card["button_list"]]

    async def click(self, button: Button) -> None:
        task_id, key = button.payload
        self.clicked_at += 1
        message = aibot_click(f"ev-{self.clicked_at}", key, task_id)
        status, body = await post(self.http, url(self.gw), *encrypt_json(message))
        assert status == 200 and decrypt_reply(body)["response_type"] == "update_template_card"


class Console(Platform):
    integration_id = "console"

    async def start(self, prefix: str) -> None:
        self.gw = InProcessGateway(base_config(prefix))
        await self.gw.start()
        self.env = Envelope(
            integration_id="console",
            platform="console",
            event_id="m-buttons",
            chat=Chat(id="dm-alice", type="p2p"),
            sender=Sender(id="alice"),
            text="buttons",
            bot_mentioned=True,
            reply_to=ReplyTo(message_id="m-buttons"),
        )

    async def buttons(self, progress: Progress, key: str) -> list[Button]:
        record_id = await self.adapter.send_card(self.env, progress, idempotency_key=key)
        card = console_cards.render_card(progress)
        return [Button(b["label"], (record_id, b["actionId"])) for b in card["buttons"]]

    async def click(self, button: Button) -> None:
        record_id, action_id = button.payload
        assert await self.gw.client.click("dm-alice", record_id, action_id) == 202


PLATFORMS: dict[str, type[Platform]] = {
    "lark": Lark,
    "lark-long-connection": LarkLongConnection,
    "dingtalk-links": DingTalkLinks,
    "dingtalk-card": DingTalkCard,
    "wecom-app": WeComApp,
    "wecom-aibot": WeComAiBot,
    "console": Console,
}


@pytest.fixture(params=list(PLATFORMS))
async def platform(
    request: pytest.FixtureRequest, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[tuple[str, Platform]]:
    started = PLATFORMS[request.param]()
    await started.start(prefix)
    try:
        yield request.param, started
    finally:
        await started.close()


async def test_every_button_of_every_card_state_is_accepted(
    platform: tuple[str, Platform],
) -> None:
    name, p = platform
    recorder = Recorder(p.gw)
    not_shown: dict[str, set[str]] = {}
    for state, progress in card_states(p.conversation()).items():
        clicked: set[str] = set()
        for button in await p.buttons(progress, f"buttons-{state}"):
            before = len(recorder.seen)
            await p.click(button)
            actions = [(e, o) for e, o in recorder.seen[before:] if e.kind == "action"]
            assert len(actions) == 1, (name, state, button.label, recorder.seen[before:])
            [(envelope, outcome)] = actions
            assert envelope.action is not None
            assert outcome.status in ("queued", "handled"), (name, state, button.label, outcome)
            clicked.add(envelope.action.id)
        offered = {b.action_id for b in progress.buttons}
        assert clicked <= offered, (name, state, clicked - offered)
        if offered - clicked:
            not_shown[state] = offered - clicked
    assert not_shown == NOT_ON_THE_CARD.get(name, {}), (name, not_shown)
