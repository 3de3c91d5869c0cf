"""Mini's API client: messages sent and cards replaced, each call through the kit's
``PlatformApi.exchange`` (counted, paced by the app's platform budget, retried when throttled)."""

from __future__ import annotations

from typing import Any

from gateway.edge.platform_api import ApiCalls, PlatformApi
from gateway.errors import PlatformApiError

TOKEN_DAY_S = 86_400.0  # the bot token does not expire: cached a day at a time


class MiniApiError(PlatformApiError):
    def __init__(self, status: int, error: str, retry_after: float | None = None) -> None:
        super().__init__(f"mini api error {error} (HTTP {status})")
        self.status = status
        self.error = error
        self._retry_after = retry_after

    def log_fields(self) -> dict[str, Any]:
        return {"status": self.status, "code": self.error}

    @property
    def rate_limited(self) -> bool:
        return self.status == 429

    @property
    def retry_after(self) -> float | None:
        return self._retry_after if self.rate_limited else None


class MiniApi(PlatformApi):
    platform = "mini"
    chat_endpoints = frozenset({"send"})  # 5 new messages a second to one chat

    def __init__(self, *, base_url: str, token: str, observe: ApiCalls | None) -> None:
        super().__init__(base_url=base_url, observe=observe, timeout_s=10.0, attempts=4)
        self._bot_token = token

    async def fetch_token(self) -> tuple[str, float]:
        return self._bot_token, TOKEN_DAY_S

    def label(self, error: PlatformApiError) -> str:
        return error.error if isinstance(error, MiniApiError) else type(error).__name__

    def backoff(self, retry: int, error: PlatformApiError) -> float:
        asked = error.retry_after
        return min(asked if asked is not None else 0.2 * 2.0**retry, 5.0)

    async def _call(self, method: str, path: str, body: dict[str, Any], token: str | None) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with self.http.request(method, self.base + path, json=body, headers=headers) as resp:
            data = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(data, dict) or not data.get("ok"):
                error = str(data.get("error", "")) if isinstance(data, dict) else ""
                after = resp.headers.get("Retry-After")
                wait = float(after) if after and after.isdigit() else None
                raise MiniApiError(resp.status, error or f"http_{resp.status}", wait)
            return data

    async def send(
        self,
        chat_id: str,
        *,
        key: str,
        text: str = "",
        card: Any = None,
        reply_to: str | None = None,
    ) -> str:
        """A new message in ``chat_id`` (sent once per ``key``); its id."""
        body: dict[str, Any] = {"chat": chat_id, "key": key, "replyTo": reply_to}
        body.update({"card": card} if card is not None else {"text": text})
        data = await self.exchange("send", lambda t: self._call("POST", "/v1/messages", body, t))
        return str(data["id"])

    async def update(self, message_id: str, card: Any) -> None:
        """The card of message ``message_id``, replaced in place."""
        path = f"/v1/messages/{message_id}"
        await self.exchange("update", lambda t: self._call("PUT", path, {"card": card}, t))
