"""The WeCom server API a self-built app uses (platforms.md §3.3): a cached access token,
message/send and update_template_card, with the platform's error codes handled; and the AI
bot's encrypted attachment links.

wechatpy's client is synchronous and hardcodes the gettoken URL (§3.7), so this is a small
aiohttp client against ``apiBase``. Every HTTP exchange is reported to ``observe`` under the
API's short name (``/metrics``). (Over 300 lines: the app's API client and the AI bot's
download links share the rule that no redirect leaves the origins allowed; kept together.)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from yarl import URL

from adapters.wecom.crypto import CryptoError, decrypt_media
from adapters.wecom.events import media_link
from gateway.edge.downloads import (
    FetchedFile,
    RedirectRefused,
    body_type,
    get_checked,
    local_origin,
    origin,
    read_body,
)
from gateway.edge.platform_api import ApiCalls
from gateway.envelope import Attachment
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.wecom")

TOKEN_ERRORS = {40001, 40014, 42001}  # invalid / expired access token: refetch, retry once
RATE_LIMITED = 45009
# The metrics' name of each server API the gateway calls.
ENDPOINTS = {"message/send": "message_send", "message/update_template_card": "card_update"}
NO_ANSWER = (aiohttp.ClientError, TimeoutError)


class WeComApiError(PlatformApiError):
    def __init__(self, errcode: int, errmsg: str) -> None:
        super().__init__(f"WeCom API error {errcode}: {errmsg}")
        self.errcode = errcode
        self.errmsg = errmsg

    def log_fields(self) -> dict[str, Any]:
        return {"code": self.errcode}


class WeComApi:
    def __init__(
        self,
        *,
        api_base: str,
        corp_id: str,
        corp_secret: str,
        backoff_s: tuple[float, ...] = (0.5, 1.0, 2.0),
        clock: Callable[[], float] = time.monotonic,
        observe: ApiCalls | None = None,
    ) -> None:
        self.base = api_base.rstrip("/")
        self.observe = observe
        self.corp_id = corp_id
        self.corp_secret = corp_secret
        self.backoff_s = backoff_s
        self.clock = clock
        self._token: str | None = None
        self._token_expires = 0.0
        self._token_lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def _count(self, endpoint: str, began: float, code: int | str) -> None:
        """Report one exchange: ``ok`` for errcode 0, else the errcode (or ``http_<status>``)."""
        if self.observe is not None:
            label = "ok" if code == 0 else str(code)
            self.observe(endpoint, label, time.perf_counter() - began)

    async def token(self, *, refresh: bool = False) -> str:
        async with self._token_lock:
            if not refresh and self._token and self.clock() < self._token_expires:
                return self._token
            params = {"corpid": self.corp_id, "corpsecret": self.corp_secret}
            began = time.perf_counter()
            try:
                async with self._session().get(f"{self.base}/cgi-bin/gettoken", params=params) as r:
                    data = await r.json(content_type=None)
            except NO_ANSWER as exc:
                self._count("token", began, type(exc).__name__)
                raise
            self._count("token", began, int(data.get("errcode", 0)))
            if data.get("errcode", 0) != 0 or "access_token" not in data:
                raise WeComApiError(int(data.get("errcode", -1)), str(data.get("errmsg", "")))
            # Renew five minutes early so a token never expires in flight.
            self._token = str(data["access_token"])
            self._token_expires = self.clock() + max(60, int(data.get("expires_in", 7200)) - 300)
            log.info("access token fetched")
            return self._token

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``/cgi-bin/<path>``; an expired token is refreshed and the call retried once,
        a frequency limit (45009) backs off and retries a few times."""
        refreshed = False
        limited = 0
        endpoint = ENDPOINTS.get(path, "other")
        while True:
            token = await self.token(refresh=False)
            began = time.perf_counter()
            try:
                async with self._session().post(
                    f"{self.base}/cgi-bin/{path}", params={"access_token": token}, json=body
                ) as resp:
                    if resp.status >= 500:
                        self._count(endpoint, began, f"http_{resp.status}")
                        raise WeComApiError(-resp.status, "server error")
                    data: dict[str, Any] = await resp.json(content_type=None)
            except NO_ANSWER as exc:
                self._count(endpoint, began, type(exc).__name__)
                raise
            code = int(data.get("errcode", 0))
            self._count(endpoint, began, code)
            if code == 0:
                return data
            if code in TOKEN_ERRORS and not refreshed:
                refreshed = True
                log.info("access token rejected; refreshing", errcode=code)
                await self.token(refresh=True)
                continue
            if code == RATE_LIMITED and limited < len(self.backoff_s):
                log.warning("frequency limit; backing off", path=path, attempt=limited + 1)
                await asyncio.sleep(self.backoff_s[limited])
                limited += 1
                continue
            raise WeComApiError(code, str(data.get("errmsg", "")))

    async def media(self, media_id: str, *, max_bytes: int) -> tuple[bytes, str] | None:
        """``GET /cgi-bin/media/get``: a received image or file (data, mime type); None when it
        is larger than ``max_bytes``, or redirected off ``apiBase``'s origin (scheme, host and
        port: the request carries the access token, and a redirect must not take the gateway
        to another address of the operator's network; followed by hand, at most
        three). An expired token is refreshed and the call retried once; other
        errors (WeCom answers them as JSON) raise :class:`WeComApiError`."""
        refreshed = False
        home = origin(URL(self.base))
        while True:
            token = await self.token()
            params = {"access_token": token, "media_id": media_id}
            url = URL(f"{self.base}/cgi-bin/media/get").with_query(params)
            began = time.perf_counter()
            try:
                async with get_checked(self._session(), url, lambda u: origin(u) == home) as r:
                    if r.status >= 500:
                        self._count("media", began, f"http_{r.status}")
                        raise WeComApiError(-r.status, "server error")
                    mime = body_type(r)
                    if mime not in ("application/json", "text/plain"):
                        self._count("media", began, 0)
                        data = await read_body(r, max_bytes)
                        return (data, mime) if data is not None else None
                    error: dict[str, Any] = await r.json(content_type=None)
            except RedirectRefused as exc:
                self._count("media", began, "redirect_refused")
                log.warning(
                    "media download redirected off apiBase; not followed",
                    host=exc.host,
                    reason=exc.reason,
                )
                return None
            except NO_ANSWER as exc:
                self._count("media", began, type(exc).__name__)
                raise
            code = int(error.get("errcode", -1))
            self._count("media", began, code)
            if code in TOKEN_ERRORS and not refreshed:
                refreshed = True
                await self.token(refresh=True)
                continue
            raise WeComApiError(code, str(error.get("errmsg", "")))


