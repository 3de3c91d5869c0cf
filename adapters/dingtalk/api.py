"""The DingTalk OpenAPI client: access token (cached until shortly before expiry), robot and
card calls, sessionWebhook posts; flow-control answers and 5xx back off and retry (§2.4-2.6)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog

log = structlog.get_logger("adapters.dingtalk")

TOKEN_MARGIN_S = 300  # refresh 5 min early, like the SDK (§2.4)
# DingTalk throttling answers: HTTP 429, or 403 with a QPS/QPM "AccessDenied" code; robot
# webhooks answer errcode 130101 ("send too fast") with HTTP 200.
FLOW_CONTROL_CODES = ("QpsLimit", "QpmLimit", "FlowControl", "Throttling")
WEBHOOK_THROTTLED = {130101, 130102}
WEBHOOK_EXPIRED = {300001, 300002, 310000}


class DingTalkApiError(RuntimeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"DingTalk API {status} {code}: {message}")
        self.status = status
        self.code = code


class WebhookGone(RuntimeError):
    """The sessionWebhook expired or was refused; fall back to the robot OpenAPI."""


def _retryable(status: int, code: str) -> bool:
    if status == 429 or status >= 500:
        return True
    return status == 403 and any(c.lower() in code.lower() for c in FLOW_CONTROL_CODES)


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
    ) -> None:
        self.base = base.rstrip("/")
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
        last: Exception | None = None
        for attempt in range(self.attempts):
            headers = {"x-acs-dingtalk-access-token": await self.access_token()} if auth else {}
            try:
                async with self.http.request(
                    method, self.base + path, json=body, headers=headers
                ) as resp:
                    data = await resp.json(content_type=None) if resp.content_length != 0 else {}
                    data = data if isinstance(data, dict) else {}
                    if resp.status < 300:
                        return data
                    code = str(data.get("code", ""))
                    err = DingTalkApiError(resp.status, code, str(data.get("message", "")))
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                err = DingTalkApiError(0, type(exc).__name__, str(exc))
            last = err
            if err.status == 401 and auth and attempt == 0:
                self._token = None  # revoked or rotated: fetch a fresh one once
                continue
            if err.status and not _retryable(err.status, err.code):
                raise err
            log.warning("dingtalk api retry", path=path, status=err.status, code=err.code)
            await self._pause(attempt)
        assert last is not None
        raise last

    async def post_webhook(self, url: str, body: dict[str, Any]) -> None:
        """Post to a conversation's sessionWebhook; WebhookGone when it no longer works."""
        for attempt in range(self.attempts):
            try:
                async with self.http.post(url, json=body) as resp:
                    data = await resp.json(content_type=None)
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.warning("sessionWebhook retry", error=type(exc).__name__)
                await self._pause(attempt)
                continue
            errcode = int(data.get("errcode", 0)) if isinstance(data, dict) else -1
            if status < 300 and errcode == 0:
                return
            if status == 429 or status >= 500 or errcode in WEBHOOK_THROTTLED:
                log.warning("sessionWebhook retry", status=status, errcode=errcode)
                await self._pause(attempt)
                continue
            raise WebhookGone(f"sessionWebhook answered {status} errcode {errcode}")
        raise WebhookGone("sessionWebhook kept failing")
