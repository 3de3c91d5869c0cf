"""A small asyncio client for the Lark OpenAPI calls the gateway makes (platforms.md §1.7-1.9).

One pooled aiohttp session per integration and a tenant token cached until 10 minutes before
it expires, fetched under a lock. (lark-oapi's async path opens a new HTTP client per call and
fetches tokens with blocking ``requests`` on the event loop, which would stall every chat.)
Rate-limit answers - HTTP 429, codes 230020 and 99991400 - are retried with backoff, honouring
``x-ogw-ratelimit-reset``; other errors raise :class:`LarkApiError`. Every HTTP exchange is
reported to ``observe`` under a fixed name per method (``/metrics``). (Over 300 lines: one
method per OpenAPI call the gateway makes, each a few lines.)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

from gateway.edge.downloads import body_type, read_body
from gateway.edge.platform_api import ApiCalls
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.lark")

RATE_LIMIT_CODES = {230020, 99991400}
NO_ANSWER = (aiohttp.ClientError, TimeoutError)
TOKEN_CODES = {99991661, 99991663, 99991668}  # missing / invalid / expired tenant token


class LarkApiError(PlatformApiError):
    def __init__(self, code: int, msg: str, status: int = 200) -> None:
        super().__init__(f"lark api error {code} (HTTP {status}): {msg}")
        self.code = code
        self.msg = msg
        self.status = status

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code}

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.code in RATE_LIMIT_CODES


class LarkApi:
    def __init__(
        self,
        *,
        base_url: str,
        app_id: str,
        app_secret: str,
        timeout_s: float = 10.0,
        max_attempts: int = 5,
        clock: Callable[[], float] = time.monotonic,
        observe: ApiCalls | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.observe = observe
        self.app_id = app_id
        self._secret = app_secret
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.max_attempts = max_attempts
        self.clock = clock
        self.retries = 0  # rate-limit retries made, for tests and metrics
        self._http: aiohttp.ClientSession | None = None
        self._token: tuple[str, float] | None = None
        self._token_lock = asyncio.Lock()

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _count(self, endpoint: str, began: float, status: int, code: int | None) -> None:
        """Report one exchange: ``ok``, else Lark's code, else the HTTP status."""
        if self.observe is not None:
            if status == 200 and code == 0:
                label = "ok"
            else:
                label = str(code) if code not in (None, -1) else f"http_{status}"
            self.observe(endpoint, label, time.perf_counter() - began)

    def _failed(self, endpoint: str, began: float, exc: BaseException) -> None:
        """Report an exchange that got no answer (connection refused, timeout)."""
        if self.observe is not None:
            self.observe(endpoint, type(exc).__name__, time.perf_counter() - began)

    async def _tenant_token(self, *, refresh: bool = False) -> str:
        async with self._token_lock:
            if self._token and not refresh and self._token[1] > self.clock():
                return self._token[0]
            body = {"app_id": self.app_id, "app_secret": self._secret}
            url = f"{self.base_url}/open-apis/auth/v3/tenant_access_token/internal"
            began = time.perf_counter()
            try:
                async with self.http.post(url, json=body) as resp:
                    data = await resp.json(content_type=None)
            except NO_ANSWER as exc:
                self._failed("token", began, exc)
                raise
            code = int(data.get("code", -1)) if isinstance(data, dict) else -1
            self._count("token", began, resp.status, code)
            if resp.status != 200 or code != 0:
                raise LarkApiError(code, "tenant_access_token failed", resp.status)
            expire = float(data.get("expire") or 7200)
            self._token = (str(data["tenant_access_token"]), self.clock() + max(60, expire - 600))
            return self._token[0]

    async def call(
        self,
        method: str,
        path: str,
        *,
        endpoint: str,
        params: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One OpenAPI call; returns ``data``. Retries rate limits and a stale token.
        ``endpoint``: the method's short name for the metrics."""
        delay = 0.2
        refreshed = False
        for attempt in range(1, self.max_attempts + 1):
            token = await self._tenant_token()
            began = time.perf_counter()
            try:
                async with self.http.request(
                    method,
                    self.base_url + path,
                    params=params,
                    json=body,
                    headers={"Authorization": f"Bearer {token}"},
                ) as resp:
                    try:
                        data = await resp.json(content_type=None)
                    except (json.JSONDecodeError, aiohttp.ContentTypeError):
                        data = None
                    reset = resp.headers.get("x-ogw-ratelimit-reset")
            except NO_ANSWER as exc:
                self._failed(endpoint, began, exc)
                raise
            code = int(data.get("code", -1)) if isinstance(data, dict) else -1
            self._count(endpoint, began, resp.status, code)
            if resp.status == 200 and code == 0:
                result = data.get("data") if isinstance(data, dict) else None
                return result if isinstance(result, dict) else {}
            msg = str(data.get("msg", "")) if isinstance(data, dict) else f"HTTP {resp.status}"
            error = LarkApiError(code, msg, resp.status)
            if code in TOKEN_CODES and not refreshed:
                refreshed = True
                await self._tenant_token(refresh=True)
                continue
            if not error.rate_limited or attempt == self.max_attempts:
                raise error
            wait = delay
            if reset and reset.isdigit():
                wait = max(wait, min(float(reset), 10.0))
            self.retries += 1
            log.info("lark rate limited; retrying", path=path, code=code, wait_s=wait)
            await asyncio.sleep(wait)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    # --- the calls ---------------------------------------------------------------------------
    async def resource(
        self, message_id: str, key: str, kind: str, *, max_bytes: int
    ) -> tuple[bytes, str] | None:
        """A message's image or file (``GET /open-apis/im/v1/messages/:id/resources/:key``);
        None when it is larger than ``max_bytes``."""
        token = await self._tenant_token()
        url = f"{self.base_url}/open-apis/im/v1/messages/{message_id}/resources/{key}"
        began = time.perf_counter()
        try:
            async with self.http.get(
                url, params={"type": kind}, headers={"Authorization": f"Bearer {token}"}
            ) as resp:
                return await self._resource_body(resp, began, max_bytes)
        except NO_ANSWER as exc:
            self._failed("resource", began, exc)
            raise

    async def _resource_body(
        self, resp: aiohttp.ClientResponse, began: float, max_bytes: int
    ) -> tuple[bytes, str] | None:
        if resp.status != 200:
            try:  # errors come as JSON: code 234003 key not in message, 234043 type refused
                err = await resp.json(content_type=None)
            except (json.JSONDecodeError, aiohttp.ContentTypeError, UnicodeDecodeError):
                err = None
            code = err.get("code") if isinstance(err, dict) else None
            msg = str(err.get("msg", "")) if isinstance(err, dict) else ""
            self._count("resource", began, resp.status, code if isinstance(code, int) else None)
            raise LarkApiError(
                code if isinstance(code, int) else resp.status,
                msg or "resource download failed",
                resp.status,
            )
        self._count("resource", began, 200, 0)
        data = await read_body(resp, max_bytes)
        return (data, body_type(resp)) if data is not None else None

    async def user(self, open_id: str) -> dict[str, Any]:
        """``GET /open-apis/contact/v3/users/:user_id`` by open_id: the user's profile (name,
        email, enterprise_email; empty where the app lacks the scope)."""
        data = await self.call(
            "GET",
            f"/open-apis/contact/v3/users/{open_id}",
            endpoint="user",
            params={"user_id_type": "open_id"},
        )
        user = data.get("user")
        return user if isinstance(user, dict) else {}

    async def bot_info(self) -> dict[str, Any]:
        """``GET /open-apis/bot/v3/info``: the bot sits at top level, not under ``data``."""
        token = await self._tenant_token()
        url = f"{self.base_url}/open-apis/bot/v3/info"
        began = time.perf_counter()
        try:
            async with self.http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
                data = await resp.json(content_type=None)
        except NO_ANSWER as exc:
            self._failed("bot_info", began, exc)
            raise
        code = int(data.get("code", -1)) if isinstance(data, dict) else -1
        self._count("bot_info", began, resp.status, code)
        if resp.status != 200 or not isinstance(data, dict) or code != 0:
            raise LarkApiError(code, "bot info failed", resp.status)
        bot = data.get("bot") or (data.get("data") or {}).get("bot") or {}
        return bot if isinstance(bot, dict) else {}

    async def reply(self, message_id: str, msg_type: str, content: str, uuid: str) -> str:
        data = await self.call(
            "POST",
            f"/open-apis/im/v1/messages/{message_id}/reply",
            endpoint="reply",
            body={"msg_type": msg_type, "content": content, "uuid": uuid},
        )
        return str(data["message_id"])

    async def create(
        self, receive_id_type: str, receive_id: str, msg_type: str, content: str, uuid: str
    ) -> str:
        data = await self.call(
            "POST",
            "/open-apis/im/v1/messages",
            endpoint="create",
            params={"receive_id_type": receive_id_type},
            body={"receive_id": receive_id, "msg_type": msg_type, "content": content, "uuid": uuid},
        )
        return str(data["message_id"])

    async def patch(self, message_id: str, content: str) -> None:
        await self.call(
            "PATCH",
            f"/open-apis/im/v1/messages/{message_id}",
            endpoint="patch",
            body={"content": content},
        )

    async def add_reaction(self, message_id: str, emoji_type: str) -> str:
        data = await self.call(
            "POST",
            f"/open-apis/im/v1/messages/{message_id}/reactions",
            endpoint="reaction_add",
            body={"reaction_type": {"emoji_type": emoji_type}},
        )
        return str(data.get("reaction_id") or "")

    async def delete_reaction(self, message_id: str, reaction_id: str) -> None:
        await self.call(
            "DELETE",
            f"/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}",
            endpoint="reaction_delete",
        )

    async def create_card(self, card: dict[str, Any]) -> str:
        data = await self.call(
            "POST",
            "/open-apis/cardkit/v1/cards",
            endpoint="card_create",
            body={"type": "card_json", "data": json.dumps(card, ensure_ascii=False)},
        )
        return str(data["card_id"])

    async def stream_text(
        self, card_id: str, element_id: str, content: str, sequence: int, uuid: str
    ) -> None:
        await self.call(
            "PUT",
            f"/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content",
            endpoint="card_stream",
            body={"content": content, "sequence": sequence, "uuid": uuid},
        )

    async def replace_card(self, card_id: str, card: dict[str, Any], sequence: int) -> None:
        await self.call(
            "PUT",
            f"/open-apis/cardkit/v1/cards/{card_id}",
            endpoint="card_update",
            body={
                "card": {"type": "card_json", "data": json.dumps(card, ensure_ascii=False)},
                "sequence": sequence,
            },
        )

    async def card_settings(self, card_id: str, config: dict[str, Any], sequence: int) -> None:
        await self.call(
            "PATCH",
            f"/open-apis/cardkit/v1/cards/{card_id}/settings",
            endpoint="card_settings",
            body={"settings": json.dumps({"config": config}), "sequence": sequence},
        )
