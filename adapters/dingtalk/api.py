"""The DingTalk OpenAPI client (a ``PlatformApi``): access token (cached until shortly before
expiry), robot and card calls, sessionWebhook posts; flow-control answers, 5xx and calls that
got no answer back off and retry (docs/dingtalk.md).

Error answers of ``api.dingtalk.com`` are ``{"code", "message", "requestid"}`` with an HTTP 4xx
(https://open.dingtalk.com/document/development/server-api-error-codes-1): an expired or
unknown access token is **400** ``InvalidAuthentication`` (not 401); throttling is 403
``Forbidden.AccessDenied.Qps…/Qpm…`` (…/how-to-process-api-throttling-on-the-dingtalk-server),
and the robot send APIs also throttle with 400 ``send.too.fast`` and its siblings
(…/the-robot-sends-a-group-message). Every HTTP exchange is reported to ``observe`` under the
API's short name (``ENDPOINTS``; ``/metrics``)."""

from __future__ import annotations

import asyncio
import io
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import aiohttp
import structlog

from gateway.edge.platform_api import ApiCalls, PlatformApi
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.dingtalk")

TOKEN_MARGIN_S = 300  # refresh 5 min early, like the SDK (docs/dingtalk.md)
FLOW_CONTROL_CODES = ("QpsLimit", "QpmLimit")  # 403 Forbidden.AccessDenied.{QpsLimitFor…}
ROBOT_THROTTLED = {"send.too.fast", "send.byToken.tooFast", "too.many.group", "too.many.people"}
TOKEN_REFUSED = {"InvalidAuthentication"}  # 400 "不合法的access_token": fetch a new one
# The oapi's own (errcode in a 200 answer): 40014 不合法的access_token, 42001 access_token超时
# (DOC:server-api-error-codes-1).
TOKEN_REFUSED |= {"40014", "42001"}
# oapi.dingtalk.com answers HTTP 200 with ``errcode``: 40014 "不合法的access_token", 60011
# "没有调用该接口的权限" (the app lacks the API's permission), -1 "系统繁忙", 90018 / 90002
# QPS limits (…/server-api-error-codes-1; 60011's wording as DingTalk answers it, quoted in
# capricornxl/ad-password-self-service#13).
OAPI_TOKEN_REFUSED = {"40014"}
OAPI_RETRY = {"-1", "90018", "90002"}
NO_PERMISSION = "60011"
# sessionWebhook answers are HTTP 200 with errcode: -1 "系统繁忙" and 410100 "发送速度太快而限流"
# (…/custom-robots-send-group-messages); 130101/130102 are the older "send too fast" codes.
WEBHOOK_THROTTLED = {410100, 130101, 130102}
WEBHOOK_RETRY = {-1, *WEBHOOK_THROTTLED}
JSON_UTF8 = {"Content-Type": "application/json; charset=utf-8"}
# The metrics' name of each OpenAPI path the gateway calls (none carries an id).
ENDPOINTS = {
    "/v1.0/oauth2/accessToken": "token",
    "/v1.0/robot/groupMessages/send": "group_send",
    "/v1.0/robot/oToMessages/batchSend": "p2p_send",
    "/v1.0/robot/messageFiles/download": "file_download",
    "/v1.0/card/instances/createAndDeliver": "card_create",
    "/v1.0/card/instances": "card_update",
    "/v1.0/card/streaming": "card_stream",
    "/media/upload": "media_upload",
    "/topapi/v2/user/get": "user_get",
}


class DingTalkApiError(PlatformApiError):
    """An OpenAPI call refused (``status`` its HTTP status, ``code`` DingTalk's), or one that
    got no answer (``status`` 0, ``code`` the exception's name)."""

    def __init__(self, status: int, code: str, message: str, request_id: str = "") -> None:
        super().__init__(f"DingTalk API {status} {code}: {message}")
        self.status = status
        self.code = code
        self.request_id = request_id

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "request_id": self.request_id}

    @property
    def rate_limited(self) -> bool:
        """HTTP 429, 403 ``…QpsLimit…`` / ``…QpmLimit…``, or a robot send's 400 throttle."""
        if self.status == 429:
            return True
        if self.status == 400 and self.code in ROBOT_THROTTLED:
            return True
        if self.status == 200 and self.code in OAPI_RETRY:  # an oapi errcode
            return True
        code = self.code.lower()
        return self.status == 403 and any(c.lower() in code for c in FLOW_CONTROL_CODES)

    @property
    def retryable(self) -> bool:
        """Throttled, a server error, or no answer at all: worth another try."""
        return self.status == 0 or self.status >= 500 or self.rate_limited

    @property
    def refused(self) -> bool:
        """A definite answer that the call was not carried out (not retried, not a timeout)."""
        return 400 <= self.status < 500 and not self.retryable


