"""DingTalk in the conformance suite: signed robot messages over HTTP, or pushed over the stream
mode's WebSocket (tests/support/dingtalk.py), to an in-process gateway; the answer read from the
fake DingTalk: markdown robot messages (after the first, "working on it", one), or the AI card's
final content followed by the markdown messages that continue it.

Modes: ``webhook`` (markdown through each message's sessionWebhook), ``openapi`` (markdown,
messages without a sessionWebhook: the robot OpenAPI), ``stream`` (markdown, messages over the
stream mode), ``ai-card`` (DingTalk's public AI card) and ``template`` (an AI card of the
operator's own template). A part is read only from the API its mode sends through, and the
buttons of a markdown answer only from its last part: a part elsewhere fails the read."""

from __future__ import annotations

import html
import io
import json
import re
import time
import uuid
import zipfile
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import aiohttp

from adapters.dingtalk.crypto import robot_sign
from tests.fakes.dingtalk import (
    CLIENT_ID,
    CLIENT_SECRET,
    SEND_PATHS,
    USER_GET_PATH,
    WEBHOOK_PATH,
    FakeDingTalk,
    _normalise,
)
from tests.fakes.limits import DINGTALK_THROTTLE, DingTalkLimits
from tests.support.conformance.base import Answer, Harness, Media, NoButton, Sent, Webhook
from tests.support.dingtalk import FORM, SECRET, dingtalk_config, robot_message
from tests.support.waits import eventually

ROBOT = "/v1.0/im/bot/messages/get"
DOWNLOAD = "/v1.0/robot/messageFiles/download"
BATCH = "/v1.0/robot/oToMessages/batchSend"
_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")
MEDIA_KEYS = ("sampleImageMsg", "sampleFile")  # an answer's pictures and files, after it


