"""WeCom in the conformance suite, two platforms in one adapter: a self-built app (``wecom-app``:
encrypted XML callbacks, the answer a template card and markdown messages to the user) and the
AI bot over its long connection (``wecom-aibot``: frames pushed by the fake's WebSocket, the
answer a stream reply and markdown messages after it). Payloads are built with wechatpy, the SDK,
not our adapter (tests/support/wecom.py)."""

from __future__ import annotations

import base64
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp

from adapters.wecom.cards import STREAM_BYTES
from tests.fakes.wecom import FREQUENCY_LIMIT, MEMBER_PER_MINUTE, PER_MINUTE, FakeWeCom
from tests.support.conformance.base import Answer, Harness, Media, NoButton, Sent, Webhook
from tests.support.waits import eventually
from tests.support.wecom import (
    CORP_ID,
    aibot_message,
    app_message,
    card_click,
    control_subscribed,
    encrypt_xml,
    integration,
)

_MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


class _WeCom(Harness):
    platform = "wecom"
    integration_id = "wc"

    async def open(self) -> None:
        self.fake = FakeWeCom(corp_id=CORP_ID)
        await self.fake.start()

    async def shut(self) -> None:
        await self.fake.stop()

    def integration(self, **options: Any) -> dict[str, Any]:
        return integration(self.fake, self.mode, **options)

    async def connected(self) -> None:
        await control_subscribed(self.gateway)

    def member(self, user: str, email: str, *, work_address: bool = False) -> None:
        field = "biz_mail" if work_address else "email"
        self.fake.users[user] = {"name": user.capitalize(), "email": "", field: email}

    def lookups(self) -> list[str]:
        return [str(body["userid"]) for path, body in self.fake.calls if path == "user/get"]

    def written(self) -> str:
        bodies = [self.fake.sent, self.fake.updates, self.fake.responses, self.fake.ws.frames]
        return json.dumps(bodies, ensure_ascii=False)

    def fake_figures(self) -> dict[str, int]:
        return {"calls_per_minute": PER_MINUTE, "chat_sends_per_minute": MEMBER_PER_MINUTE}

    async def limit_fake(
        self,
        clock: Callable[[], float] | None = None,
        *,
        per_api: int | None = None,
    ) -> float:
        """The fake always keeps WeCom's limits (per API a minute, per member a minute: its
        minute may be shortened, ``minute_s``); here on ``clock``, ``per_api`` a minute."""
        if clock is not None:
            self.fake.clock = lambda: clock() / 1000
        else:  # the real clock: a minute of a second, so that a test waits seconds
            self.fake.minute_s = 1.0
        if per_api is not None:
            self.fake.per_minute = per_api
        return self.fake.minute_s * 1000

    async def call_api(self, api: str) -> str:
        """``a``: a member's details; ``b``: an app message to a member (another API);
        ``chat:<id>``: an app message to that member."""
        user = "bob" if api in ("a", "b") else api.removeprefix("chat:")
        async with aiohttp.ClientSession(base_url=self.fake.base_url) as http:
            query = {"corpid": CORP_ID, "corpsecret": self.fake.secret}
            async with http.get("/cgi-bin/gettoken", params=query) as r:
                token = (await r.json())["access_token"]
            if api == "a":
                call = http.get("/cgi-bin/user/get", params={"access_token": token, "userid": user})
            else:
                body = {
                    "touser": user,
                    "msgtype": "text",
                    "agentid": 218,
                    "text": {"content": "hi"},
                }
                call = http.post("/cgi-bin/message/send", params={"access_token": token}, json=body)
            dropped = len(self.fake.dropped)
            async with call as r:
                errcode = (await r.json())["errcode"]
        if errcode == FREQUENCY_LIMIT:
            return "throttled"
        if errcode:
            return f"refused {errcode}"
        return "dropped" if len(self.fake.dropped) > dropped else "ok"

    def throttles(self) -> list[str]:
        return [f"{p} {c}" for p, c in self.fake.refusals if c == FREQUENCY_LIMIT]

    def budget(self, per_api: int) -> dict[str, Any]:
        own = self.integration()["platformLimits"] if self.id == "wecom-app" else {}
        return {**own, "callsPerSecond": per_api}

    def throttle_next(self) -> float:
        """One app message a (shortened) minute: the answer after the card gets 45009, and
        WeCom keeps the API blocked for the rest of the minute (doc 90454)."""
        self.fake.limit("message/send", per_minute=1)
        return self.fake.minute_s

    def after_throttle(self) -> float | None:
        sends = [(at, code) for at, path, code in self.fake.checked if path == "message/send"]
        refused = [at for at, code in sends if code == FREQUENCY_LIMIT]
        served = [at for at, code in sends if code == 0 and refused and at > refused[-1]]
        return (min(served) - refused[-1]) * 1000 if served else None


