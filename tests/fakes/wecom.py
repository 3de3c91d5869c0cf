"""A fake WeCom server: the server API of a self-built app, the AI bot's ``response_url`` and
encrypted download links, and (in :mod:`tests.fakes.wecom_ws`) the AI-bot long connection.

Each behaviour names where it was learned (doc pages are developer.work.weixin.qq.com/document/
path/<n>; [wechatpy] is the installed wechatpy 1.8.18):

1. ``GET /cgi-bin/gettoken?corpid&corpsecret`` answers ``{errcode 0, errmsg "ok", access_token,
   expires_in 7200}`` and, while that token is valid, the same token again [91039, and its older
   text "有效期内重复获取返回相同结果"]. A wrong corpid is 40013, a wrong secret 40001 "不合法的
   secret参数" [90455; older copies of 91039 show 40091 "secret is invalid"]; a missing one
   41002/41004 (⚠ only in older copies of the global code list).
2. Every API call checks ``access_token``: missing 41001, never issued 40014 "不合法的
   access_token", issued but no longer valid 42001 "access_token已过期" [90455; wechatpy
   ``WeChatErrorCode`` 41001/40014/42001]. ``expire_token()`` ends the current token early, as
   WeCom may ("企业微信可能会出于运营需要，提前使access_token失效" [91039]).
3. Frequency [90454]: each API is limited per corp per minute (default 10 000; ``limit()`` sets
   a lower one for a test); over it the API answers 45009 and stays blocked for the rest of the
   minute ("按分钟拦截则被屏蔽60秒"); ``minute_s`` shortens the minute. Messages to one member:
   at most 30 a minute per app, "超过部分会被丢弃不下发": the call succeeds (⚠ the page does not
   say whether an error is returned) and the message is recorded in ``dropped``, not ``sent``.
4. ``POST /cgi-bin/message/send`` answers ``errcode, errmsg, invaliduser, msgid`` and, for the
   interactive card types, a ``response_code`` [doc 90236, docs/wecom.md]; a
   ``template_card`` needs a ``task_id`` unique per app [90236; aibot-node-sdk types/api.ts].
5. ``POST /cgi-bin/message/update_template_card`` consumes a ``response_code`` once, within 72 h
   [94888: "一个code只能调用一次该接口，且只能在72小时内调用"]; ``issue_code()`` hands out the
   fresh code a click callback carries [94888].
6. ``GET /cgi-bin/media/get`` answers the bytes with their content type, or JSON 40007 "不合法的
   media_id参数" [90455; wechatpy ``INVALID_MEDIA_ID``].
6b. ``POST /cgi-bin/media/upload?access_token&type=image|voice|video|file`` takes multipart
   with the file as the part named ``media`` (its filename the name a file message shows) and
   answers ``{errcode 0, errmsg, type, media_id, created_at}``; an image is JPG or PNG of at
   most 10 MB, a file at most 20 MB, every upload over 5 bytes; the media_id serves
   ``media/get`` for three days [90253, 上传临时素材]. Refusals [全局错误码 l.22-27]: a bad
   ``type`` 40005, a file not of its type's format 40004, an image's size 40009, another
   size 40006. ``message/send`` of ``image`` / ``file`` is ``{msgtype, <msgtype>: {media_id}}``
   [90236, 发送应用消息]; an unknown media_id is 40007 [90455; wechatpy ``INVALID_MEDIA_ID``].
7. The AI bot's ``response_url`` is ``/cgi-bin/aibot/response?response_code=…``, usable once and
   for one hour [101138: "每个 response_url 用户可以调用接口一次，该 response_url 有效期为 1 个
   小时"]; body ``{"msgtype": "markdown" | "template_card", …}`` [101138], another msgtype is
   40008 "不合法的msgtype参数" [90455].
8. AI-bot download links (valid five minutes [aibot-node-sdk types/message.ts]) serve the file
   encrypted with AES-256-CBC, the IV the key's first 16 bytes, PKCS#7 padded to 32 bytes
   [aibot-node-sdk src/crypto.ts ``decryptFile``], with its name in Content-Disposition
   [aibot-node-sdk src/api.ts ``downloadFileRaw``].
9. ``GET /cgi-bin/user/get?userid=`` ("读取成员", 90196) answers the member with ``errcode 0``,
   ``userid``, ``name`` and, where the app may read them, ``email`` and ``biz_mail`` (apps made
   since 2022-06-20 get neither: ``users`` then holds the member without them). A member outside
   the app's visible range ("应用只能获取可见范围内的成员信息") is 60011 "指定的成员/部门/标签参数
   无权限" [90313, 全局错误码]. Both checked against the
   doc-hub-mcp copies (``wecom/001-企业内部开发/002-服务端API/004-通讯录管理/002-成员管理/
   003-读取成员.md`` l.9-27, 42-43, 123-124; ``005-附录/003-全局错误码.md`` l.313).

(Longer than 300 lines because each behaviour carries its source.)

Not traced to a source: the errcodes for a reused ``task_id`` (``TASK_ID_EXISTS``) and a spent,
expired or unknown ``response_code`` (``RESPONSE_CODE_USED``, also used for a spent
``response_url``); whether a dropped over-quota message (3.) reports an error; the errmsg texts
(WeCom's own carry a hint and a link; clients must not parse them [90455]). Not modelled: link
and token expiry by time, IP allow-lists, the group robot webhook (the gateway does not use it).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tests.fakes.wecom_ws import FakeAibotSocket

TASK_ID_EXISTS = 40099  # not traced (see the module docstring)
RESPONSE_CODE_USED = 40098  # not traced
FREQUENCY_LIMIT = 45009
PER_MINUTE = 10_000  # 3.: each API, per corp [90454]
MEMBER_PER_MINUTE = 30  # 3.: messages to one member, per app [90454]
UPLOAD_BYTES = {
    "image": 10 * 1024 * 1024,
    "voice": 2 * 1024 * 1024,
    "video": 10 * 1024 * 1024,
    "file": 20 * 1024 * 1024,
}  # [90253, 上传临时素材]
INTERACTIVE = {"button_interaction", "vote_interaction", "multiple_interaction"}


class FakeWeCom:
    def __init__(
        self,
        *,
        corp_id: str = "wwcorp",
        secret: str = "s3cret",
        bot_id: str = "aib-1",
        bot_secret: str = "bs3cret",
    ) -> None:
        self.corp_id, self.secret = corp_id, secret
        self.bot_id, self.bot_secret = bot_id, bot_secret
        self.ws = FakeAibotSocket(bot_id=bot_id, bot_secret=bot_secret)
        self.token = ""
        self.tokens: dict[str, bool] = {}  # every token issued -> still valid
        self.token_fetches = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.dropped: list[dict[str, Any]] = []
        self.refusals: list[tuple[str, int]] = []  # (path, errcode) of refused API calls
        self.checked: list[tuple[float, str, int]] = []  # (clock, path, errcode) of API calls
        self.updates: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.task_ids: set[str] = set()
        self.codes: dict[str, float] = {}  # unused response_code -> issued at
        self.response_urls: dict[str, tuple[str, float]] = {}  # code -> (label, issued at)
        self.media: dict[str, tuple[bytes, str]] = {}  # media_id -> (data, content type)
        self.uploads: dict[str, tuple[str, str]] = {}  # uploaded media_id -> (type, filename)
        self.files: dict[str, bytes] = {}  # AI-bot download links: name -> ciphertext
        self.downloads: list[str] = []  # what was fetched: media ids and file names
        self.redirects: dict[str, str] = {}  # link name -> Location (redirect_link)
        # media_id -> where media/get redirects: an absolute URL, or another media_id (then a
        # relative Location on this server, the query kept): as a server taken over would.
        self.media_redirects: dict[str, str] = {}
        self._names: dict[str, str] = {}  # download link -> file name
        self.users: dict[str, dict[str, Any]] = {}  # userid -> member (user/get, 9.)
        self.hidden: set[str] = set()  # userids outside the app's visible range (60011)
        self.minute_s = 60.0
        self.clock: Callable[[], float] = time.monotonic  # seconds; a test's own clock fits
        self.per_minute = PER_MINUTE  # each API's calls a minute, unless ``limit`` sets one
        self.upload_refusals: list[int] = []
        self.limits: dict[str, int] = {}
        self._calls_at: dict[str, deque[float]] = defaultdict(deque)
        self._blocked_until: dict[str, float] = {}
        self._member_sends: dict[str, deque[float]] = defaultdict(deque)
        self._ids = itertools.count(1)
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    # --- knobs and views for tests ------------------------------------------------------------
    def limit(self, path: str, per_minute: int, *, minute_s: float | None = None) -> None:
        """A lower per-minute limit for ``path`` (e.g. ``message/send``), as WeCom applies."""
        self.limits[path] = per_minute
        if minute_s is not None:
            self.minute_s = minute_s

    def refuse_uploads(self, errcode: int = 40009, times: int = 1) -> None:
        """The next ``times`` uploads are refused with ``errcode`` (6b.: 40009, an image's size)."""
        self.upload_refusals += [errcode] * times

    def expire_token(self) -> None:
        """WeCom invalidates the current token early; the next gettoken issues a new one."""
        self.tokens[self.token] = False

    def issue_code(self) -> str:
        """A response_code as a click callback carries one."""
        code = f"rc-{next(self._ids)}"
        self.codes[code] = time.monotonic()
        return code

    def response_url(self, label: str) -> str:
        """A fresh ``response_url`` for an AI-bot callback; ``label`` names it in ``responses``."""
        code = f"ru-{next(self._ids)}"
        self.response_urls[code] = (label, time.monotonic())
        return f"{self.base_url}/cgi-bin/aibot/response?response_code={code}"

    def encrypted_link(self, data: bytes, key: bytes, name: str = "file.bin") -> str:
        """An AI-bot download link to ``data`` encrypted as WeCom does (docstring, 8.)."""
        pad = 32 - len(data) % 32
        encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
        link = f"f-{os.urandom(4).hex()}"
        self.files[link] = encryptor.update(data + bytes([pad]) * pad) + encryptor.finalize()
        self._names[link] = name
        return f"{self.base_url}/files/{link}"

    def redirect_link(self, target: str) -> str:
        """A download link of this server that answers 302 to ``target``: how a media host
        that was taken over (or an open redirect on it) would send a client elsewhere; the
        gateway follows a redirect only to WeCom's media host (tests/wecom/test_media.py)."""
        link = f"r-{os.urandom(4).hex()}"
        self.redirects[link] = target
        return f"{self.base_url}/files/{link}"

    def texts(self, touser: str | None = None) -> list[str]:
        """Markdown and text messages delivered, in order."""
        out = []
        for m in self.sent:
            if touser is not None and m.get("touser") != touser:
                continue
            if m.get("msgtype") in ("markdown", "text"):
                out.append(m[m["msgtype"]]["content"])
        return out

    def cards(self) -> list[dict[str, Any]]:
        return [m["template_card"] for m in self.sent if m.get("msgtype") == "template_card"]

    # The long connection's views, kept here so tests read one object.
    @property
    def frames(self) -> list[dict[str, Any]]:
        return self.ws.frames

    @property
    def subscribes(self) -> int:
        return self.ws.subscribes

    @property
    def pings(self) -> int:
        return self.ws.pings

    async def push(self, cmd: str, body: dict[str, Any], req_id: str | None = None) -> str:
        return await self.ws.push(cmd, body, req_id)

    async def drop(self) -> None:
        await self.ws.drop()

    def stream_frames(self, req_id: str | None = None) -> list[dict[str, Any]]:
        return self.ws.stream_frames(req_id)

    # --- server -------------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application(client_max_size=UPLOAD_BYTES["file"] + 1024 * 1024)
        app.router.add_get("/cgi-bin/gettoken", self._gettoken)
        app.router.add_post("/cgi-bin/message/send", self._send)
        app.router.add_post("/cgi-bin/message/update_template_card", self._update)
        app.router.add_post("/cgi-bin/aibot/response", self._response)
        app.router.add_get("/cgi-bin/media/get", self._media)
        app.router.add_post("/cgi-bin/media/upload", self._upload)
        app.router.add_get("/cgi-bin/user/get", self._user)
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/ws", self.ws.handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        await self.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    def _error(errcode: int, errmsg: str) -> web.Response:
        return web.json_response({"errcode": errcode, "errmsg": errmsg})

    async def _gettoken(self, request: web.Request) -> web.Response:
        self.token_fetches += 1
        corp_id, secret = request.query.get("corpid"), request.query.get("corpsecret")
        if not corp_id:
            return self._error(41002, "corpid missing")
        if not secret:
            return self._error(41004, "corpsecret missing")
        if corp_id != self.corp_id:
            return self._error(40013, "invalid corpid")
        if secret != self.secret:
            return self._error(40001, "invalid credential")
        if not self.tokens.get(self.token):
            self.token = f"tok-{next(self._ids)}"
            self.tokens[self.token] = True
        body = {"errcode": 0, "errmsg": "ok", "access_token": self.token, "expires_in": 7200}
        return web.json_response(body)

    def _check(self, request: web.Request, path: str) -> web.Response | None:
        """Token, then frequency (docstring 2. and 3.); None when the call may proceed."""
        refused = self._refusal(request, path)
        self.checked.append((self.clock(), path, refused[0] if refused is not None else 0))
        if refused is not None:
            self.refusals.append((path, refused[0]))
            return self._error(*refused)
        return None

    def _refusal(self, request: web.Request, path: str) -> tuple[int, str] | None:
        token = request.query.get("access_token")
        if not token:
            return 41001, "access_token missing"
        if token not in self.tokens:
            return 40014, "invalid access_token"
        if not self.tokens[token]:
            return 42001, "access_token expired"
        now = self.clock()
        if now < self._blocked_until.get(path, 0.0):
            return FREQUENCY_LIMIT, "api freq out of limit"
        calls = self._calls_at[path]
        while calls and calls[0] <= now - self.minute_s:
            calls.popleft()
        if len(calls) >= self.limits.get(path, self.per_minute):
            self._blocked_until[path] = now + self.minute_s
            return FREQUENCY_LIMIT, "api freq out of limit"
        calls.append(now)
        return None

    def _member_quota(self, touser: str) -> bool:
        now, sends = self.clock(), self._member_sends[touser]
        while sends and sends[0] <= now - self.minute_s:
            sends.popleft()
        if len(sends) >= MEMBER_PER_MINUTE:
            return False
        sends.append(now)
        return True

    async def _media(self, request: web.Request) -> web.Response:
        media_id = request.query.get("media_id", "")
        self.downloads.append(media_id)
        refused = self._check(request, "media/get")
        if refused is not None:
            return refused
        target = self.media_redirects.get(media_id)
        if target is not None:
            if "://" in target:
                raise web.HTTPFound(target)
            raise web.HTTPFound(str(request.rel_url.update_query(media_id=target)))
        if media_id not in self.media:
            return self._error(40007, "invalid media_id")
        data, content_type = self.media[media_id]
        return web.Response(body=data, content_type=content_type)

    async def _user(self, request: web.Request) -> web.Response:
        userid = request.query.get("userid", "")
        self.calls.append(("user/get", {"userid": userid}))
        refused = self._check(request, "user/get")
        if refused is not None:
            return refused
        if userid in self.hidden:
            self.refusals.append(("user/get", 60011))
            return self._error(60011, "no privilege to access/modify contact/party/agent")
        # Anyone else who messages the app is a member it sees; an app made since 2022-06-20
        # gets them without email (9.). Unknown userids (60111) are not modelled.
        member = self.users.get(userid, {"name": userid})
        return web.json_response({"errcode": 0, "errmsg": "ok", "userid": userid, **member})

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.downloads.append(name)
        if name in self.redirects:
            raise web.HTTPFound(self.redirects[name])
        if name not in self.files:
            return web.Response(status=404)
        disposition = f'attachment; filename="{self._names.get(name, "file.bin")}"'
        return web.Response(
            body=self.files[name],
            content_type="application/octet-stream",
            headers={"Content-Disposition": disposition},
        )

    async def _upload(self, request: web.Request) -> web.Response:
        kind = request.query.get("type", "")
        form = await request.post()
        media = form.get("media")
        name = media.filename if isinstance(media, web.FileField) else ""
        self.calls.append(("media/upload", {"type": kind, "filename": name}))
        refused = self._check(request, "media/upload")
        if refused is not None:
            return refused
        if self.upload_refusals:
            return self._error(self.upload_refusals.pop(0), "refused (a test's fault)")
        if kind not in UPLOAD_BYTES or not isinstance(media, web.FileField):
            return self._error(40005, "invalid type")  # docstring 6b.
        data = media.file.read()
        if len(data) <= 5 or len(data) > UPLOAD_BYTES[kind]:
            return self._error(40009 if kind == "image" else 40006, "invalid size")  # 6b.
        if kind == "image" and not data.startswith((b"\x89PNG", b"\xff\xd8\xff")):
            return self._error(40004, "invalid media file type")  # 6b.: JPG, PNG
        media_id = f"up-{next(self._ids)}"
        self.media[media_id] = (data, media.content_type)
        self.uploads[media_id] = (kind, name)
        body = {
            "errcode": 0,
            "errmsg": "",
            "type": kind,
            "media_id": media_id,
            "created_at": str(int(time.time())),
        }
        return web.json_response(body)

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("message/send", body))
        refused = self._check(request, "message/send")
        if refused is not None:
            return refused
        msgtype = body.get("msgtype")
        if msgtype in ("image", "file"):
            if (body.get(msgtype) or {}).get("media_id") not in self.media:
                return self._error(40007, "invalid media_id")
        result: dict[str, Any] = {
            "errcode": 0,
            "errmsg": "ok",
            "invaliduser": "",
            "msgid": f"msg-{next(self._ids)}",
        }
        if body.get("msgtype") == "template_card":
            card = body["template_card"]
            if card.get("task_id") in self.task_ids:
                return self._error(TASK_ID_EXISTS, "task_id exists")
            self.task_ids.add(card.get("task_id"))
            if card.get("card_type") in INTERACTIVE:
                result["response_code"] = self.issue_code()
        if not self._member_quota(str(body.get("touser") or "")):
            self.dropped.append(body)
            return web.json_response(result)
        self.sent.append(body)
        return web.json_response(result)

    async def _update(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(("message/update_template_card", body))
        refused = self._check(request, "message/update_template_card")
        if refused is not None:
            return refused
        issued = self.codes.pop(str(body.get("response_code")), None)
        if issued is None or time.monotonic() - issued > 72 * 3600:
            return self._error(RESPONSE_CODE_USED, "invalid response_code")
        self.updates.append(body)
        return web.json_response({"errcode": 0, "errmsg": "ok", "invaliduser": []})

    async def _response(self, request: web.Request) -> web.Response:
        code = request.query.get("response_code", "")
        body = await request.json()
        label, issued = self.response_urls.pop(code, ("", 0.0))
        if not label or time.monotonic() - issued > 3600:
            return self._error(RESPONSE_CODE_USED, "invalid response_code")
        if body.get("msgtype") not in ("markdown", "template_card"):
            return self._error(40008, "invalid message type")
        self.responses.append({"id": label, **body})
        return web.json_response({"errcode": 0, "errmsg": "ok"})
