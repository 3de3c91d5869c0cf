"""A small asyncio client for the Lark OpenAPI calls the gateway makes (docs/lark.md).

A :class:`~gateway.edge.platform_api.PlatformApi`: one pooled aiohttp session per integration
and a tenant token cached until 10 minutes before it expires, fetched under a lock.
(lark-oapi's async path opens a new HTTP client per call and fetches tokens with blocking
``requests`` on the event loop, which would stall every chat.)
Rate-limit answers - HTTP 429, codes 230020 and 99991400 - are retried with backoff, honouring
``x-ogw-ratelimit-reset``; other errors raise :class:`LarkApiError`. Every HTTP exchange is
reported to ``observe`` under a fixed name per method (``/metrics``). (Over 300 lines: one
method per OpenAPI call the gateway makes, each a few lines.)
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from typing import Any, Literal

import aiohttp
import structlog

from gateway.edge.downloads import body_type, read_body
from gateway.edge.platform_api import ApiCalls, PlatformApi
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.lark")

RATE_LIMIT_CODES = {230020, 99991400}
TOKEN_CODES = {99991661, 99991663, 99991668}  # missing / invalid / expired tenant token


class LarkApiError(PlatformApiError):
    def __init__(
        self, code: int, msg: str, status: int = 200, *, reset_s: float | None = None
    ) -> None:
        super().__init__(f"lark api error {code} (HTTP {status}): {msg}")
        self.code = code
        self.msg = msg
        self.status = status
        self.reset_s = reset_s  # ``x-ogw-ratelimit-reset``: seconds until the limit resets

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.code}

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.code in RATE_LIMIT_CODES

    @property
    def retry_after(self) -> float | None:
        return self.reset_s if self.rate_limited else None


def _code(data: Any) -> int:
    return int(data.get("code", -1)) if isinstance(data, dict) else -1


class LarkApi(PlatformApi):
    platform = "lark"
    chat_endpoints = frozenset({"reply", "create"})  # 5 QPS to one chat (发送消息.md l.21)

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
        super().__init__(
            base_url=base_url,
            observe=observe,
            timeout_s=timeout_s,
            attempts=max_attempts,
            clock=clock,
        )
        self.base_url = self.base
        self.app_id = app_id
        self._secret = app_secret

    # --- PlatformApi hooks ---------------------------------------------------------------------
    async def fetch_token(self) -> tuple[str, float]:
        body = {"app_id": self.app_id, "app_secret": self._secret}
        url = f"{self.base_url}/open-apis/auth/v3/tenant_access_token/internal"

        async def send(_: str | None) -> tuple[str, float]:
            async with self.http.post(url, json=body) as resp:
                data = await resp.json(content_type=None)
            if resp.status != 200 or _code(data) != 0:
                raise LarkApiError(_code(data), "tenant_access_token failed", resp.status)
            expire = float(data.get("expire") or 7200)
            return str(data["tenant_access_token"]), max(60, expire - 600)

        return await self.exchange("token", send, auth=False, attempts=1, metered=False)

    def label(self, error: PlatformApiError) -> str:
        """Lark's code, else the HTTP status."""
        assert isinstance(error, LarkApiError)
        no_code = error.code in (-1, error.status)  # an answer without Lark's own code
        return f"http_{error.status}" if no_code else str(error.code)

    def token_refused(self, error: PlatformApiError) -> bool:
        return isinstance(error, LarkApiError) and error.code in TOKEN_CODES

    def throttle_scope(self, error: PlatformApiError) -> Literal["api", "chat", "app"]:
        """230020 is one chat's limit; 99991400 / 429 the API's (频控策略.md l.15-28)."""
        return "chat" if isinstance(error, LarkApiError) and error.code == 230020 else "api"

    def backoff(self, retry: int, error: PlatformApiError) -> float:
        """0.2 s doubling up to 5 s, or the reset Lark named (at most 10 s) when longer."""
        wait = min(0.2 * 2.0**retry, 5.0)
        if error.retry_after is not None:
            wait = max(wait, min(float(error.retry_after), 10.0))
        return wait

    async def _answer(self, resp: aiohttp.ClientResponse) -> dict[str, Any]:
        """An OpenAPI answer's ``data``, or :class:`LarkApiError` (its code, the reset)."""
        try:
            data = await resp.json(content_type=None)
        except (json.JSONDecodeError, aiohttp.ContentTypeError, UnicodeDecodeError):
            data = None
        reset = resp.headers.get("x-ogw-ratelimit-reset")
        code = _code(data)
        if resp.status == 200 and code == 0:
            result = data.get("data") if isinstance(data, dict) else None
            return result if isinstance(result, dict) else {}
        msg = str(data.get("msg", "")) if isinstance(data, dict) else f"HTTP {resp.status}"
        reset_s = float(reset) if reset and reset.isdigit() else None
        raise LarkApiError(code, msg, resp.status, reset_s=reset_s)

    async def upload(
        self, path: str, fields: dict[str, str], part: str, data: bytes, name: str, mime: str
    ) -> dict[str, Any]:
        """A multipart upload (``POST /open-apis/im/v1/images`` or ``/files``); the form is
        built again for each attempt (aiohttp sends a form once)."""

        async def send(token: str | None) -> dict[str, Any]:
            form = aiohttp.FormData()
            for key, value in fields.items():
                form.add_field(key, value)
            # a file object: aiohttp streams it (a big body given as bytes would hold the loop)
            form.add_field(part, io.BytesIO(data), filename=name, content_type=mime)
            async with self.http.post(
                self.base_url + path, data=form, headers={"Authorization": f"Bearer {token}"}
            ) as resp:
                return await self._answer(resp)

        return await self.exchange(part + "_upload", send)

    async def upload_image(self, data: bytes, name: str, mime: str) -> str:
        """An image for messages and cards (``image_type=message``, at most 10 MB; lark_oapi
        api/im/v1/model/create_image_request.py, im-v1/image/create): its ``image_key``."""
        fields = {"image_type": "message"}
        answer = await self.upload("/open-apis/im/v1/images", fields, "image", data, name, mime)
        return str(answer["image_key"])

    async def upload_file(self, data: bytes, name: str, mime: str, file_type: str) -> str:
        """A file for a file message (``file_type`` opus|mp4|pdf|doc|xls|ppt|stream, at most
        30 MB; lark_oapi api/im/v1/model/create_file_request_body.py, im-v1/file/create): its
        ``file_key``."""
        fields = {"file_type": file_type, "file_name": name}
        answer = await self.upload("/open-apis/im/v1/files", fields, "file", data, name, mime)
        return str(answer["file_key"])

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

        async def send(token: str | None) -> dict[str, Any]:
            async with self.http.request(
                method,
                self.base_url + path,
                params=params,
                json=body,
                headers={"Authorization": f"Bearer {token}"},
            ) as resp:
                return await self._answer(resp)

        return await self.exchange(endpoint, send)

    # --- the calls ---------------------------------------------------------------------------
    async def resource(
        self, message_id: str, key: str, kind: str, *, max_bytes: int
    ) -> tuple[bytes, str]:
        """A message's image or file (``GET /open-apis/im/v1/messages/:id/resources/:key``);
        ``DownloadTooLarge`` when it is larger than ``max_bytes``."""
        url = f"{self.base_url}/open-apis/im/v1/messages/{message_id}/resources/{key}"

        async def send(token: str | None) -> tuple[bytes, str]:
            async with self.http.get(
                url, params={"type": kind}, headers={"Authorization": f"Bearer {token}"}
            ) as resp:
                return await _resource_body(resp, max_bytes)

        return await self.exchange("resource", send)

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
        url = f"{self.base_url}/open-apis/bot/v3/info"

        async def send(token: str | None) -> dict[str, Any]:
            async with self.http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp:
                data = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(data, dict) or _code(data) != 0:
                raise LarkApiError(_code(data), "bot info failed", resp.status)
            bot = data.get("bot") or (data.get("data") or {}).get("bot") or {}
            return bot if isinstance(bot, dict) else {}

        return await self.exchange("bot_info", send)

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


async def _resource_body(resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, str]:
    if resp.status != 200:
        try:  # errors come as JSON: code 234003 key not in message, 234043 type refused
            err = await resp.json(content_type=None)
        except (json.JSONDecodeError, aiohttp.ContentTypeError, UnicodeDecodeError):
            err = None
        code = err.get("code") if isinstance(err, dict) else None
        msg = str(err.get("msg", "")) if isinstance(err, dict) else ""
        raise LarkApiError(
            code if isinstance(code, int) else resp.status,
            msg or "resource download failed",
            resp.status,
        )
    return await read_body(resp, max_bytes), body_type(resp)