class WeComAppHarness(_WeCom):
    """WeCom drops app messages past 30 a minute to one member (doc 90454): the fake's minute is
    a second here, and the gateway's member window too, so an answer of 30 messages and more
    goes out in seconds (a test of the limits sets its own ``platformLimits``)."""

    id = "wecom-app"
    modes = ("app",)

    async def open(self) -> None:
        await super().open()
        self.fake.minute_s = 1.0

    def integration(self, **options: Any) -> dict[str, Any]:
        limits = {"chatSendsPerSecond": 30, "chatSendsPerMinute": None, "chatSendsPerHour": None}
        return super().integration(**{"platformLimits": limits, **options})

    async def post(self, plain_xml: str) -> None:
        query, body = encrypt_xml(plain_xml)
        url = f"http://127.0.0.1:{self.gateway.port}/api/wecom/webhook/{self.integration_id}"
        async with self.gateway.client.http.post(url, params=query, data=body.encode()) as resp:
            assert resp.status == 200, resp.status

    def webhook(self, payload: bytes) -> Webhook | None:
        query, body = encrypt_xml(payload.decode("utf-8", "replace"))
        return Webhook(self._path, query, {}, body.encode())

    def misshapen(self) -> list[bytes]:
        nested_sender = app_message("alice", "x", "1").replace(
            "<![CDATA[alice]]>", "<a>alice</a>", 1
        )
        nested_type = "<xml><FromUserName>u</FromUserName><MsgType><a/></MsgType></xml>"
        return [nested_sender.encode(), nested_type.encode()]

    def forged(self) -> dict[str, tuple[Webhook, int]]:
        xml = app_message("mallory", "forged", str(uuid.uuid4().int % 10**12))
        query, body = encrypt_xml(xml)
        stale_query, stale = encrypt_xml(xml, timestamp=int(time.time()) - 3600)
        wrong = {**query, "msg_signature": "0" * 40}
        return {
            "wrong signature": (Webhook(self._path, wrong, {}, body.encode()), 401),
            "stale timestamp": (Webhook(self._path, stale_query, {}, stale.encode()), 401),
            # WeCom's callback without its query parameters is no callback: a 400.
            "unsigned": (Webhook(self._path, {}, {}, body.encode()), 400),
        }

    @property
    def _path(self) -> str:
        return f"/api/wecom/webhook/{self.integration_id}"

    def _mark(self, user: str) -> dict[str, Any]:
        return {"from": len(self.fake.texts(user)), "updates": len(self.fake.updates)}

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        assert not group, "a WeCom app talks with one member at a time"
        msg_id = str(uuid.uuid4().int % 10**12)
        mark = self._mark(user)
        await self.post(app_message(user, text, msg_id))
        return Sent(msg_id, user, group, mark)

    async def send_file(
        self, data: bytes | None, name: str, *, user: str = "alice", group: bool = False
    ) -> Sent:
        """A file message names its file by MediaId (``media/get``); an unknown id is 40007."""
        media_id = f"m-{uuid.uuid4().hex[:8]}"
        if data is not None:
            self.fake.media[media_id] = (data, "application/pdf")
        msg_id = str(uuid.uuid4().int % 10**12)
        xml = app_message(user, "x", msg_id).replace(
            "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[x]]></Content>",
            f"<MsgType><![CDATA[file]]></MsgType><MediaId><![CDATA[{media_id}]]></MediaId>"
            f"<FileName><![CDATA[{name}]]></FileName>",
        )
        mark = self._mark(user)
        await self.post(xml)
        return Sent(msg_id, user, group, {**mark, "name": name})

    def fetched(self) -> list[str]:
        assert all(d.startswith("m-") for d in self.fake.downloads), self.fake.downloads
        return list(self.fake.downloads)

    def _card(self, sent: Sent) -> dict[str, Any] | None:
        """The answer's card in its final state: an app card gets one update, its last."""
        updates = self.fake.updates[int(sent.extra["updates"]) :]
        cards = [u["template_card"] for u in updates if "template_card" in u]
        return cards[0] if cards else None

    def seen(self, sent: Sent) -> Answer | None:
        card = self._card(sent)
        parts = self.fake.texts(sent.user)[int(sent.extra["from"]) :]
        if card is None:
            return None
        last = _MARK.search(parts[-1]) if parts else None  # a waiting card has no text yet
        if last and len(parts) != int(last[2]):
            return None
        buttons = [b["text"] for b in card.get("button_list", [])]
        return Answer(parts, buttons, card["main_title"]["title"])

    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        card = self._card(sent)
        assert card is not None, "no card to click"
        buttons = [b for b in card.get("button_list", []) if b["text"] == label]
        if not buttons:
            raise NoButton(label)
        [button] = buttons
        who = user or sent.user
        mark = self._mark(who)
        code = self.fake.issue_code()
        await self.post(card_click(who, button["key"], card["task_id"], code, int(time.time())))

        await self.idle()
        greyed = [  # the clicked card's buttons, one grey label now (none on a stale card)
            str(u["button"]["replace_name"])
            for u in self.fake.updates[int(mark["updates"]) :]
            if u.get("response_code") == code and "button" in u
        ]
        return Sent(f"click-{label}", who, sent.group, mark), "".join(greyed)

    def shown(self) -> list[str]:
        return self.fake.texts()

    def files(self) -> list[tuple[str, bytes]]:
        """``file`` messages of temporary media (``media/upload``)."""
        out: list[tuple[str, bytes]] = []
        for m in self.fake.sent:
            if m.get("msgtype") == "file":
                media_id = m["file"]["media_id"]
                kind, name = self.fake.uploads[media_id]
                assert kind == "file"
                out.append((name, self.fake.media[media_id][0]))
        return out

    def refused(self) -> list[str]:
        return [f"{path} {code}" for path, code in self.fake.refusals] + [
            json.dumps(d) for d in self.fake.dropped
        ]

    def media(self, sent: Sent) -> Media:
        """The ``image`` and ``file`` messages to the user after the answer's first markdown
        part, until another turn's card, by the bytes of the temporary media each names."""
        mine = [m for m in self.fake.sent if m.get("touser") == sent.user]
        texts = [i for i, m in enumerate(mine) if m.get("msgtype") in ("markdown", "text")]
        if len(texts) <= int(sent.extra["from"]):
            return Media()
        out = Media()
        for m in mine[texts[int(sent.extra["from"])] :]:
            if m["msgtype"] == "template_card":
                break
            if m["msgtype"] in ("image", "file"):
                media_id = m[m["msgtype"]]["media_id"]
                data, name = self.fake.media[media_id][0], self.fake.uploads[media_id][1]
                if m["msgtype"] == "image":
                    out.images.append(data)
                else:
                    out.files.append((name, data))
        return out

    def refuse_uploads(self) -> bool:
        self.fake.refuse_uploads(40009, times=1000)
        return True

    def chat_files(self) -> list[tuple[str, bytes]]:
        return [
            (self.fake.uploads[m["file"]["media_id"]][1], self.fake.media[m["file"]["media_id"]][0])
            for m in self.fake.sent
            if m.get("msgtype") == "file"
        ]