# --- AI-bot attachments: encrypted download links ------------------------------------------------
# Magic numbers of what a vision model takes; AI-bot downloads come without a useful type.
MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
]


def sniff_mime(data: bytes) -> str:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    found = (mime for magic, mime in MAGIC if data.startswith(magic))
    return next(found, "application/octet-stream")


# Where an AI bot's download links point: WeCom's COS bucket (the links of doc 100719, "接收消息",
# https://developer.work.weixin.qq.com/document/path/100719: "https://ww-aibot-img-1258476243.cos.
# ap-guangzhou.myqcloud.com/…?sign=…"), in whatever COS region. Only https; nothing else is
# fetched, so a message cannot make the gateway request an address of the operator's network.
MEDIA_HOST = re.compile(r"^ww-aibot-img-1258476243\.cos\.[a-z0-9-]{1,40}\.myqcloud\.com$")


class LinkDownloads:
    """An AI bot's images and files, by their encrypted download link (valid five minutes),
    decrypted with the link's own aeskey (long connection) or the bot's EncodingAESKey
    (callbacks, ``bot_key``). A link is fetched only from WeCom's media host over https (or from
    ``api_base``'s own origin when that is a local fake, as the tests run), and a redirect is
    followed only to such a link."""

    def __init__(self, *, integration_id: str, bot_key: bytes | None, api_base: str) -> None:
        self.integration_id = integration_id
        self.bot_key = bot_key
        self._fake = local_origin(api_base)
        self._http: aiohttp.ClientSession | None = None

    def allowed(self, url: URL) -> bool:
        if self._fake is not None and origin(url) == self._fake:
            return True
        return (
            url.scheme == "https"
            and url.port == 443
            and url.user is None
            and bool(MEDIA_HOST.match(url.host or ""))
        )

    async def _get(self, link: str, limit: int) -> bytes | None:
        """The body of ``link``, following at most three redirects, each checked."""
        assert self._http is not None
        try:
            async with get_checked(self._http, link, self.allowed) as resp:
                return await read_body(resp, limit) if resp.status == 200 else None
        except RedirectRefused as exc:
            log.warning(
                "attachment link refused: not WeCom's media host",
                integration_id=self.integration_id,
                host=exc.host,
                reason=exc.reason,
            )
            return None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def fetch(self, attachment: Attachment, max_bytes: int) -> FetchedFile | None:
        url, aeskey = media_link(attachment.key)
        if aeskey is not None:
            try:
                key = base64.b64decode(aeskey + "=" * (-len(aeskey) % 4), validate=True)
            except binascii.Error:
                log.warning("attachment key is not base64", integration_id=self.integration_id)
                return None
        elif self.bot_key is not None:
            key = self.bot_key
        else:
            return None  # a long-connection link without its aeskey cannot be decrypted
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        limit = max_bytes + 32  # the ciphertext is at most one padding block longer
        data = await self._get(url, limit)
        if data is None:
            return None
        try:
            plain = decrypt_media(data, key)
        except CryptoError as exc:
            log.warning(
                "attachment did not decrypt", integration_id=self.integration_id, error=str(exc)
            )
            return None
        if len(plain) > max_bytes:
            return None
        return FetchedFile(data=plain, mime=sniff_mime(plain), name=attachment.name)
