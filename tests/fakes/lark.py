"""A fake Lark OpenAPI and long-connection server (platforms.md §1.11), in aiohttp.

Over 300 lines: one fake server, whose every behaviour names the real source it comes from, kept
together so the sources can be checked side by side. Sources (doc pages are open.feishu.cn; the
same pages are mirrored with their ``source_url`` in the wxkingstar/doc-hub-mcp repository):

- DOC-TOKEN  /document/server-docs/authentication-management/access-token/
  tenant_access_token_internal
  (lifetime 2 h; less than 30 min left -> a new token, both valid; else the same token)
- DOC-ERR    /document/server-docs/api-call-guide/generic-error-code (99991661 no token,
  99991663 invalid/expired token, 99991400 rate limited, 10014 app unauthorized)
- DOC-RATE   /document/server-docs/api-call-guide/frequency-control (HTTP 429, or 400 on older
  APIs, body 99991400, headers ``x-ogw-ratelimit-limit`` / ``x-ogw-ratelimit-reset``)
- DOC-SEND   /document/server-docs/im-v1/message/create and .../message/reply (``uuid`` dedups for
  1 h; 230020 frequency limit, 230025 too long: text 150 KB, card 30 KB; 230099 bad card)
- DOC-PATCH  /document/server-docs/im-v1/message-card/patch (only cards the app sent; ``config``
  must declare ``"update_multi": true`` before and after; 5 QPS per message -> 230020)
- DOC-JSON2  /document/uAjLw4CM/ukzMukzMukzM/feishu-cards/card-json-v2-structure (2.0 cards:
  ``update_multi`` defaults to true and only true is supported; ``streaming_mode`` default false)
- DOC-CK-*   /document/cardkit-v1/card/create, card/settings, card/update, card-element/content
  (schema 2.0 only 300303; update_multi false 300302; duplicate element_id 300301; >200
  components 300305; >30 KB 200860; no such card 200740; ``sequence`` strictly increasing per
  card across all these endpoints else 300317; streaming text only while ``streaming_mode`` is on
  else 300309, 200850 once it timed out; only plain_text/markdown elements else 300310)
- DOC-STREAM /document/uAjLw4CM/ukzMukzMukzM/feishu-cards/streaming-updates-openapi-overview
  (while streaming_mode is on, a callback answer cannot update the card at once)
- DOC-RES    /document/server-docs/im-v1/message/get-2 (get message resource: ``type`` image|file
  else 234001; key not in that message 234003; "暂不支持获取表情包资源")
- DOC-REACT  /document/server-docs/im-v1/message-reaction/create (+ emojis-introduce: the
  emoji_type list; 231001 bad type, 231003 message not found)
- DOC-CB     /document/feishu-cards/card-callback-communication (answer within 3 s; toast type
  info|success|error|warning; card ``raw``/``template``; a non-200 answer shows the user error
  200671, a malformed body 200672)
- DOC-IMG    /document/server-docs/im-v1/image/create, mirrored as doc-hub-mcp
  feishu/003-服务端API/消息/图片信息/上传图片.md (multipart ``image_type`` message|avatar and
  ``image``; JPG JPEG PNG WEBP GIF BMP ICO TIFF HEIC, else 234011 l.174; at most 10 MB, else
  234006; 234001 bad param; 234010 size 0; answers ``data.image_key``) and .../im-v1/file/create,
  mirrored as feishu/003-服务端API/消息/文件信息/上传文件.md (multipart ``file_type``
  opus|mp4|pdf|doc|xls|ppt|stream l.47-56, ``file_name``, ``file``; at most 30 MB l.19, not
  empty; answers ``data.file_key``); the field names as lark_oapi 1.7.5
  api/im/v1/model/create_image_request_body.py and create_file_request_body.py send them
- DOC-LIST   /document/server-docs/im-v1/message/list and lark_oapi 1.7.5
  api/im/v1/model/list_message_request.py (``container_id_type`` chat|thread, ``container_id``,
  ``sort_type`` ByCreateTimeAsc (default) | ByCreateTimeDesc, ``page_size`` 1-50, default 20;
  ``items`` of message_id, msg_type, create_time (ms, a string), sender {id, id_type,
  sender_type user|app}, body {content}; ``has_more``, ``page_token``)
- DOC-MEMBERS /document/server-docs/group/chat-member/get and lark_oapi 1.7.5
  api/im/v1/model/get_chat_members_request.py, list_member.py (``member_id_type``, ``page_size``
  at most 100; ``items`` of member_id_type, member_id, name, tenant_key; bots are not listed;
  ``member_total``, ``has_more``, ``page_token``)
- DOC-BOT    /document/client-docs/bot-v3/obtain-bot-info (``bot`` at top level, not in ``data``)
- DOC-USER   /document/server-docs/contact-v3/user/get (41050 no user authority)
- DOC-AT     /document/uAjLw4CM/ukTMukTMukTM/im-v1/message/create_json (text: ``<at
  user_id="ou_…">Name</at>``, ``<at user_id="all"></at>``) and /document/feishu-cards/
  card-json-v2-components/content-components/rich-text (markdown: ``<at id=all></at>``,
  ``<at id=…>``, ``<at ids=…>``, ``<at email=…>``; card markdown reads HTML entities)
- SDK        lark_oapi 1.7.5 ws/client.py, ws/model.py, ws/pb/pbbp2_pb2.py (endpoint body, frame
  headers, ack = the same frame with ``{"code": ...}`` payload)
- DOC-WS     /document/server-docs/event-subscription-guide/overview (long connection: handled
  within 3 s without the SDK handler raising, else re-pushed after 15 s, 5 min, 1 h, 6 h, at most
  4 times) and .../event-subscription-configure-/request-url-configuration-case (cluster mode:
  one random client gets each push)

Not traceable to a source (chosen here, marked ⚠ where used): how loosely Lark's parser reads a
mention tag (here: any case, whitespace inside, entities decoded first, so the fake finds more
than Lark would rather than less); the HTTP status of token errors
(400); the code for a sticker download (the doc names none; 234043 "Unsupported message type"
is the doc's code for types it refuses); the codes for PATCH without ``update_multi``, for an
``update_multi: false`` 2.0 card sent inline, for a reply to an unknown message, for a wrong
app secret and for PATCH of a message that is not the app's card; the 230020 answer carrying
no rate-limit headers (the docs show none).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from adapters.lark.connection import sdk_client
from tests.fakes.limits import LarkLimits

sdk_client()  # importing lark_oapi makes an event loop at import time; this closes it

BOT_OPEN_ID = "ou_bot"
APP_SECRET = "secret"
TOKEN_LIFETIME_S = 7200  # DOC-TOKEN
TOKEN_RENEW_S = 1800  # DOC-TOKEN: under 30 min left, a new token is issued
CARD_BYTES = 30 * 1024  # DOC-SEND 230025, DOC-CK 200860
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$", re.MULTILINE)
TEXT_BYTES = 150 * 1024  # DOC-SEND 230025
IMAGE_BYTES = 10 * 1024 * 1024  # DOC-IMG
FILE_BYTES = 30 * 1024 * 1024  # DOC-IMG 234006
# DOC-IMG's formats by their first bytes (JPEG, PNG, GIF, BMP, ICO, TIFF; WEBP is RIFF….WEBP)
IMAGE_MAGIC = (
    b"\xff\xd8\xff",
    b"\x89PNG",
    b"GIF8",
    b"BM",
    b"\x00\x00\x01\x00",
    b"II*\x00",
    b"MM\x00*",
)
FILE_TYPES = {"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"}  # DOC-IMG (file/create)
PATCH_QPS = 5  # DOC-PATCH
TOAST_TYPES = {"info", "success", "error", "warning"}  # DOC-CB
CARD_KINDS = {"raw", "template"}  # DOC-CB
EMOJI = {"OK", "THUMBSUP", "Typing", "OnIt", "CheckMark", "Yes", "LGTM", "SMILE"}
# message_type -> content fields holding downloadable keys (DOC-RES: image, file, audio, video)
RESOURCE_FIELDS = {
    "image": ("image_key",),
    "file": ("file_key",),
    "audio": ("file_key",),
    "media": ("file_key", "image_key"),
    "sticker": ("file_key",),
}


# What Lark would read as a mention in text or card markdown (DOC-AT; how loosely: ⚠)
MENTION = re.compile(r"<\s*at\b([^>]*)>", re.IGNORECASE)
# The calls whose bodies Lark shows in a chat: every message, card and card element write.
SHOWN = {"create", "reply", "patch", "card_create", "card_update", "card_content"}


def _leaves(value: Any) -> list[str]:
    """Every string in a body, JSON strings inside it opened too (message ``content``)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if not isinstance(value, str):
        return []
    try:
        inner = json.loads(value)
    except ValueError:
        return [value]
    return _leaves(inner) if isinstance(inner, (dict, list)) else [value]


