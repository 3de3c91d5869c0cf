"""A fake DingTalk that behaves as the real one does, refusals included, so the adapter is
tested against DingTalk and not against our own reading of it. Longer than 300 lines: one
fake server per platform, and the list of sourced behaviours below is its specification.

Sources: DOC:<slug> = https://open.dingtalk.com/document/development/<slug> (read in the
mirror apolloyyu/kb-dingtalk-open-platform, docs/01-应用开发/02-4a8AMF6u2A-服务端API/);
MODEL = aliyun/dingtalk-sdk dingtalk/python/alibabacloud_dingtalk/card_1_0/models.py;
STREAM-DOC = open-dingtalk/developerpedia docs/learn/stream/protocol.md.

OpenAPI (api.dingtalk.com), each refusal as ``{"code", "message", "requestid"}`` + HTTP status:
- token: ``POST /v1.0/oauth2/accessToken`` -> ``{accessToken, expireIn: 7200}``, the same token
  while valid; wrong appKey/appSecret -> 400 ``invalidClientIdOrSecret``
  [DOC:obtain-the-access-token-of-an-internal-app]. ``expire_tokens()`` revokes the current one.
- every other call: a missing/unknown ``x-acs-dingtalk-access-token`` -> **400**
  ``InvalidAuthentication`` "不合法的access_token" [DOC:server-api-error-codes-1].
- throttling (injected): 403 ``Forbidden.AccessDenied.QpsLimitForApi``
  [DOC:how-to-process-api-throttling-on-the-dingtalk-server, DOC:server-api-error-codes-1];
  robot sends also 400 ``send.too.fast`` [DOC:the-robot-sends-a-group-message].
- ``POST /v1.0/robot/groupMessages/send`` -> ``{processQueryKey}``; ``POST /v1.0/robot/
  oToMessages/batchSend`` -> ``{processQueryKey, invalidStaffIdList,
  flowControlledStaffIdList}`` (listed recipients got nothing; ``invalid_staff`` ids come back
  in ``invalidStaffIdList``). robotCode must be the app's
  robot (else 400 ``invalidParameter.robotCode.notExsit``), msgKey a documented template (else
  ``invalidParameter.msgKey.invalid``), msgParam JSON (else ``invalidParameter.msgParam.
  invalid``) of at most 15000 UTF-8 bytes (else ``invalidParameter.msgParam.tooLong``)
  [DOC:the-robot-sends-a-group-message, DOC:chatbots-send-one-on-one-chat-messages-in-batches,
  DOC:robot-message-type]. The 15000-byte figure is documented for the group API; the 1:1 API
  lists the same error without a figure, so the same limit is applied (assumed).
- ``POST /v1.0/card/instances/createAndDeliver`` -> ``{success, result: {outTrackId,
  deliverResults: [{spaceType, spaceId, success, errorMsg?, carrierId}]}}``, one result per
  space of ``openSpaceId`` [DOC:create-and-deliver-cards, MODEL CreateAndDeliverResponseBody];
  ``refuse_delivery()`` makes a space answer ``success: false`` with an ``errorMsg`` (the card
  is still created). Refusals: ``param.cardTemplateIdEmpty``, ``param.outTrackIdEmpty``,
  ``param.openSpaceIdEmpty``/``…Invalid``, ``param.openDeliverModelEmpty`` (a space without its
  deliver model), ``param.cardAlreadyExist`` (an outTrackId used before), ``param.invalid``
  (a non-string cardParamMap value: "属性字段只支持 String 类型"). A template the app may not
  use -> 400 ``param.templateUnpublished`` (the answer an unpublished template got,
  zfanswer/dify-on-dingtalk#2; ⚠ untraced for an id that does not exist at all, taken as the
  same). Known templates (``templates``): the public AI card DingTalk's own connector and
  channel SDKs stream into, ``02fcf2f4-….schema`` (DingTalk-Real-AI/dingtalk-openclaw-connector
  src/services/messaging/card.ts l.12; dingtalk-channel-sdk-python card.py: created with only
  ``config`` '{"autoLayout":true}', then PUT ``flowStatus`` 2 with ``msgContent``, streamed
  into ``msgContent``, finished by a PUT of ``flowStatus`` 3 with the whole ``msgContent``),
  the older stream SDK's ``AIMarkdownCardInstance`` one, ``382e4302-….schema`` (open-dingtalk/
  dingtalk-stream-sdk-python dingtalk_stream/card_instance.py l.159: the same keys; its
  ``ai_finish``, l.253-274, finishes with that one PUT and no finalizing stream), and the tests'
  own ``tpl.schema``. A card's variables are whatever its PUTs set: nothing requires a streamed
  card to get ``isFinalize`` before its finishing PUT (the stream SDK sends none; the channel
  SDK's ``finish`` sends one, then the PUT).
- Card permissions: without Card.Instance.Write (``card_permission = False``) the card calls
  answer 403 (open-dingtalk/dingtalk-stream-sdk-python#15: 403 on /v1.0/card/instances, fixed
  by adding 互动卡片实例写权限), the code ``Forbidden.AccessDenied.AccessTokenPermissionDenied``
  [DOC:server-api-error-codes-1]; without Card.Streaming.Write (``streaming_permission``) the
  same 403 on ``PUT /v1.0/card/streaming`` (⚠ untraced: assumed alike).
- ``PUT /v1.0/card/instances`` -> ``{success: true, result: true}``; unknown outTrackId 400
  ``param.cardNotExist``; neither cardData nor privateData 400
  ``param.cardDataAndPrivateDataBothEmpty`` [DOC:interactive-card-update-interface].
- ``PUT /v1.0/card/streaming`` -> ``{success: true, result: true}``; 400 ``param.stream.
  outTrackId`` "card is not exist", ``…keyEmpty``, ``…contentEmpty``, ``…guidEmpty``,
  ``…isFull`` (null); a repeated guid changes nothing ("guid … 系统内部用于幂等判断")
  [DOC:api-streamingupdate].
- ``POST /v1.0/robot/messageFiles/download`` -> ``{downloadUrl}``; another robot's code 400
  ``invalidParameter.robotCode.auth``
  [DOC:download-the-file-content-of-the-robot-receiving-message].
oapi (``https://oapi.dingtalk.com``; served here on the same port, as the adapter's
``oapi_base`` is apiBase when apiBase is local):
- ``POST /media/upload?access_token=`` multipart ``type`` image|voice|video|file and the file
  as ``media`` -> ``{errcode 0, errmsg "ok", media_id, created_at, type}``; images jpg gif png
  bmp, files doc docx xls xlsx ppt pptx zip pdf rar, each at most 20 MB
  [DOC:upload-media-files]; refusals as ``{errcode, errmsg}`` (HTTP 200, ⚠ the status is not
  documented): a token not issued 40014, another ``type`` 40004, a file of another format
  40005, a size past the limit 40006 [DOC:server-api-error-codes-1]. The same access token as
  the OpenAPI's is taken (the official SDK uploads with it: open-dingtalk/
  dingtalk-stream-sdk-python dingtalk_stream/stream.py ``upload_to_dingtalk``).
  ``sampleImageMsg``'s ``photoURL`` takes a URL or such a ``media_id``; ``sampleFile`` is
  ``{mediaId, fileName, fileType}``, fileType one of xlsx pdf zip rar doc docx
  [DOC:robot-message-type].
sessionWebhook (``https://oapi.dingtalk.com/robot/sendBySession?session=…``, DOC:receive-message):
  HTTP 200 with ``{"errcode", "errmsg"}`` like the robot webhook it is (errcode 0 = sent;
  400105 unsupported msgtype; 410100 throttled) [DOC:custom-robots-send-group-messages].
  Past ``sessionWebhookExpiredTime``, or when ``expired=True``, it answers errcode 300001: the
  code DingTalk gives for an unknown robot webhook token (third-party reports; no DingTalk page
  documents the expired-session answer — untraced). A body over 20,000 bytes is refused
  (observed, secondary: ``MAX_WEBHOOK_BYTES``).
oapi (``https://oapi.dingtalk.com``, served here on the same port): ``POST /topapi/v2/user/get
?access_token=…`` ``{userid, language}`` -> HTTP 200 ``{errcode: 0, errmsg: "ok", result: {userid,
name, email, org_email, …}, request_id}`` [DOC:query-user-details, the Java SDK's
``OapiV2UserGetRequest`` / ``OapiV2UserGetResponse.UserGetResponse``]; refusals are HTTP 200 with
an errcode: 40014 "不合法的access_token" [DOC:server-api-error-codes-1], 60011 "没有调用该接口的
权限" when the app lacks the contact permission (``contact_permission = False``; the wording as
quoted in capricornxl/ad-password-self-service#13), 60121 "找不到该用户" for an unknown userid
(⚠ untraced: the code as third-party SDK error tables give it). The new-style access token is
taken there (DOC:query-user-details calls it with the internal app's token).
Stream gateway: tests/fakes/dingtalk_stream.py.

Not traced to a source (kept because the tests need an answer): any path not listed -> 404
``{"code": "NotFound"}``; the file download URL ``/f/<code>`` serving a PNG."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.dingtalk_stream import FakeStreamGateway, StreamState, error_response
from tests.fakes.limits import DingTalkLimits
from tests.support.helpers import free_port

CLIENT_ID = "dingappkey"
CLIENT_SECRET = "dt-app-secret"
SEND_PATHS = ("/v1.0/robot/groupMessages/send", "/v1.0/robot/oToMessages/batchSend")
WEBHOOK_PATH = "/robot/sendBySession"
MAX_PARAM_BYTES = 15_000
AI_MARKDOWN_TEMPLATE = "382e4302-551d-4880-bf29-a30acfab2e71.schema"  # the stream SDK's
CONNECTOR_TEMPLATE = "02fcf2f4-5e02-4a85-b672-46d1f715543e.schema"  # DingTalk's connector's
PERMISSION_DENIED = "Forbidden.AccessDenied.AccessTokenPermissionDenied"
USER_GET_PATH = "/topapi/v2/user/get"
# A sessionWebhook body over 20,000 bytes is refused: an observed error, secondary
# (docs/dingtalk.md, "Limits"; no DingTalk page gives it). The
# errcode it answers is not traced: 40035 (oapi's "不合法的参数") stands in, and the gateway
# treats every non-zero errcode alike (the robot OpenAPI takes the message instead).
MAX_WEBHOOK_BYTES = 20_000
MSG_KEYS = {
    "sampleText": ("content",),
    "sampleMarkdown": ("title", "text"),
    "sampleImageMsg": ("photoURL",),
    "sampleLink": ("text", "title", "picUrl", "messageUrl"),
    "sampleActionCard": ("title", "text", "singleTitle", "singleURL"),
    **{
        f"sampleActionCard{n}": (
            "title",
            "text",
            *(f"{k}{i}" for i in range(1, n + 1) for k in ("actionTitle", "actionURL")),
        )
        for n in (2, 3, 4, 5)
    },
    "sampleActionCard6": ("title", "text", "buttonTitle1", "buttonUrl1", "buttonTitle2"),
    "sampleAudio": ("mediaId",),
    "sampleFile": ("mediaId", "fileName", "fileType"),
    "sampleVideo": ("videoMediaId",),
}
WEBHOOK_TYPES = {"text", "markdown", "actionCard", "feedCard", "link"}
UPLOAD_BYTES = 20 * 1024 * 1024  # DOC:upload-media-files (image, video, file; voice 2 MB)
UPLOAD_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM")  # jpg png gif bmp
UPLOAD_FILE_TYPES = {"doc", "docx", "xls", "xlsx", "ppt", "pptx", "zip", "pdf", "rar"}
PNG = b"\x89PNG\r\n\x1a\n"  # the signature is enough for a fake image


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    status: int = 200
    delivered: bool = True  # False: answered, but nothing reached a chat


@dataclass
class Fault:
    status: int
    body: dict[str, Any]
    times: int


@dataclass
class Card:
    template: str
    params: dict[str, str]
    spaces: list[dict[str, Any]]
    stream: dict[str, str] = field(default_factory=dict)
    finalized: bool = False


class FakeDingTalk:
    """``limits``: DingTalk's QPS limit and monthly quota enforced (tests/fakes/limits.py)."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, limits: DingTalkLimits | None = None
    ) -> None:
        self.limits = limits
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.clock = clock
        self.calls: list[Call] = []
        # A download code's URL other than this server's /f/<code>, and codes whose /f/ URL
        # answers 302 elsewhere: how a hostile or broken storage host would answer (tests).
        self.download_urls: dict[str, str] = {}
        self.file_redirects: dict[str, str] = {}
        # What /f/<code> serves for a code (bytes, Content-Type), else a PNG: a file's type on
        # DingTalk's storage host is the test's choice.
        self.files: dict[str, tuple[bytes, str]] = {}
        self.faults: dict[str, list[Fault]] = {}
        self.upload_refusals: list[int] = []
        self.flow_controlled = 0  # batchSend lists the recipients as throttled this many times
        self.invalid_staff: set[str] = set()  # staff ids batchSend answers as invalid
        self.failed_deliveries: list[str] = []  # errorMsg of the next refused card deliveries
        self.lost_answers: dict[str, int] = {}
        self.expired_webhooks: set[str] = set()
        self.webhook_expiry: dict[str, int] = {}
        self.token = uuid.uuid4().hex
        self.token_requests = 0
        self.cards: dict[str, Card] = {}
        self.media: dict[str, tuple[str, str, bytes]] = {}  # media_id -> (type, filename, data)
        self.templates = {AI_MARKDOWN_TEMPLATE, CONNECTOR_TEMPLATE, "tpl.schema"}
        self.card_permission = True
        self.streaming_permission = True
        # The org's directory (topapi/v2/user/get) by userid, and whether the app may read it.
        self.users: dict[str, dict[str, Any]] = {}
        self.contact_permission = True
        self._guids: set[str] = set()
        self.gateway = FakeStreamGateway(
            client_id=CLIENT_ID, client_secret=CLIENT_SECRET, ws_base=f"ws://127.0.0.1:{self.port}"
        )
        self._runner: web.AppRunner | None = None
        app = web.Application(
            middlewares=[limits.middleware()] if limits is not None else [],
            client_max_size=UPLOAD_BYTES + 1024 * 1024,
        )
        app.router.add_post("/v1.0/oauth2/accessToken", self._token)
        app.router.add_post("/v1.0/gateway/connections/open", self._open)
        self.gateway.routes(app)
        app.router.add_get("/f/{code}", self._file)
        app.router.add_post(WEBHOOK_PATH, self._webhook)
        app.router.add_post("/media/upload", self._upload)
        app.router.add_post(USER_GET_PATH, self._user_get)
        app.router.add_route("*", "/v1.0/{tail:.*}", self._openapi)
        self.app = app

    @property
    def stream(self) -> StreamState:
        return self.gateway.state

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        await self.gateway.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- test controls ------------------------------------------------------------------------
    def fail(self, path: str, *, status: int, code: str = "system.busy", times: int = 1) -> None:
        """The next ``times`` calls of ``path`` are refused with ``status`` and ``code``."""
        body = {"code": code, "message": code, "requestid": str(uuid.uuid4()).upper()}
        self.faults.setdefault(path, []).append(Fault(status, body, times))

    def flow_control(self, path: str, times: int = 1) -> None:
        """The API gateway's QPS limit [DOC:server-api-error-codes-1]."""
        self.fail(path, status=403, code="Forbidden.AccessDenied.QpsLimitForApi", times=times)

    def refuse_uploads(self, errcode: int = 40006, times: int = 1) -> None:
        """The next ``times`` oapi uploads are refused with ``errcode`` (in an HTTP 200; 40006, a
        size past the limit [DOC:server-api-error-codes-1], as the module docstring says)."""
        self.upload_refusals += [errcode] * times

    def refuse_delivery(self, error: str = "robot is not in this group", times: int = 1) -> None:
        self.failed_deliveries += [error] * times

    def lose_answer(self, path: str, times: int = 1) -> None:
        """The next call of ``path`` is carried out, but its answer is lost on the way (a 502
        from a proxy): the caller cannot tell that it happened."""
        self.lost_answers[path] = self.lost_answers.get(path, 0) + times

    def expire_tokens(self) -> None:
        """The current access token stops working; the token API hands out a new one."""
        self.token = uuid.uuid4().hex

    def session_webhook(self, *, expired: bool = False, ttl_ms: int = 5_400_000) -> tuple[str, int]:
        """A conversation's sessionWebhook and its expiry in ms (≈90 min in the stream doc's
        example). ``expired`` makes DingTalk refuse it although the expiry says it is valid."""
        sid = uuid.uuid4().hex
        expires = int(self.clock() * 1000) + ttl_ms
        self.webhook_expiry[sid] = expires
        if expired:
            self.expired_webhooks.add(sid)
        return f"{self.base}{WEBHOOK_PATH}?session={sid}", expires

    async def push(
        self, frame_type: str, topic: str, data: dict[str, Any], message_id: str | None = None
    ) -> str:
        return await self.gateway.push(frame_type, topic, data, message_id)

    def bodies(self, path: str, method: str | None = None) -> list[dict[str, Any]]:
        return [
            c.body
            for c in self.calls
            if c.path == path and c.status < 300 and (method is None or c.method == method)
        ]

    def sent(self) -> list[dict[str, Any]]:
        """Every robot message that reached a chat, webhook or OpenAPI: title/text/urls."""
        out: list[dict[str, Any]] = []
        for c in self.calls:
            if c.status >= 300 or not c.delivered:
                continue
            if c.path == WEBHOOK_PATH:
                content = c.body[c.body["msgtype"]]
                out.append({"via": "webhook", **_normalise(content)})
            elif c.path in SEND_PATHS:
                param = json.loads(c.body["msgParam"])
                out.append({"via": "openapi", "msgKey": c.body["msgKey"], **_normalise(param)})
        return out

    # --- OpenAPI --------------------------------------------------------------------------------
    def _refuse(self, status: int, code: str, message: str = "") -> web.Response:
        self.calls[-1].status = status
        return error_response(status, code, message or code)

    def _fault(self, path: str) -> web.Response | None:
        queue = self.faults.get(path)
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.pop(0)
        return self._refuse(fault.status, fault.body["code"], fault.body["message"])

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, {"appKey": body.get("appKey")}))
        self.token_requests += 1
        if (fault := self._fault(request.path)) is not None:
            return fault
        if body.get("appKey") != CLIENT_ID or body.get("appSecret") != CLIENT_SECRET:
            return self._refuse(400, "invalidClientIdOrSecret", "无效的clientId或者clientSecret")
        return web.json_response({"accessToken": self.token, "expireIn": 7200})

    async def _upload(self, request: web.Request) -> web.Response:
        """oapi ``/media/upload`` (the module docstring, "oapi")."""
        form = await request.post()
        kind, media = form.get("type"), form.get("media")
        name = media.filename if isinstance(media, web.FileField) else ""
        self.calls.append(Call("POST", request.path, {"type": kind, "filename": name}))

        def refuse(errcode: int, errmsg: str) -> web.Response:
            self.calls[-1].status = 400  # refused (the answer itself is HTTP 200)
            return web.json_response({"errcode": errcode, "errmsg": errmsg})

        if request.query.get("access_token") != self.token:
            return refuse(40014, "不合法的access_token")
        if self.upload_refusals:
            return refuse(self.upload_refusals.pop(0), "refused (a test's fault)")
        if kind not in ("image", "voice", "video", "file") or not isinstance(media, web.FileField):
            return refuse(40004, "不合法的媒体文件类型")
        data = media.file.read()
        suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if (kind == "image" and not data.startswith(UPLOAD_IMAGE_MAGIC)) or (
            kind == "file" and suffix not in UPLOAD_FILE_TYPES
        ):
            return refuse(40005, "不合法的文件类型")
        if not data or len(data) > UPLOAD_BYTES:
            return refuse(40006, "不合法的文件大小")
        media_id = f"@fake{uuid.uuid4().hex[:16]}"
        self.media[media_id] = (str(kind), name, data)
        created = int(self.clock() * 1000)
        return web.json_response(
            {
                "errcode": 0,
                "errmsg": "ok",
                "media_id": media_id,
                "created_at": created,
                "type": kind,
            }
        )

    async def _open(self, request: web.Request) -> web.Response:
        """The stream's connection registration: no access token, the app credentials in the
        body (STREAM-DOC step 1)."""
        body = await request.json()
        self.calls.append(Call("POST", request.path, {"clientId": body.get("clientId")}))
        if (fault := self._fault(request.path)) is not None:
            return fault
        return await self.gateway.open(body)

    async def _openapi(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        self.calls.append(Call(request.method, request.path, body))
        if request.headers.get("x-acs-dingtalk-access-token") != self.token:
            return self._refuse(400, "InvalidAuthentication", "不合法的access_token")
        if (fault := self._fault(request.path)) is not None:
            return fault
        if request.path.startswith("/v1.0/card/") and not self.card_permission:
            return self._refuse(403, PERMISSION_DENIED, "没有调用该接口的权限")
        if request.path == "/v1.0/card/streaming" and not self.streaming_permission:
            return self._refuse(403, PERMISSION_DENIED, "没有调用该接口的权限")
        route = {
            ("POST", "/v1.0/robot/groupMessages/send"): self._group_send,
            ("POST", "/v1.0/robot/oToMessages/batchSend"): self._batch_send,
            ("POST", "/v1.0/card/instances/createAndDeliver"): self._create_and_deliver,
            ("PUT", "/v1.0/card/instances"): self._update_card,
            ("PUT", "/v1.0/card/streaming"): self._stream_card,
            ("POST", "/v1.0/robot/messageFiles/download"): self._download,
        }.get((request.method, request.path))
        if route is None:
            return self._refuse(404, "NotFound", "not served by the fake")
        answer = route(body)
        if answer.status < 300 and self.lost_answers.get(request.path, 0) > 0:
            self.lost_answers[request.path] -= 1
            return self._refuse(502, "BadGateway", "the answer was lost")
        return answer

    def _message_refused(self, body: dict[str, Any]) -> web.Response | None:
        if body.get("robotCode") != CLIENT_ID:
            return self._refuse(400, "invalidParameter.robotCode.notExsit", "机器人不存在")
        fields = MSG_KEYS.get(str(body.get("msgKey")))
        if fields is None:
            return self._refuse(400, "invalidParameter.msgKey.invalid", "msgKey无效")
        raw = body.get("msgParam")
        try:
            param = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            param = None
        if not isinstance(param, dict) or any(not param.get(f) for f in fields):
            return self._refuse(400, "invalidParameter.msgParam.invalid", "msgParam必须是json格式")
        if len(raw.encode()) > MAX_PARAM_BYTES:  # type: ignore[union-attr]
            return self._refuse(400, "invalidParameter.msgParam.tooLong", "消息内容太长")
        return None

    def _group_send(self, body: dict[str, Any]) -> web.Response:
        if not body.get("openConversationId"):
            return self._refuse(400, "miss.openConversationId", "缺少openConversationId")
        if (refused := self._message_refused(body)) is not None:
            return refused
        return web.json_response({"processQueryKey": uuid.uuid4().hex})

    def _batch_send(self, body: dict[str, Any]) -> web.Response:
        if not body.get("userIds"):
            return self._refuse(400, "invalidParameter.userIds.empty", "用户userId列表为空")
        if (refused := self._message_refused(body)) is not None:
            return refused
        invalid = [u for u in body["userIds"] if u in self.invalid_staff]
        valid = [u for u in body["userIds"] if u not in self.invalid_staff]
        throttled = valid if self.flow_controlled > 0 else []
        self.flow_controlled -= 1
        self.calls[-1].delivered = bool(valid) and not throttled
        return web.json_response(
            {
                "processQueryKey": uuid.uuid4().hex,
                "invalidStaffIdList": invalid,
                "flowControlledStaffIdList": throttled,
            }
        )

    def _create_and_deliver(self, body: dict[str, Any]) -> web.Response:
        track = str(body.get("outTrackId") or "")
        if not body.get("cardTemplateId"):
            return self._refuse(400, "param.cardTemplateIdEmpty")
        if not track:
            return self._refuse(400, "param.outTrackIdEmpty")
        if body["cardTemplateId"] not in self.templates:
            return self._refuse(400, "param.templateUnpublished")
        space_id = str(body.get("openSpaceId") or "")
        if not space_id:
            return self._refuse(400, "param.openSpaceIdEmpty")
        prefix, _, rest = space_id.partition("dtv1.card//")
        spaces = [s.partition(".") for s in rest.split(";")] if not prefix else []
        if not spaces or any(not sid for _t, _, sid in spaces):
            return self._refuse(400, "param.openSpaceIdInvalid")
        models = {"IM_GROUP": "imGroupOpenDeliverModel", "IM_ROBOT": "imRobotOpenDeliverModel"}
        if any(not body.get(models.get(t.upper(), "")) for t, _, _sid in spaces):
            return self._refuse(400, "param.openDeliverModelEmpty")
        params = body.get("cardData", {}).get("cardParamMap", {})
        if any(not isinstance(v, str) for v in params.values()):
            return self._refuse(400, "param.invalid")
        if track in self.cards:
            return self._refuse(400, "param.cardAlreadyExist")
        results: list[dict[str, Any]] = []
        for space_type, _, sid in spaces:
            result: dict[str, Any] = {"spaceType": space_type.upper(), "spaceId": sid}
            if self.failed_deliveries:
                result.update(success=False, errorMsg=self.failed_deliveries.pop(0))
            else:
                result.update(success=True, carrierId=uuid.uuid4().hex)
            results.append(result)
        self.cards[track] = Card(str(body["cardTemplateId"]), dict(params), results)
        self.calls[-1].delivered = any(r["success"] for r in results)
        return web.json_response(
            {"success": True, "result": {"outTrackId": track, "deliverResults": results}}
        )

    def _update_card(self, body: dict[str, Any]) -> web.Response:
        if not body.get("outTrackId"):
            return self._refuse(400, "param.outTrackIdEmpty")
        card = self.cards.get(str(body["outTrackId"]))
        if card is None:
            return self._refuse(400, "param.cardNotExist")
        data = body.get("cardData", {}).get("cardParamMap")
        if not data and not body.get("privateData"):
            return self._refuse(400, "param.cardDataAndPrivateDataBothEmpty")
        by_key = body.get("cardUpdateOptions", {}).get("updateCardDataByKey") is True
        card.params = {**card.params, **(data or {})} if by_key else dict(data or {})
        return web.json_response({"success": True, "result": True})

    def _stream_card(self, body: dict[str, Any]) -> web.Response:
        card = self.cards.get(str(body.get("outTrackId") or ""))
        if card is None:
            return self._refuse(400, "param.stream.outTrackId", "card is not exist")
        for name in ("key", "content", "guid"):
            if not body.get(name):
                return self._refuse(400, f"param.stream.{name}Empty")
        if body.get("isFull") is None:
            return self._refuse(400, "param.stream.isFull")
        if body["guid"] in self._guids:  # the same call again: already applied
            self.calls[-1].delivered = False
            return web.json_response({"success": True, "result": True})
        self._guids.add(body["guid"])
        key = str(body["key"])
        card.stream[key] = (
            body["content"] if body["isFull"] else card.stream.get(key, "") + (body["content"])
        )
        card.finalized = card.finalized or body.get("isFinalize") is True
        return web.json_response({"success": True, "result": True})

    def _download(self, body: dict[str, Any]) -> web.Response:
        if body.get("robotCode") != CLIENT_ID:
            return self._refuse(400, "invalidParameter.robotCode.auth")
        code = str(body.get("downloadCode"))
        return web.json_response(
            {"downloadUrl": self.download_urls.get(code, f"{self.base}/f/{code}")}
        )

    async def _file(self, request: web.Request) -> web.Response:
        """The download URL the robot file API hands out: a tiny PNG per download code."""
        self.calls.append(Call("GET", request.path, {}))
        if request.match_info["code"] in self.file_redirects:
            raise web.HTTPFound(self.file_redirects[request.match_info["code"]])
        code = request.match_info["code"]
        data, content_type = self.files.get(code, (PNG + code.encode(), "image/png"))
        return web.Response(body=data, content_type=content_type)

    # --- oapi ----------------------------------------------------------------------------------
    async def _user_get(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, body))

        def refuse(code: int, message: str) -> web.Response:
            self.calls[-1].delivered = False
            return web.json_response({"errcode": code, "errmsg": message, "request_id": "r"})

        if request.query.get("access_token") != self.token:
            return refuse(40014, "不合法的access_token")
        if self.upload_refusals:
            return refuse(self.upload_refusals.pop(0), "refused (a test's fault)")
        if not self.contact_permission:
            return refuse(60011, "没有调用该接口的权限，接口权限申请参考：…")
        user = self.users.get(str(body.get("userid")))
        if user is None:
            return refuse(60121, "找不到该用户")
        result = {"userid": body["userid"], "email": "", "org_email": "", **user}
        return web.json_response(
            {"errcode": 0, "errmsg": "ok", "result": result, "request_id": uuid.uuid4().hex}
        )

    # --- sessionWebhook -------------------------------------------------------------------------
    async def _webhook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw)
        self.calls.append(Call("POST", request.path, body))
        if len(raw) > MAX_WEBHOOK_BYTES:
            self.calls[-1].delivered = False
            return web.json_response({"errcode": 40035, "errmsg": "消息体过长"})
        sid = request.query.get("session", "")
        expiry = self.webhook_expiry.get(sid)
        if expiry is None or sid in self.expired_webhooks or expiry < self.clock() * 1000:
            self.calls[-1].delivered = False
            return web.json_response({"errcode": 300001, "errmsg": "session不存在或已过期"})
        if (fault := self.faults.get(WEBHOOK_PATH)) and fault[0].times > 0:
            fault[0].times -= 1
            self.calls[-1].delivered = False
            code = int(fault[0].body["code"])
            if fault[0].times <= 0:
                fault.pop(0)
            return web.json_response({"errcode": code, "errmsg": "fault"})
        if body.get("msgtype") not in WEBHOOK_TYPES:
            self.calls[-1].delivered = False
            return web.json_response({"errcode": 400105, "errmsg": "不支持的消息类型"})
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    def throttle_webhook(self, times: int = 1) -> None:
        """410100 "发送速度太快而限流" [DOC:custom-robots-send-group-messages]."""
        self.fail(WEBHOOK_PATH, status=200, code="410100", times=times)


def _normalise(content: dict[str, Any]) -> dict[str, Any]:
    urls = [v for k, v in content.items() if k.lower().startswith(("singleurl", "actionurl"))]
    urls += [b["actionURL"] for b in content.get("btns", [])]
    titles = [v for k, v in content.items() if k.startswith(("singleTitle", "actionTitle"))]
    titles += [b["title"] for b in content.get("btns", [])]
    return {
        "title": content.get("title"),
        "text": content.get("text"),
        "urls": urls,
        "buttons": titles,
    }
