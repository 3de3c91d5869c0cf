"""The WeCom server API a self-built app uses (docs/wecom.md): a cached access token,
message/send and update_template_card, with the platform's error codes handled; and the AI
bot's encrypted attachment links.

wechatpy's client is synchronous and hardcodes the gettoken URL (docs/wecom.md), so this is a small
aiohttp client (a ``PlatformApi``) against ``apiBase``. Every HTTP exchange is reported to
``observe`` under the API's short name (``/metrics``). (Over 300 lines: the app's API client
and the AI bot's download links share the rule that no redirect leaves the origins allowed.)
"""

from __future__ import annotations

import base64
import binascii
import io
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
    DownloadTooLarge,
    FetchedFile,
    RedirectRefused,
    body_type,
    get_checked,
    local_origin,
    origin,
    read_body,
)
from gateway.edge.platform_api import ApiCalls, PlatformApi
from gateway.envelope import Attachment
from gateway.errors import PlatformApiError

log = structlog.get_logger("adapters.wecom")

TOKEN_ERRORS = {40001, 40014, 42001}  # invalid / expired access token: refetch, retry once
RATE_LIMITS = {45009, 45033}  # API frequency / concurrency limit: back off, retry
# The metrics' name of each server API the gateway calls.
ENDPOINTS = {
    "message/send": "message_send",
    "message/update_template_card": "card_update",
    "user/get": "user_get",
}
# Temporary media (wecom 011-素材管理/002-上传临时素材.md, doc 90253): image JPG/PNG up to
# 10 MB, file up to 20 MB, each over 5 bytes; the media_id lasts three days.
UPLOAD_TYPES = ("image", "file")


class WeComApiError(PlatformApiError):
    """An answer with a non-zero ``errcode`` (a server error: ``-status``, with ``status``)."""

    def __init__(self, errcode: int, errmsg: str, *, status: int = 200) -> None:
        super().__init__(f"WeCom API error {errcode}: {errmsg}")
        self.errcode = errcode
        self.errmsg = errmsg
        self.status = status

    def log_fields(self) -> dict[str, Any]:
        return {"code": self.errcode}

    @property
    def rate_limited(self) -> bool:
        return self.errcode in RATE_LIMITS


def _errcode(data: Any) -> int:
    return int(data.get("errcode", 0)) if isinstance(data, dict) else -1