class WebhookGone(PlatformApiError):
    """The sessionWebhook expired or was refused (``status``, ``errcode``), or did not answer
    (``status`` 0, ``reason`` the exception's name): fall back to the robot OpenAPI."""

    def __init__(
        self, message: str, *, status: int = 0, errcode: int = 0, reason: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.errcode = errcode
        self.reason = reason

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.errcode}

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.errcode in WEBHOOK_THROTTLED

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status >= 500 or self.errcode in WEBHOOK_RETRY


def dumps(body: dict[str, Any]) -> bytes:
    """UTF-8 JSON as DingTalk measures it: CJK stays 3 bytes, not a 6-byte ``\\uXXXX``."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class DingTalkApi(PlatformApi):
    platform = "dingtalk"
    chat_endpoints = frozenset({"group_send", "p2p_send", "card_create", "session_webhook"})

    def throttle_scope(self, error: PlatformApiError) -> Literal["api", "chat", "app"]:
        """A robot's "send too fast" is one conversation's; QpsLimit / QpmLimit the API's."""
        robot = isinstance(error, DingTalkApiError) and error.code in ROBOT_THROTTLED
        return "chat" if robot or isinstance(error, WebhookGone) else "api"

    def __init__(
        self,
        *,
        base: str,
        oapi_base: str = "https://oapi.dingtalk.com",
        client_id: str,
        client_secret: str,
        attempts: int = 5,
        backoff_s: float = 0.25,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observe: ApiCalls | None = None,
    ) -> None:
        super().__init__(
            base_url=base, observe=observe, timeout_s=15, attempts=attempts, sleep=sleep
        )
        self.oapi_base = oapi_base.rstrip("/")
        self.client_id = client_id
        self._secret = client_secret
        self.backoff_s = backoff_s

    # --- PlatformApi hooks ---------------------------------------------------------------------
    async def fetch_token(self) -> tuple[str, float]:
        data = await self._call(
            "POST",
            "/v1.0/oauth2/accessToken",
            {"appKey": self.client_id, "appSecret": self._secret},
            auth=False,
        )
        ttl = int(data.get("expireIn", 7200))
        return str(data["accessToken"]), max(ttl - TOKEN_MARGIN_S, ttl / 2)

    def label(self, error: PlatformApiError) -> str:
        if isinstance(error, WebhookGone):
            if error.status == 0:
                return error.reason
            return str(error.errcode) if error.errcode not in (0, -2) else f"http_{error.status}"
        assert isinstance(error, DingTalkApiError)
        return error.code or f"http_{error.status}"

    def token_refused(self, error: PlatformApiError) -> bool:
        return isinstance(error, DingTalkApiError) and (
            error.status == 401 or error.code in TOKEN_REFUSED or error.code in OAPI_TOKEN_REFUSED
        )

    def retryable(self, error: PlatformApiError) -> bool:
        return isinstance(error, DingTalkApiError | WebhookGone) and error.retryable

    def backoff(self, retry: int, error: PlatformApiError) -> float:
        """``backoff_s`` doubling up to 8 s, jittered by ±25 %."""
        delay = min(self.backoff_s * 2.0**retry, 8.0)
        return delay * (0.75 + random.random() / 2)

    # --- the calls ---------------------------------------------------------------------------
    async def access_token(self) -> str:
        return await self.token()

    async def call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An authenticated OpenAPI call, retried on throttling and server errors."""
        return await self._call(method, path, body, auth=True)

    async def _call(
        self, method: str, path: str, body: dict[str, Any], *, auth: bool
    ) -> dict[str, Any]:
        async def send(token: str | None) -> dict[str, Any]:
            headers = dict(JSON_UTF8)
            if token is not None:
                headers["x-acs-dingtalk-access-token"] = token
            try:
                async with self.http.request(
                    method,
                    self.base + path,
                    data=dumps(body),
                    headers=headers,
                    allow_redirects=False,  # the token header must not follow a redirect
                ) as resp:
                    data = await resp.json(content_type=None) if resp.content_length != 0 else {}
                    data = data if isinstance(data, dict) else {}
                    if resp.status < 300:
                        return data
                    raise DingTalkApiError(
                        resp.status,
                        str(data.get("code", "")),
                        str(data.get("message", "")),
                        str(data.get("requestid") or resp.headers.get("x-acs-request-id", "")),
                    )
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise DingTalkApiError(0, type(exc).__name__, str(exc)) from exc

        endpoint = ENDPOINTS.get(path, "other")
        return await self.exchange(endpoint, send, auth=auth, metered=endpoint != "token")

    async def upload_media(self, kind: str, data: bytes, name: str, mime: str) -> str:
        """``POST oapi /media/upload?access_token=`` (multipart ``type`` and the file as
        ``media``): a ``media_id`` for ``sampleImageMsg`` / ``sampleFile``. The oapi answers
        ``{errcode, errmsg, media_id}`` (DOC:upload-media-files); it takes the same access
        token as the OpenAPI (the official SDK does so: dingtalk_stream/stream.py
        ``upload_to_dingtalk``). The form is built again for each attempt."""

        async def send(token: str | None) -> str:
            form = aiohttp.FormData()
            form.add_field("type", kind)
            # a file object: aiohttp streams it (a big body given as bytes would hold the loop)
            form.add_field("media", io.BytesIO(data), filename=name, content_type=mime)
            try:
                async with self.http.post(
                    f"{self.oapi_base}/media/upload",
                    params={"access_token": token or ""},
                    data=form,
                    allow_redirects=False,  # the token must not follow a redirect
                ) as resp:
                    answer = await resp.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise DingTalkApiError(0, type(exc).__name__, str(exc)) from exc
            answer = answer if isinstance(answer, dict) else {}
            errcode = answer.get("errcode", -1)
            if resp.status < 300 and errcode == 0 and answer.get("media_id"):
                return str(answer["media_id"])
            status = resp.status if resp.status >= 300 else 400
            raise DingTalkApiError(status, str(errcode), str(answer.get("errmsg", "")))

        return await self.exchange("media_upload", send)

    async def user(self, user_id: str) -> dict[str, Any]:
        """``POST https://oapi.dingtalk.com/topapi/v2/user/get?access_token=…`` ``{userid}``: the
        user's details (``result``: name, ``email``, ``org_email``, …), needing the contact
        permission (通讯录个人信息读权限, ``qyapi_get_member``). The new-style access token is
        accepted by oapi (https://open.dingtalk.com/document/orgapp/query-user-details). A
        refusal raises DingTalkApiError with the HTTP status (200) and the errcode as code."""
        url = f"{self.oapi_base}/topapi/v2/user/get"

        async def send(token: str | None) -> dict[str, Any]:
            try:
                async with self.http.post(
                    url,
                    params={"access_token": token or ""},
                    data=dumps({"userid": user_id, "language": "zh_CN"}),
                    headers=JSON_UTF8,
                    allow_redirects=False,
                ) as resp:
                    data = await resp.json(content_type=None)
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise DingTalkApiError(0, type(exc).__name__, str(exc)) from exc
            data = data if isinstance(data, dict) else {}
            errcode = str(data.get("errcode", "-2"))
            if status < 300 and errcode == "0":
                result = data.get("result")
                return result if isinstance(result, dict) else {}
            raise DingTalkApiError(
                status, errcode, str(data.get("errmsg", "")), str(data.get("request_id", ""))
            )

        return await self.exchange("user_get", send)

    async def post_webhook(self, url: str, body: dict[str, Any]) -> None:
        """Post to a conversation's sessionWebhook; WebhookGone when it no longer works. A
        redirect is not followed (it is an answer that the webhook does not work): the URL's
        origin was checked, the redirect's target was not."""

        async def send(_: str | None) -> None:
            try:
                async with self.http.post(
                    url, data=dumps(body), headers=JSON_UTF8, allow_redirects=False
                ) as resp:
                    status = resp.status
                    try:
                        data = await resp.json(content_type=None)
                    except ValueError:  # an error page: the status tells
                        data = None
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                name = type(exc).__name__
                raise WebhookGone(f"sessionWebhook: {name}", reason=name) from exc
            try:
                errcode = int(data.get("errcode", 0)) if isinstance(data, dict) else -2
            except (TypeError, ValueError):
                errcode = -2
            if status < 300 and errcode == 0:
                return
            raise WebhookGone(
                f"sessionWebhook answered {status} errcode {errcode}",
                status=status,
                errcode=errcode,
            )

        await self.exchange("session_webhook", send, auth=False)