class DingTalkHarness(Harness):
    id = "dingtalk"
    platform = "dingtalk"
    modes = ("webhook", "openapi", "stream", "ai-card", "template")
    integration_id = "dt"

    async def open(self) -> None:
        self.fake = FakeDingTalk()
        await self.fake.start()
        self._known: dict[str, dict[str, str]] = {}

    async def shut(self) -> None:
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        if self.mode == "template":
            options.setdefault("cardTemplateId", "tpl.schema")
        elif self.mode == "ai-card":
            options.setdefault("cards", None)  # DingTalk's public AI card, the default
        elif self.mode == "stream":
            options.setdefault("connectionMode", "stream")
        [integ] = dingtalk_config(self.prefix, self.fake, self.port, **options)["integrations"]
        return dict(integ)

    def config(self, experts: list[dict[str, Any]] | None, **options: Any) -> dict[str, Any]:
        config = super().config(experts, **options)
        # Signed action links point at the gateway's public URL: its own port here.
        config["server"] = {"publicUrl": f"http://127.0.0.1:{self.port}"}
        return config

    async def connected(self) -> None:
        if self.mode == "stream":
            await eventually(lambda: self.fake.stream.connects >= 1)

    @property
    def markdown(self) -> bool:
        return self.mode in ("webhook", "openapi", "stream")

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        message = robot_message(
            self.fake, text, group=group, sender=user, webhook=self.mode != "openapi"
        )
        mark = self._mark(user, group)
        await self._deliver(message)
        # An answer to a message goes through the API its mode names; a click's may not.
        mark["via"] = "openapi" if self.mode == "openapi" else "webhook"
        return Sent(message["msgId"], user, group, mark)

    async def send_file(
        self, data: bytes | None, name: str, *, user: str = "alice", group: bool = False
    ) -> Sent:
        code = f"dc-{uuid.uuid4().hex[:8]}"
        if data is None:
            self.fake.fail(DOWNLOAD, status=400, code="invalidParameter.downloadCode", times=5)
        else:
            self.fake.files[code] = (data, "application/pdf")
        message = robot_message(
            self.fake, "", group=group, sender=user, webhook=self.mode != "openapi"
        )
        message["msgtype"] = "file"
        message["content"] = {"downloadCode": code, "fileName": name}
        mark = self._mark(user, group)
        await self._deliver(message)
        return Sent(message["msgId"], user, group, {**mark, "name": name})

    def fetched(self) -> list[str]:
        """The robot file API turns a downloadCode into a URL, which is then fetched."""
        asked = [c.body for c in self.fake.calls if c.path == DOWNLOAD and c.status < 300]
        got = [c.path for c in self.fake.calls if c.path.startswith("/f/")]
        assert [f"/f/{b['downloadCode']}" for b in asked] == got, (asked, got)
        assert all(b["robotCode"] == "dingappkey" for b in asked)
        return got

    async def _deliver(self, message: dict[str, Any]) -> None:
        """As DingTalk does: pushed over the stream, or posted signed to the webhook."""
        if self.mode == "stream":
            await self.fake.push("CALLBACK", ROBOT, message)
            return
        ts = str(message["createAt"])
        headers = {"timestamp": ts, "sign": robot_sign(SECRET, ts)}
        url = f"http://127.0.0.1:{self.gateway.port}/api/dingtalk/webhook/{self.integration_id}"
        async with self.gateway.client.http.post(url, json=message, headers=headers) as resp:
            assert resp.status == 200, resp.status

    def webhook(self, payload: bytes) -> Webhook | None:
        if self.mode == "stream":
            return None
        return Webhook(self._path, {}, _signed(SECRET, int(time.time() * 1000)), payload)

    def misshapen(self) -> list[bytes]:
        wrong_text = robot_message(self.fake, "x")
        wrong_text["text"] = {"content": 5}
        wrong_chat = robot_message(self.fake, "x", conversationType=7)
        return [json.dumps(wrong_text).encode(), json.dumps(wrong_chat).encode()]

    def forged(self) -> dict[str, tuple[Webhook, int]]:
        message = robot_message(self.fake, "forged", sender="mallory", webhook=True)
        body, now = json.dumps(message).encode(), int(time.time() * 1000)
        unsigned = {"Content-Type": "application/json"}
        return {
            "wrong signature": (Webhook(self._path, {}, _signed("not-the-secret", now), body), 401),
            "stale timestamp": (
                Webhook(self._path, {}, _signed(SECRET, now - 3_600_000), body),
                401,
            ),
            "unsigned": (Webhook(self._path, {}, unsigned, body), 401),
        }

    @property
    def _path(self) -> str:
        return f"/api/dingtalk/webhook/{self.integration_id}"

    def _mark(self, user: str, group: bool) -> dict[str, Any]:
        """Where the answer to what happens next starts: the messages and cards so far."""
        return {"from": len(self._sent()), "cards": len(self.fake.cards)}

    def _messages(self, sent: Sent) -> list[dict[str, Any]]:
        """The chat's messages since ``sent``: in a group, not the 1:1 messages to the people
        asked to Confirm (``oToMessages/batchSend``, read by :meth:`click`)."""
        got = self._sent()[int(sent.extra["from"]) :]
        return [
            m
            for m in got
            if not (sent.group and m.get("private")) and m.get("msgKey") not in MEDIA_KEYS
        ]

    def _sent(self) -> list[dict[str, Any]]:
        """``FakeDingTalk.sent``, each message marked ``private`` when it went 1:1."""
        out: list[dict[str, Any]] = []
        for call in self.fake.calls:
            if call.status >= 300 or not call.delivered:
                continue
            if call.path == WEBHOOK_PATH:
                content, via = call.body[call.body["msgtype"]], "webhook"
            elif call.path in SEND_PATHS:
                content, via = json.loads(call.body["msgParam"]), "openapi"
            else:
                continue
            key = call.body.get("msgKey")  # the OpenAPI's message type (a picture, a file...)
            out.append(
                {"via": via, "private": call.path == BATCH, "msgKey": key, **_normalise(content)}
            )
        return out

    def _private(self, user: str) -> dict[str, str]:
        """The action links the bot sent ``user`` in a 1:1 message, newest last, by label."""
        links: dict[str, str] = {}
        for call in self.fake.calls:
            if call.path != BATCH or call.status >= 300 or not call.delivered:
                continue
            if user in call.body["userIds"]:
                param = _normalise(json.loads(call.body["msgParam"]))
                links.update(zip(param["buttons"], param["urls"], strict=True))
        return links

    def _card(self, sent: Sent) -> Any:
        cards = list(self.fake.cards.values())[int(sent.extra["cards"]) :]
        return cards[0] if cards else None

    def seen(self, sent: Sent) -> Answer | None:
        messages = self._messages(sent)
        if self.markdown:
            # The first message is the "working on it" one; the answer is the next, or the next
            # n marked (1/n)..(n/n); what follows is another turn's.
            if len(messages) < 2:
                return None
            first = _MARK.search(messages[1]["text"] or "")
            messages = messages[: 1 + (int(first[2]) if first else 1)]
        via = sent.extra.get("via")
        assert via is None or all(m["via"] == via for m in messages), [m["via"] for m in messages]
        if self.markdown:
            parts = [m["text"] for m in messages[1:]]
            assert not any(m["buttons"] for m in messages[1:-1]), "buttons on the last part only"
            buttons, title = list(messages[-1]["buttons"]), str(messages[-1]["title"] or "")
        else:
            # Final: the last stream frame (a template), or flowStatus 3, "finished" (both).
            card = self._card(sent)
            if card is None or not (card.finalized or card.params.get("flowStatus") == "3"):
                return None
            # The public card's final state is one PUT of its whole msgContent; a template's is
            # its last stream frame. Its option links are in staticMsgContent.
            if self.mode == "ai-card":
                shown = card.params.get("msgContent", "")
            else:
                shown = card.stream.get("content", "")
            parts = [shown, *(m["text"] for m in messages)]
            links = re.findall(r"\[([^\]]+)\]\((\S+?)\)", card.params.get("staticMsgContent", ""))
            buttons, title = [label for label, _ in links], ""
        last = _MARK.search(parts[-1])
        if last and len(parts) != int(last[2]):
            return None
        return Answer(parts, buttons, title)

    def _links(self, sent: Sent) -> dict[str, str]:
        """The answer's action links as first read: a stale answer's links can still be opened."""
        known = self._known.setdefault(sent.id, {})
        answer = self.seen(sent)
        if self.markdown and answer is not None:
            last = self._messages(sent)[len(answer.parts)]  # after the "working on it" one
            links = dict(zip(last["buttons"], last["urls"], strict=True))
        else:
            card = self._card(sent)
            static = card.params.get("staticMsgContent", "") if card is not None else ""
            links = dict(re.findall(r"\[([^\]]+)\]\((\S+?)\)", static))
        for label, url in links.items():
            known.setdefault(label, url)
        return known

    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        """A signed action link, opened as a person does: a page, then its button, which
        posts its form back as a browser does (same origin). The link acts as whom it names:
        ``user`` cannot be another person here."""
        who = user or sent.user
        # In a group a Confirm / Reject goes to each person asked in a 1:1 message, signed for
        # them; elsewhere the links are the answer's, signed for the asker.
        links = self._private(who) if sent.group else self._links(sent)
        link = links.get(label)
        if link is None or (not sent.group and who != sent.user):
            raise NoButton(label)
        mark = self._mark(sent.user, sent.group)
        http = self.gateway.client.http
        async with http.get(link) as resp:
            status, page = resp.status, await resp.text()
        form = FORM.search(page)
        if status == 200 and form is not None:
            action = urljoin(link, html.unescape(form["action"]))
            data = {"t": html.unescape(form["token"])}
            headers = {"Origin": f"http://127.0.0.1:{self.port}", "Sec-Fetch-Site": "same-origin"}
            async with http.post(action, data=data, headers=headers) as resp:
                status, page = resp.status, await resp.text()
        assert status == 200, (status, page)
        return Sent(f"click-{label}", who, sent.group, mark), page

    def shown(self) -> list[str]:
        texts = [str(m["text"] or "") for m in self._sent()]
        for card in self.fake.cards.values():
            texts += [card.params.get("msgContent", ""), card.stream.get("content", "")]
        return texts

    def files(self) -> list[tuple[str, bytes]]:
        """``sampleFile`` messages. ``/media/upload`` and ``sampleFile`` take no ``.md``
        (DOC:upload-media-files, DOC:robot-message-type): an answer.md goes as answer.zip
        holding it alone, unpacked here."""
        out: list[tuple[str, bytes]] = []
        for call in self.fake.calls:
            if call.path not in SEND_PATHS or call.status >= 300 or not call.delivered:
                continue
            if call.body["msgKey"] != "sampleFile":
                continue
            param = json.loads(call.body["msgParam"])
            kind, name, data = self.fake.media[param["mediaId"]]
            assert kind == "file" and name == param["fileName"]
            if name == "answer.zip":
                assert param["fileType"] == "zip"
                with zipfile.ZipFile(io.BytesIO(data)) as archive:
                    assert archive.namelist() == ["answer.md"]
                    name, data = "answer.md", archive.read("answer.md")
            out.append((name, data))
        return out

    def member(self, user: str, email: str, *, work_address: bool = False) -> None:
        field = "org_email" if work_address else "email"
        self.fake.users[user] = {"name": user.capitalize(), "email": "", field: email}

    def lookups(self) -> list[str]:
        return [str(c.body["userid"]) for c in self.fake.calls if c.path == USER_GET_PATH]

    def written(self) -> str:
        return json.dumps([c.body for c in self.fake.calls], ensure_ascii=False)

    def refused(self) -> list[str]:
        return [
            f"{c.method} {c.path} {c.status}"
            for c in self.fake.calls
            if c.status >= 300 or not c.delivered
        ]

    def media(self, sent: Sent) -> Media:
        """The ``sampleImageMsg`` and ``sampleFile`` messages after the mark (counted as
        ``FakeDingTalk.sent`` counts), by the bytes of the oapi ``/media/upload`` each names."""
        sends = [
            (c.path, c.body)
            for c in self.fake.calls
            if c.status < 300 and c.delivered and (c.path in SEND_PATHS or c.path == WEBHOOK_PATH)
        ]
        out = Media()
        for path, body in sends[int(sent.extra["from"]) :]:
            if path not in SEND_PATHS or body["msgKey"] not in MEDIA_KEYS:
                continue
            param = json.loads(body["msgParam"])
            if body["msgKey"] == "sampleImageMsg":
                out.images.append(self.fake.media[param["photoURL"]][2])
            else:
                out.files.append((param["fileName"], self.fake.media[param["mediaId"]][2]))
        return out

    def refuse_uploads(self) -> bool:
        self.fake.refuse_uploads(40006, times=1000)
        return True

    def fake_figures(self) -> dict[str, int]:
        return {"calls_per_second": DingTalkLimits().api_second.limit}

    async def limit_fake(
        self,
        clock: Callable[[], float] | None = None,
        *,
        per_api: int | None = None,
    ) -> float:
        figures = {"per_second": per_api} if per_api is not None else {}
        await self.fake.stop()
        self.fake = FakeDingTalk(limits=DingTalkLimits(clock, **figures))
        await self.fake.start()
        self._token = ""
        return 1000.0

    async def call_api(self, api: str) -> str:
        """``a``: a robot message to a group; ``b``: one to users (another API);
        ``chat:<id>``: a robot message to that group."""
        message = {"robotCode": CLIENT_ID, "msgKey": "sampleText"}
        message["msgParam"] = json.dumps({"content": "hi"})
        if api == "b":
            path, body = SEND_PATHS[1], {**message, "userIds": ["alice"]}
        else:
            group = "cid_a" if api == "a" else api.removeprefix("chat:")
            path, body = SEND_PATHS[0], {**message, "openConversationId": group}
        async with aiohttp.ClientSession(base_url=self.fake.base) as http:
            if not getattr(self, "_token", ""):
                login = {"appKey": CLIENT_ID, "appSecret": CLIENT_SECRET}
                async with http.post("/v1.0/oauth2/accessToken", json=login) as r:
                    self._token = (await r.json())["accessToken"]
            headers = {"x-acs-dingtalk-access-token": self._token}
            async with http.post(path, json=body, headers=headers) as r:
                status, answer = r.status, await r.json()
        if status == 200:
            return "ok"
        code = str(answer.get("code"))
        throttled = any(t in code for t in DINGTALK_THROTTLE)
        return "throttled" if throttled else f"refused {status} {code}"

    def throttles(self) -> list[str]:
        if self.fake.limits is None:
            return []
        return [f"{a.api} {a.status} {a.code}" for a in self.fake.limits.throttled()]

    paced_mode = "openapi"  # an answer through the robot OpenAPI (a sessionWebhook is none)

    def throttle_next(self) -> float:
        code = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
        self.fake.fail(SEND_PATHS[1], status=403, code=code, times=1)
        return 1.0  # DingTalk names no reset: a second, its QPS window

    def after_throttle(self) -> float | None:
        assert self.fake.limits is not None, "limit_fake() first"
        sends = [a for a in self.fake.limits.answers if a.path == SEND_PATHS[1]]
        refused = [a.at_ms for a in sends if a.status == 403]
        served = [a.at_ms for a in sends if a.status < 300 and refused and a.at_ms > refused[-1]]
        return min(served) - refused[-1] if served else None

    def chat_id(self, sent: Sent) -> str:
        return "cidGROUP" if sent.group else f"cidP2P{sent.user}"  # tests/support/dingtalk.py

    def chat_files(self) -> list[tuple[str, bytes]]:
        return [
            (param["fileName"], self.fake.media[param["mediaId"]][2])
            for c in self.fake.calls
            if c.status < 300 and c.path in SEND_PATHS and c.body["msgKey"] == "sampleFile"
            for param in [json.loads(c.body["msgParam"])]
        ]


def _signed(secret: str, ts_ms: int) -> dict[str, str]:
    """The headers of a robot callback signed with ``secret`` at ``ts_ms``."""
    ts = str(ts_ms)
    return {"Content-Type": "application/json", "timestamp": ts, "sign": robot_sign(secret, ts)}