@dataclass
class Call:
    op: str
    method: str
    path: str
    query: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    op: str
    status: int
    code: int
    times: int
    reset: int


def refuse(status: int, code: int, msg: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"code": code, "msg": msg}, status=status, headers=headers)


def _over_elements(card: dict[str, Any], code: int) -> tuple[int, str] | None:
    """More than 200 components (DOC-SEND l.292-330: 230099 / 11310 "element exceeds the
    limit"; DOC-CK 300305), or a markdown component with more than four Markdown tables
    (feishu-cards rich text, 富文本.md l.351-353; the code past it is not documented ⚠)."""
    stack: list[Any] = [card.get("body")]
    count = 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += "tag" in node
            if (
                node.get("tag") == "markdown"
                and len(TABLE_RULE.findall(node.get("content", ""))) > 4
            ):
                return code, "card contains more than 4 markdown tables"  # ⚠ the message
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if count > 200:
        return code, "The number of card components exceeds 200"
    return None


class FakeLark:
    """``limits``: Lark's rate limits and quota enforced (tests/fakes/limits.py); without them
    only the per-message PATCH limit below applies, on the real clock."""

    def __init__(self, *, app_secret: str = APP_SECRET, limits: LarkLimits | None = None) -> None:
        self.app_secret = app_secret
        self.limits = limits
        self.calls: list[Call] = []
        self.messages: dict[str, dict[str, Any]] = {}
        # A resource's bytes and Content-Type by key (DOC-RES answers the file itself); a key
        # not here is a small PNG. The type a file comes with is the test's choice.
        self.resources: dict[str, tuple[bytes, str]] = {}
        self.by_uuid: dict[str, str] = {}
        self.reactions: dict[str, dict[str, str]] = {}  # reaction_id -> {message_id, emoji}
        self.cards: dict[str, dict[str, Any]] = {}
        # Uploads (DOC-IMG): image_key -> (bytes, Content-Type, filename); file_key -> (bytes,
        # file_type, file_name).
        self.images: dict[str, tuple[bytes, str, str]] = {}
        self.files: dict[str, tuple[bytes, str, str]] = {}
        self.users: dict[str, dict[str, Any]] = {}  # open_id -> contact profile
        self.members: dict[str, list[dict[str, Any]]] = {}  # chat_id -> its members (DOC-MEMBERS)
        self.tokens: dict[str, float] = {}  # token -> monotonic expiry
        self.failures: list[Failure] = []
        self.refusals: list[tuple[str, int]] = []  # (path, code) of every refused call
        self.acks: dict[str, dict[str, Any]] = {}
        self.frames: dict[str, bytes] = {}  # pushed frames, for a re-push
        self.sockets: list[web.WebSocketResponse] = []
        self.endpoint_calls = 0
        # Awaited as each call arrives, before it is answered: a test looks at the gateway's
        # state at the moment a card goes out (not a platform behaviour).
        self.watchers: list[Callable[[Call], Awaitable[None]]] = []
        self._patches: dict[str, deque[float]] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @web.middleware
    async def _note_refusal(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        if isinstance(response, web.Response) and response.content_type == "application/json":
            code = json.loads(response.text or "{}").get("code", 0) if response.text else 0
            if response.status >= 400 or code:
                self.refusals.append((request.path, int(code or response.status)))
        return response

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        limits = [self.limits.middleware(self)] if self.limits is not None else []
        app = web.Application(
            middlewares=[self._note_refusal, *limits], client_max_size=FILE_BYTES + 1024 * 1024
        )
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self.token)
        r.add_get("/open-apis/bot/v3/info", self.bot_info)
        r.add_get("/open-apis/contact/v3/users/{uid}", self.user)
        r.add_post("/open-apis/im/v1/messages", self.create)
        r.add_post("/open-apis/im/v1/messages/{mid}/reply", self.reply)
        r.add_patch("/open-apis/im/v1/messages/{mid}", self.patch)
        r.add_post("/open-apis/im/v1/messages/{mid}/reactions", self.add_reaction)
        r.add_delete("/open-apis/im/v1/messages/{mid}/reactions/{rid}", self.delete_reaction)
        r.add_get("/open-apis/im/v1/messages/{mid}/resources/{key}", self.resource)
        r.add_get("/open-apis/im/v1/messages", self.list_messages)
        r.add_get("/open-apis/im/v1/chats/{chat}/members", self.chat_members)
        r.add_post("/open-apis/im/v1/images", self.upload_image)
        r.add_post("/open-apis/im/v1/files", self.upload_file)
        r.add_post("/open-apis/cardkit/v1/cards", self.card_create)
        r.add_put("/open-apis/cardkit/v1/cards/{cid}/elements/{eid}/content", self.card_content)
        r.add_patch("/open-apis/cardkit/v1/cards/{cid}/settings", self.card_settings)
        r.add_put("/open-apis/cardkit/v1/cards/{cid}", self.card_update)
        r.add_post("/callback/ws/endpoint", self.ws_endpoint)
        r.add_get("/ws", self.ws)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- test controls ---------------------------------------------------------------------
    def fail(
        self,
        op: str,
        *,
        status: int | None = None,
        code: int = 230020,
        times: int = 1,
        reset: int = 0,
    ) -> None:
        """The next ``times`` calls of ``op`` answer ``code``. 99991400 comes as HTTP 429 with
        the rate-limit headers (DOC-RATE; pass ``status=400`` for the older APIs' form); other
        codes as HTTP 400 (DOC-SEND, DOC-PATCH list 230020 and 230099 under 400)."""
        if status is None:
            status = 429 if code == 99991400 else 400
        self.failures.append(Failure(op, status, code, times, reset))

    def expire_tokens(self) -> None:
        """Two hours pass: every tenant token issued so far is invalid (DOC-TOKEN)."""
        for token in self.tokens:
            self.tokens[token] = 0.0

    def receive(self, payload: dict[str, Any]) -> None:
        """Lark knows every message a user sent: an ``im.message.receive_v1`` payload pushed to
        the gateway is a message the API can then reply to, react to and download from."""
        header = payload.get("header") or {}
        if header.get("event_type") != "im.message.receive_v1":
            return
        msg = payload["event"]["message"]
        self.messages.setdefault(
            msg["message_id"],
            {
                "message_id": msg["message_id"],
                "chat_id": msg["chat_id"],
                "parent_id": None,
                "msg_type": msg["message_type"],
                "content": msg["content"],
                "patches": 0,
                "from_bot": False,
                "sender": payload["event"]["sender"]["sender_id"]["open_id"],
                "create_time": int(time.time() * 1000),
            },
        )

    def end_streaming_by_timeout(self, cid: str) -> None:
        """Lark closes a card's streaming mode by itself after a while (DOC-CK-content 200850)."""
        self.cards[cid]["streaming"] = False
        self.cards[cid]["timed_out"] = True

    def of(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op]

    def mentions(self) -> list[str]:
        """The attributes of every mention tag in everything the app showed (each would notify
        someone, ``all`` the whole group), in every write, not only the last state (DOC-AT)."""
        return [
            m.group(1).strip()
            for c in self.calls
            if c.op in SHOWN
            for leaf in _leaves(c.body)
            for m in MENTION.finditer(html.unescape(leaf))
        ]

    def card_of(self, message_id: str) -> dict[str, Any]:
        """The card a message shows now (inline JSON, or the CardKit entity it points at)."""
        content = json.loads(self.messages[message_id]["content"])
        if content.get("type") == "card":
            card: dict[str, Any] = self.cards[content["data"]["card_id"]]["card"]
            return card
        return dict(content)

    @staticmethod
    def judge_callback(status: int, answer: Any) -> int | None:
        """The error code the Lark client shows for a callback answer, or None (DOC-CB)."""
        if status != 200:
            return 200671
        if not isinstance(answer, dict):
            return 200672
        toast, card = answer.get("toast"), answer.get("card")
        if toast is not None and (
            not isinstance(toast, dict) or toast.get("type") not in TOAST_TYPES
        ):
            return 200672
        if card is not None and (not isinstance(card, dict) or card.get("type") not in CARD_KINDS):
            return 200672
        return None

    def apply_callback(self, message_id: str, answer: dict[str, Any]) -> None:
        """What Lark does with a callback answer that carries a card: the message shows it at
        once (``{"type": "raw", "data": <card JSON 2.0>}``). Raises on a card it would refuse,
        and on a CardKit card still streaming (DOC-STREAM)."""
        assert self.judge_callback(200, answer) is None, answer
        card = answer["card"]
        assert card["type"] == "raw", card
        content = json.dumps(card["data"])
        msg = self.messages[message_id]
        assert msg["msg_type"] == "interactive" and msg["from_bot"]
        shown = json.loads(msg["content"])
        if shown.get("type") == "card":
            assert not self.cards[shown["data"]["card_id"]]["streaming"], "card is streaming"
        assert self._bad_card("interactive", content) is None
        self.calls.append(Call("callback_card", "ANSWER", message_id, {}, card["data"]))
        msg["content"] = content

    # --- helpers ---------------------------------------------------------------------------
    async def _enter(self, request: web.Request, op: str) -> tuple[Any, web.Response | None]:
        body = None
        if request.body_exists:  # read already by the limits' middleware: aiohttp keeps it
            body = await request.json()
        call = Call(op, request.method, request.path, dict(request.query), body)
        self.calls.append(call)
        for watch in self.watchers:
            await watch(call)
        return body, self._check(request, op)

    async def _enter_form(
        self, request: web.Request, op: str
    ) -> tuple[dict[str, Any], web.Response | None]:
        """A multipart call (DOC-IMG): its fields, a file part as a ``web.FileField``; the call
        records the file part by its name and size."""
        form = dict(await request.post())
        shown = {
            k: v if isinstance(v, str) else {"filename": v.filename, "type": v.content_type}
            for k, v in form.items()
        }
        self.calls.append(Call(op, request.method, request.path, dict(request.query), shown))
        return form, self._check(request, op)

    def _check(self, request: web.Request, op: str) -> web.Response | None:
        """The token and the injected failures of a call."""
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return refuse(400, 99991661, "Need a token")  # DOC-ERR; status ⚠
        if self.tokens.get(auth.removeprefix("Bearer "), 0.0) <= time.monotonic():
            return refuse(400, 99991663, "Invalid access token for authorization")  # ⚠
        for failure in self.failures:
            if failure.op == op and failure.times > 0:
                failure.times -= 1
                headers = None
                if failure.code == 99991400:  # DOC-RATE
                    headers = {
                        "x-ogw-ratelimit-limit": "50",
                        "x-ogw-ratelimit-reset": str(failure.reset),
                    }
                return refuse(failure.status, failure.code, "injected", headers)
        return None

    @staticmethod
    def _ok(data: dict[str, Any] | None = None) -> web.Response:
        return web.json_response({"code": 0, "msg": "success", "data": data or {}})

    def _new_message(self, body: dict[str, Any], chat_id: str, parent: str | None) -> str:
        key = body.get("uuid")
        if key and key in self.by_uuid:  # DOC-SEND: one message per uuid within an hour
            return self.by_uuid[key]
        mid = f"om_fake{next(self._ids)}"
        self.messages[mid] = {
            "message_id": mid,
            "chat_id": chat_id,
            "parent_id": parent,
            "msg_type": body["msg_type"],
            "content": body["content"],
            "patches": 0,
            "from_bot": True,
            "create_time": int(time.time() * 1000),
        }
        if key:
            self.by_uuid[key] = mid
        return mid

    def _bad_card(self, msg_type: str, content: str) -> tuple[int, str] | None:
        """(code, msg) when Lark refuses this message body (DOC-SEND, DOC-JSON2)."""
        limit = CARD_BYTES if msg_type in ("interactive", "post") else TEXT_BYTES
        if len(content.encode()) > limit:
            return 230025, "The length of the message content reaches its limit."
        if msg_type != "interactive":
            return None
        card = json.loads(content)
        if card.get("type") == "card":  # a CardKit entity by id
            known = card.get("data", {}).get("card_id") in self.cards
            return None if known else (230099, "Failed to create card content.")  # ⚠
        if card.get("schema") == "2.0" and card.get("config", {}).get("update_multi") is False:
            return 230099, "Failed to create card content, update_multi must be true"  # ⚠
        return _over_elements(card, 11310)

    # --- history and members (DOC-LIST, DOC-MEMBERS) ------------------------------------------
    async def list_messages(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "messages")
        if error:
            return error
        q = request.query
        size = int(q.get("page_size", "20")) if q.get("page_size", "20").isdigit() else 0
        if q.get("container_id_type") not in ("chat", "thread") or not 1 <= size <= 50:
            return refuse(400, 230001, "param is invalid")  # ⚠ the code of a bad parameter
        found = [m for m in self.messages.values() if m["chat_id"] == q.get("container_id")]
        found.sort(key=lambda m: (m.get("create_time", 0), m["message_id"]))
        if q.get("sort_type") == "ByCreateTimeDesc":
            found.reverse()
        items = [
            {
                "message_id": m["message_id"],
                "msg_type": m["msg_type"],
                "create_time": str(m.get("create_time", 0)),
                "chat_id": m["chat_id"],
                "sender": {"id": BOT_OPEN_ID if m["from_bot"] else m.get("sender", ""),
                           "id_type": "open_id" if not m["from_bot"] else "app_id",
                           "sender_type": "app" if m["from_bot"] else "user"},
                "body": {"content": m["content"]},
            }
            for m in found[:size]
        ]  # fmt: skip
        return self._ok({"items": items, "has_more": len(found) > size, "page_token": ""})

    async def chat_members(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "members")
        if error:
            return error
        size = request.query.get("page_size", "20")
        if not size.isdigit() or not 1 <= int(size) <= 100:
            return refuse(400, 230001, "param is invalid")  # ⚠
        members = self.members.get(request.match_info["chat"])
        if members is None:
            return refuse(400, 232011, "the bot is not in the chat")  # ⚠ the code
        start = int(request.query.get("page_token") or 0)
        page = members[start : start + int(size)]
        more = start + int(size) < len(members)
        items = [{"member_id_type": "open_id", "tenant_key": "tenant_test", **m} for m in page]
        token = str(start + int(size)) if more else ""
        return self._ok({"items": items, "has_more": more, "page_token": token,
                         "member_total": len(members)})  # fmt: skip

    # --- OpenAPI ---------------------------------------------------------------------------
    async def token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("token", "POST", request.path, {}, {"app_id": body.get("app_id")}))
        if body.get("app_secret") != self.app_secret:
            return refuse(400, 10014, "app secret invalid")  # ⚠ (DOC-ERR: app unauthorized)
        now = time.monotonic()
        live = [(exp, tok) for tok, exp in self.tokens.items() if exp > now]
        if live and max(live)[0] - now >= TOKEN_RENEW_S:  # DOC-TOKEN: the same token
            expiry, token = max(live)
        else:
            token, expiry = f"t-fake{next(self._ids)}", now + TOKEN_LIFETIME_S
            self.tokens[token] = expiry
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": int(expiry - now)}
        )

    async def bot_info(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "bot")
        return error or web.json_response(  # DOC-BOT
            {
                "code": 0,
                "msg": "ok",
                "bot": {"activate_status": 2, "app_name": "Fake", "open_id": BOT_OPEN_ID},
            }
        )

    async def user(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "user")
        if error:
            return error
        profile = self.users.get(request.match_info["uid"])
        if request.query.get("user_id_type") != "open_id" or profile is None:
            return refuse(400, 41050, "no user authority")  # DOC-USER
        return self._ok({"user": profile})

    async def create(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "create")
        if error:
            return error
        if bad := self._bad_card(body["msg_type"], body["content"]):
            return refuse(400, *bad)
        mid = self._new_message(body, body["receive_id"], None)
        return self._ok({"message_id": mid, "chat_id": body["receive_id"]})

    async def reply(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "reply")
        if error:
            return error
        parent = self.messages.get(request.match_info["mid"])
        if parent is None:
            return refuse(400, 230001, "invalid message_id")  # ⚠ (how-to-resolve-error-230001)
        if bad := self._bad_card(body["msg_type"], body["content"]):
            return refuse(400, *bad)
        mid = self._new_message(body, parent["chat_id"], parent["message_id"])
        return self._ok({"message_id": mid, "parent_id": parent["message_id"]})

    async def patch(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "patch")
        if error:
            return error
        mid = request.match_info["mid"]
        msg = self.messages.get(mid)
        if msg is None or msg["msg_type"] != "interactive" or not msg["from_bot"]:
            return refuse(400, 230001, "not a card message sent by this app")  # ⚠ code
        recent = self._patches.setdefault(mid, deque())
        now = time.monotonic()
        while recent and now - recent[0] >= 1.0:
            recent.popleft()
        own_limit = self.limits is None or not self.limits.enforce  # else the limits' clock
        if own_limit and len(recent) >= PATCH_QPS:  # DOC-PATCH: 5 QPS per message
            return refuse(400, 230020, "This operation triggers the frequency limit.")
        if bad := self._bad_card("interactive", body["content"]):
            return refuse(400, *bad)
        before, after = json.loads(msg["content"]), json.loads(body["content"])
        if before.get("type") != "card" and not all(
            c.get("config", {}).get("update_multi") is True for c in (before, after)
        ):  # DOC-PATCH: declared before and after
            return refuse(400, 230099, "Failed to create card content, update_multi")  # ⚠ code
        recent.append(now)
        msg["content"] = body["content"]
        msg["patches"] += 1
        return self._ok()

    async def add_reaction(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "reaction_add")
        if error:
            return error
        if request.match_info["mid"] not in self.messages:
            return refuse(400, 231003, "The message is not found")  # DOC-REACT
        emoji = body["reaction_type"]["emoji_type"]
        if emoji not in EMOJI:
            return refuse(400, 231001, "reaction type is invalid.")  # DOC-REACT
        rid = f"r_{uuid.uuid4().hex[:8]}"
        self.reactions[rid] = {"message_id": request.match_info["mid"], "emoji": emoji}
        return self._ok({"reaction_id": rid})

    async def delete_reaction(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "reaction_delete")
        if error:
            return error
        self.reactions.pop(request.match_info["rid"], None)
        return self._ok()

    async def resource(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "resource")
        if error:
            return error
        if request.query.get("type") not in ("image", "file"):
            return refuse(400, 234001, "Invalid request param.")  # DOC-RES
        msg, key = self.messages.get(request.match_info["mid"]), request.match_info["key"]
        content = json.loads(msg["content"]) if msg else {}
        if msg is not None and msg["msg_type"] == "sticker":  # DOC-RES: stickers not served
            return refuse(400, 234043, "Unsupported message type.")  # ⚠ code
        keys = [content.get(f) for f in RESOURCE_FIELDS.get(msg["msg_type"], ())] if msg else []
        if msg is not None and msg["msg_type"] == "post":
            text = json.dumps(content)
            keys = [key] if f'"{key}"' in text else []
        if key not in keys:
            return refuse(400, 234003, "File not in message.")  # DOC-RES
        data, content_type = self.resources.get(key, (b"\x89PNG fake bytes", "image/png"))
        return web.Response(body=data, content_type=content_type)

    async def upload_image(self, request: web.Request) -> web.Response:
        form, error = await self._enter_form(request, "image_upload")
        if error:
            return error
        image = form.get("image")
        if form.get("image_type") not in ("message", "avatar") or not isinstance(
            image, web.FileField
        ):
            return refuse(400, 234001, "Invalid request param.")  # DOC-IMG
        data = image.file.read()
        if not data:
            return refuse(400, 234010, "File's size can't be 0.")  # DOC-IMG
        if len(data) > IMAGE_BYTES:
            return refuse(400, 234006, "The file size exceed the max value.")  # DOC-IMG
        if not data.startswith(IMAGE_MAGIC) and data[8:12] != b"WEBP":
            return refuse(400, 234011, "Can't regonnize the image format.")  # DOC-IMG
        key = f"img_v3_fake{next(self._ids)}"
        self.images[key] = (data, image.content_type, image.filename)
        return self._ok({"image_key": key})

    async def upload_file(self, request: web.Request) -> web.Response:
        form, error = await self._enter_form(request, "file_upload")
        if error:
            return error
        file, name = form.get("file"), form.get("file_name")
        if (
            form.get("file_type") not in FILE_TYPES
            or not name
            or not isinstance(file, web.FileField)
        ):
            return refuse(400, 234001, "Invalid request param.")  # DOC-IMG
        data = file.file.read()
        if not data:
            return refuse(400, 234010, "File's size can't be 0.")  # DOC-IMG
        if len(data) > FILE_BYTES:
            return refuse(400, 234006, "The file size exceed the max value.")  # DOC-IMG
        key = f"file_v3_fake{next(self._ids)}"
        self.files[key] = (data, str(form["file_type"]), str(name))
        return self._ok({"file_key": key})

    # --- CardKit ---------------------------------------------------------------------------
    @staticmethod
    def _bad_entity(card: dict[str, Any], size: int) -> tuple[int, str] | None:
        """DOC-CK-create / DOC-CK-update refusals of a card JSON."""
        if card.get("schema") != "2.0":
            return 300303, "Only schema 2.0 is supported"
        if card.get("config", {}).get("update_multi") is False:
            return 300302, "update_multi property is false"
        if size > CARD_BYTES:
            return 200860, "Card content exceeds limit."
        ids: list[str] = []
        stack: list[Any] = [card.get("body")]
        count = 0
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                count += "tag" in node
                if "element_id" in node:
                    ids.append(node["element_id"])
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        if len(ids) != len(set(ids)):
            return 300301, "Duplicate element_id in card component."
        if count > 200:
            return 300305, "The number of card components exceeds 200"
        return _over_elements(card, 300305)

    def _sequence(self, cid: str, body: dict[str, Any]) -> web.Response | None:
        """One strictly increasing ``sequence`` per card, shared by all CardKit writes."""
        card = self.cards.get(cid)
        if card is None:
            return refuse(400, 200740, "The card entity does not exist")
        seq = body.get("sequence")
        if not isinstance(seq, int) or not 1 <= seq <= 2**31 - 1:
            return refuse(400, 10002, "Your request contains an invalid request parameter.")
        if seq <= card["sequence"]:
            card["rejected"].append(seq)
            return refuse(400, 300317, "sequence number compare failed")
        return None

    def _accept(self, cid: str, body: dict[str, Any]) -> None:
        card = self.cards[cid]
        card["sequence"] = body["sequence"]
        card["sequences"].append(body["sequence"])

    async def card_create(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_create")
        if error:
            return error
        if body.get("type") != "card_json":
            return refuse(400, 10002, "Your request contains an invalid request parameter.")
        card = json.loads(body["data"])
        if bad := self._bad_entity(card, len(body["data"].encode())):
            return refuse(400, *bad)
        cid = f"70000000000000{next(self._ids):05d}"
        self.cards[cid] = {
            "card": card,
            "sequence": 0,
            "sequences": [],
            "rejected": [],
            "streaming": bool(card.get("config", {}).get("streaming_mode")),  # DOC-JSON2
            "timed_out": False,
        }
        return self._ok({"card_id": cid})

    async def card_content(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_content")
        if error:
            return error
        cid, eid = request.match_info["cid"], request.match_info["eid"]
        if bad := self._sequence(cid, body):
            return bad
        entity = self.cards[cid]
        if not entity["streaming"]:
            if entity["timed_out"]:
                return refuse(400, 200850, "Card streaming timeout")
            return refuse(400, 300309, "Card streaming closed")
        elements = [e for e in entity["card"]["body"]["elements"] if e.get("element_id") == eid]
        if not elements or elements[0].get("tag") not in ("plain_text", "markdown"):
            return refuse(400, 300310, "Only update text")
        elements[0]["content"] = body["content"]
        self._accept(cid, body)
        return self._ok()

    async def card_settings(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_settings")
        if error:
            return error
        cid = request.match_info["cid"]
        if bad := self._sequence(cid, body):
            return bad
        config = json.loads(body["settings"]).get("config", {})
        if config.get("update_multi") is False:
            return refuse(400, 300302, "update_multi property is false")
        if "streaming_mode" in config:
            self.cards[cid]["streaming"] = bool(config["streaming_mode"])
            self.cards[cid]["card"].setdefault("config", {})["streaming_mode"] = bool(
                config["streaming_mode"]
            )
        self._accept(cid, body)
        return self._ok()

    async def card_update(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_update")
        if error:
            return error
        cid = request.match_info["cid"]
        if bad := self._sequence(cid, body):
            return bad
        card = json.loads(body["card"]["data"])
        if bad := self._bad_entity(card, len(body["card"]["data"].encode())):
            return refuse(400, *bad)
        self.cards[cid]["card"] = card
        # ⚠ inferred: the full card's config decides streaming_mode (absent = off, DOC-JSON2)
        self.cards[cid]["streaming"] = bool(card.get("config", {}).get("streaming_mode"))
        self._accept(cid, body)
        return self._ok()

    # --- long connection (SDK) ---------------------------------------------------------------
    async def ws_endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.endpoint_calls += 1
        self.calls.append(Call("ws_endpoint", "POST", request.path, {}, {"AppID": body["AppID"]}))
        if body.get("AppSecret") != self.app_secret:
            # SDK ws/const.py FORBIDDEN = 403; any code but 1 / 1000040343 is fatal for it
            return web.json_response({"code": 403, "msg": "forbidden"})
        url = f"ws://127.0.0.1:{self.port}/ws?device_id=d{self.endpoint_calls}&service_id=1"
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0}
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "data": {"URL": url, "ClientConfig": config | {"PingInterval": 30}},
            }
        )

    async def ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                frame = Frame()
                frame.ParseFromString(msg.data)
                headers = {h.key: h.value for h in frame.headers}
                if frame.method == 0 and headers.get("type") == "ping":
                    pong = Frame(SeqID=0, LogID=0, service=frame.service, method=0)
                    pong.headers.add(key="type", value="pong")
                    await ws.send_bytes(pong.SerializeToString())
                elif frame.method == 1:
                    self.acks[headers["message_id"]] = json.loads(frame.payload)
        finally:
            self.sockets.remove(ws)
        return ws

    async def push(self, payload: dict[str, Any], *, kind: str = "event") -> str:
        """Push one event frame to the first connected client; returns the frame's message id.
        A message event is also a message the API knows from then on (:meth:`receive`)."""
        self.receive(payload)
        mid = f"ws_{uuid.uuid4().hex[:12]}"
        frame = Frame(SeqID=1, LogID=1, service=1, method=1)
        for key, value in (
            ("type", kind),
            ("message_id", mid),
            ("trace_id", "tr1"),
            ("sum", "1"),
            ("seq", "0"),
        ):
            frame.headers.add(key=key, value=value)
        frame.payload = json.dumps(payload).encode()
        self.frames[mid] = frame.SerializeToString()
        await self.sockets[0].send_bytes(self.frames[mid])
        return mid

    async def repush(self, mid: str) -> None:
        """Send a frame again, as Lark does when its ack was not code 200 or came too late
        (DOC-WS); the re-push goes to any one connected client (cluster mode)."""
        self.acks.pop(mid, None)
        await self.sockets[-1].send_bytes(self.frames[mid])

    async def wait_ack(self, mid: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while mid not in self.acks:
            if time.monotonic() > deadline:
                raise AssertionError(f"no ack for frame {mid}")
            await asyncio.sleep(0.02)
        return self.acks[mid]
