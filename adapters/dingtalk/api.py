"""The DingTalk OpenAPI client: access token (cached until shortly before expiry), robot and
card calls, sessionWebhook posts; flow-control answers and 5xx back off and retry (§2.4-2.6).

Error answers of ``api.dingtalk.com`` are ``{"code", "message", "requestid"}`` with an HTTP 4xx
(https://open.dingtalk.com/document/development/server-api-error-codes-1): an expired or
unknown access token is **400** ``InvalidAuthentication`` (not 401); throttling is 403
``Forbidden.AccessDenied.Qps…/Qpm…`` (…/how-to-process-api-throttling-on-the-dingtalk-server),
and the robot send APIs also throttle with 400 ``send.too.fast`` and its siblings
(…/the-robot-sends-a-group-message). Every HTTP exchange is reported to ``observe`` under the
API's short name (``ENDPOINTS``; ``/metrics``)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog

from gateway.edge.platform_api import ApiCalls
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.dingtalk")

TOKEN_MARGIN_S = 300  # refresh 5 min early, like the SDK (§2.4)
FLOW_CONTROL_CODES = ("QpsLimit", "QpmLimit")  # 403 Forbidden.AccessDenied.{QpsLimitFor…}
ROBOT_THROTTLED = {"send.too.fast", "send.byToken.tooFast", "too.many.group", "too.many.people"}
TOKEN_REFUSED = {"InvalidAuthentication"}  # 400 "不合法的access_token": fetch a new one
# sessionWebhook answers are HTTP 200 with errcode: -1 "系统繁忙" and 410100 "发送速度太快而限流"
# (…/custom-robots-send-group-messages); 130101/130102 are the older "send too fast" codes.
WEBHOOK_RETRY = {-1, 410100, 130101, 130102}
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
}


class DingTalkApiError(PlatformApiError):
    def __init__(self, status: int, code: str, message: str, request_id: str = "") -> None:
        super().__init__(f"DingTalk API {status} {code}: {message}")
        self.status = status
        self.code = code
        self.request_id = request_id

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code, "request_id": self.request_id}

    @property
    def refused(self) -> bool:
        """A definite answer that the call was not carried out (not retried, not a timeout)."""
        return 400 <= self.status < 500 and not _retryable(self.status, self.code)


class WebhookGone(PlatformApiError):
    """The sessionWebhook expired or was refused; fall back to the robot OpenAPI."""


def _retryable(status: int, code: str) -> bool:
    if status == 429 or status >= 500:
        return True
    if status == 400 and code in ROBOT_THROTTLED:
        return True
    return status == 403 and any(c.lower() in code.lower() for c in FLOW_CONTROL_CODES)


def dumps(body: dict[str, Any]) -> bytes:
    """UTF-8 JSON as DingTalk measures it: CJK stays 3 bytes, not a 6-byte ``\\uXXXX``."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


class DingTalkApi:
    def __init__(
        self,
        *,
        base: str,
        client_id: str,
        client_secret: str,
        attempts: int = 5,
        backoff_s: float = 0.25,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observe: ApiCalls | None = None,
    ) -> None:
        self.base = base.rstrip("/")
        self.observe = observe
        self.client_id = client_id
        self._secret = client_secret
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self._token: tuple[str, float] | None = None
        self._token_lock = asyncio.Lock()

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _count(self, endpoint: str, began: float, code: str) -> None:
        if self.observe is not None:
            self.observe(endpoint, code, time.perf_counter() - began)

    async def _pause(self, attempt: int) -> None:
        delay = min(self.backoff_s * 2**attempt, 8.0)
        await self.sleep(delay * (0.75 + random.random() / 2))

    async def access_token(self) -> str:
        async with self._token_lock:
            if self._token and time.monotonic() < self._token[1]:
                return self._token[0]
            data = await self._call(
                "POST",
                "/v1.0/oauth2/accessToken",
                {"appKey": self.client_id, "appSecret": self._secret},
                auth=False,
            )
            token = str(data["accessToken"])
            ttl = int(data.get("expireIn", 7200))
            self._token = (token, time.monotonic() + max(ttl - TOKEN_MARGIN_S, ttl / 2))
            return token

    async def call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An authenticated OpenAPI call, retried on throttling and server errors."""
        return await self._call(method, path, body, auth=True)

    async def _call(
        self, method: str, path: str, body: dict[str, Any], *, auth: bool
    ) -> dict[str, Any]:
        last: DingTalkApiError | None = None
        endpoint = ENDPOINTS.get(path, "other")
        for attempt in range(self.attempts):
            headers = dict(JSON_UTF8)
            if auth:
                headers["x-acs-dingtalk-access-token"] = await self.access_token()
            began = time.perf_counter()
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
                        self._count(endpoint, began, "ok")
                        return data
                    err = DingTalkApiError(
                        resp.status,
                        str(data.get("code", "")),
                        str(data.get("message", "")),
                        str(data.get("requestid") or resp.headers.get("x-acs-request-id", "")),
                    )
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                err = DingTalkApiError(0, type(exc).__name__, str(exc))
            self._count(endpoint, began, err.code or f"http_{err.status}")
            last = err
            if auth and attempt == 0 and (err.status == 401 or err.code in TOKEN_REFUSED):
                self._token = None  # revoked or rotated: fetch a fresh one once
                continue
            if err.status and not _retryable(err.status, err.code):
                raise err
            log.warning(
                "dingtalk api retry",
                path=path,
                status=err.status,
                code=err.code,
                request_id=err.request_id,
            )
            await self._pause(attempt)
        assert last is not None
        raise last

    async def post_webhook(self, url: str, body: dict[str, Any]) -> None:
        """Post to a conversation's sessionWebhook; WebhookGone when it no longer works. A
        redirect is not followed (it is an answer that the webhook does not work): the URL's
        origin was checked, the redirect's target was not."""
        for attempt in range(self.attempts):
            began = time.perf_counter()
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
                self._count("session_webhook", began, type(exc).__name__)
                log.warning("sessionWebhook retry", error=type(exc).__name__)
                await self._pause(attempt)
                continue
            try:
                errcode = int(data.get("errcode", 0)) if isinstance(data, dict) else -2
            except (TypeError, ValueError):
                errcode = -2
            ok = status < 300 and errcode == 0
            code = "ok" if ok else (str(errcode) if errcode not in (0, -2) else f"http_{status}")
            self._count("session_webhook", began, code)
            if ok:
                return
            if status == 429 or status >= 500 or errcode in WEBHOOK_RETRY:
                log.warning("sessionWebhook retry", status=status, errcode=errcode)
                await self._pause(attempt)
                continue
            raise WebhookGone(f"sessionWebhook answered {status} errcode {errcode}")
        raise WebhookGone("sessionWebhook kept failing")