class WeComApi(PlatformApi):
    platform = "wecom"
    # App messages: 30/min and 1,000/h to one member (访问频率限制.md l.19-22).
    chat_endpoints = frozenset({"message_send"})

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
        super().__init__(
            base_url=api_base,
            observe=observe,
            timeout_s=10,
            attempts=len(backoff_s) + 1,
            clock=clock,
        )
        self.corp_id = corp_id
        self.corp_secret = corp_secret
        self.backoff_s = backoff_s

    # --- PlatformApi hooks ---------------------------------------------------------------------
    async def fetch_token(self) -> tuple[str, float]:
        params = {"corpid": self.corp_id, "corpsecret": self.corp_secret}

        async def send(_: str | None) -> tuple[str, float]:
            async with self.http.get(f"{self.base}/cgi-bin/gettoken", params=params) as r:
                data = await r.json(content_type=None)
            code = _errcode(data)
            if code != 0 or "access_token" not in data:
                raise WeComApiError(code or -1, str(data.get("errmsg", "")))
            # Renew five minutes early so a token never expires in flight.
            return str(data["access_token"]), max(60, int(data.get("expires_in", 7200)) - 300)

        token = await self.exchange("token", send, auth=False, attempts=1, metered=False)
        log.info("access token fetched")
        return token

    def label(self, error: PlatformApiError) -> str:
        assert isinstance(error, WeComApiError)
        return f"http_{error.status}" if error.status >= 500 else str(error.errcode)

    def token_refused(self, error: PlatformApiError) -> bool:
        return isinstance(error, WeComApiError) and error.errcode in TOKEN_ERRORS

    def backoff(self, retry: int, error: PlatformApiError) -> float:
        return self.backoff_s[min(retry, len(self.backoff_s) - 1)]

    # --- the calls ---------------------------------------------------------------------------
    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``/cgi-bin/<path>``; an expired token is refreshed and the call retried once,
        a frequency limit (45009, 45033) backs off and retries a few times."""

        async def send(token: str | None) -> dict[str, Any]:
            async with self.http.post(
                f"{self.base}/cgi-bin/{path}", params={"access_token": token or ""}, json=body
            ) as resp:
                if resp.status >= 500:
                    raise WeComApiError(-resp.status, "server error", status=resp.status)
                data: dict[str, Any] = await resp.json(content_type=None)
            code = _errcode(data)
            if code != 0:
                raise WeComApiError(code, str(data.get("errmsg", "")))
            return data

        return await self.exchange(ENDPOINTS.get(path, "other"), send)

    async def upload(self, kind: str, data: bytes, name: str, mime: str) -> str:
        """``POST /cgi-bin/media/upload?type=image|file`` (multipart, the part named ``media``
        with its filename, doc 90253): the ``media_id`` of an image or file message. The form
        is built again for each attempt (aiohttp sends a form once)."""
        assert kind in UPLOAD_TYPES

        async def send(token: str | None) -> str:
            form = aiohttp.FormData()
            # a file object: aiohttp streams it (a big body given as bytes would hold the loop)
            form.add_field("media", io.BytesIO(data), filename=name, content_type=mime)
            async with self.http.post(
                f"{self.base}/cgi-bin/media/upload",
                params={"access_token": token or "", "type": kind},
                data=form,
            ) as resp:
                if resp.status >= 500:
                    raise WeComApiError(-resp.status, "server error", status=resp.status)
                answer: dict[str, Any] = await resp.json(content_type=None)
            code = _errcode(answer)
            if code != 0:
                raise WeComApiError(code, str(answer.get("errmsg", "")))
            return str(answer["media_id"])

        return await self.exchange("media_upload", send)

    async def user(self, userid: str) -> dict[str, Any]:
        """``GET /cgi-bin/user/get?userid=``: a member as the app may see them ("读取成员", doc
        90196). Apps see only members in their visible range (else 60011); apps made since
        2022-06-20 get no ``email`` / ``biz_mail`` (empty, without the members' oauth2 consent),
        so either may be missing."""

        async def send(token: str | None) -> dict[str, Any]:
            params = {"access_token": token or "", "userid": userid}
            async with self.http.get(f"{self.base}/cgi-bin/user/get", params=params) as resp:
                if resp.status >= 500:
                    raise WeComApiError(-resp.status, "server error", status=resp.status)
                data: dict[str, Any] = await resp.json(content_type=None)
            code = _errcode(data)
            if code != 0:
                raise WeComApiError(code, str(data.get("errmsg", "")))
            return data

        return await self.exchange("user_get", send)

    async def media(self, media_id: str, *, max_bytes: int) -> tuple[bytes, str] | None:
        """``GET /cgi-bin/media/get``: a received image or file (data, mime type);
        ``DownloadTooLarge`` when it is larger than ``max_bytes``; None when redirected off
        ``apiBase``'s origin (scheme, host and port: the request carries the access token, and
        a redirect must not take the gateway to another address of the operator's network;
        followed by hand, at most three). An expired token is refreshed and the call retried
        once; other errors (WeCom answers them as JSON) raise :class:`WeComApiError`."""
        home = origin(URL(self.base))

        async def send(token: str | None) -> tuple[bytes, str] | None:
            params = {"access_token": token or "", "media_id": media_id}
            url = URL(f"{self.base}/cgi-bin/media/get").with_query(params)
            async with get_checked(self.http, url, lambda u: origin(u) == home) as r:
                if r.status >= 500:
                    raise WeComApiError(-r.status, "server error", status=r.status)
                mime = body_type(r)
                if mime not in ("application/json", "text/plain"):
                    return await read_body(r, max_bytes), mime
                error: dict[str, Any] = await r.json(content_type=None)
            raise WeComApiError(int(error.get("errcode", -1)), str(error.get("errmsg", "")))

        try:
            return await self.exchange("media", send, attempts=1)
        except RedirectRefused as exc:
            log.warning(
                "media download redirected off apiBase; not followed",
                host=exc.host,
                reason=exc.reason,
            )
            return None


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
            raise DownloadTooLarge(max_bytes)
        return FetchedFile(data=plain, mime=sniff_mime(plain), name=attachment.name)