class WeComAibotHarness(_WeCom):
    id = "wecom-aibot"
    modes = ("aibot_ws",)

    async def connected(self) -> None:
        await super().connected()
        await eventually(lambda: self.fake.subscribes >= 1)

    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        msg_id = f"w-{uuid.uuid4().hex[:10]}"
        extra: dict[str, Any] = {"chattype": "group", "chatid": "grp-1"} if group else {}
        body = aibot_message(msg_id, "text", {"content": text}, user=user, **extra)
        mark = {"from": len(self._markdown()), "cards": len(self._cards())}
        req_id = await self.fake.push("aibot_msg_callback", body)
        return Sent(msg_id, user, group, {**mark, "req_id": req_id})

    def _cards(self) -> list[dict[str, Any]]:
        """The template cards sent (a direct chat's buttons), oldest first."""
        return [
            f["body"]["template_card"]
            for f in self.fake.frames
            if f.get("cmd") == "aibot_send_msg" and f["body"].get("msgtype") == "template_card"
        ]

    def files(self) -> list[tuple[str, bytes]]:
        """``file`` messages on the connection (``aibot_send_msg``), by the media the bot
        uploaded on it (``aibot_upload_media_*``, which the fake checks)."""
        out: list[tuple[str, bytes]] = []
        for f in self.fake.frames:
            body = f.get("body") or {}
            if f.get("cmd") == "aibot_send_msg" and body.get("msgtype") == "file":
                data, name, kind = self.fake.ws.media[body["file"]["media_id"]]
                assert kind == "file"
                out.append((name, data))
        return out

    async def send_file(
        self, data: bytes | None, name: str, *, user: str = "alice", group: bool = False
    ) -> Sent:
        """A long-connection file: an encrypted download link and its own ``aeskey``; the
        message names no file (the gateway names it by its bytes: file.pdf)."""
        key = os.urandom(32)
        link = self.fake.encrypted_link(data or b"", key, name)
        if data is None:
            self.fake.files.pop(link.rsplit("/", 1)[-1])  # gone: 404
        msg_id = f"w-{uuid.uuid4().hex[:10]}"
        extra: dict[str, Any] = {"chattype": "group", "chatid": "grp-1"} if group else {}
        content = {"url": link, "aeskey": base64.b64encode(key).decode()}
        body = aibot_message(msg_id, "file", content, user=user, **extra)
        mark = {"from": len(self._markdown()), "cards": len(self._cards()), "name": "file.pdf"}
        req_id = await self.fake.push("aibot_msg_callback", body)
        return Sent(msg_id, user, group, {**mark, "req_id": req_id})

    def fetched(self) -> list[str]:
        assert all(d.startswith("f-") for d in self.fake.downloads), self.fake.downloads
        return list(self.fake.downloads)

    def _markdown(self) -> list[str]:
        return [
            f["body"]["markdown"]["content"]
            for f in self.fake.frames
            if f.get("cmd") == "aibot_send_msg" and f["body"].get("msgtype") == "markdown"
        ]

    def seen(self, sent: Sent) -> Answer | None:
        frames = self.fake.stream_frames(str(sent.extra["req_id"]))
        if not frames:  # (read once the gateway is idle: a stream left open waits for a user)
            return None
        parts = [
            frames[-1]["body"]["stream"]["content"],
            *self._markdown()[int(sent.extra["from"]) :],
        ]
        last = _MARK.search(parts[-1])
        if last and len(parts) != int(last[2]):
            return None
        return Answer(parts)

    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        raise NoButton(f"{label}: the AI bot declares no buttons, its options are typed")

    def shown(self) -> list[str]:
        streams: dict[str, str] = {}
        for frame in self.fake.stream_frames():
            streams[frame["body"]["stream"]["id"]] = frame["body"]["stream"]["content"]
        return [*streams.values(), *self._markdown()]

    def refused(self) -> list[str]:
        return [json.dumps(a) for a in self.fake.ws.acks if a["errcode"]]

    def part_bytes(self) -> int | None:
        return STREAM_BYTES

    def media(self, sent: Sent) -> Media:
        """The final stream frame's ``msg_item`` pictures (base64, with their MD5)."""
        frames = self.fake.stream_frames(str(sent.extra["req_id"]))
        items = frames[-1]["body"]["stream"].get("msg_item", []) if frames else []
        return Media([base64.b64decode(i["image"]["base64"]) for i in items])
