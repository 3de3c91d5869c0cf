"""Downloads of what a platform (or a message) names by URL: a bounded body, and redirects
followed by hand, each target checked by the caller's rule before it is requested, so no
redirect takes the gateway (or a token it sends) to an origin that is not allowed
(docs/security.md, "Attachments"); a download's body read within a size limit (past it,
:class:`DownloadTooLarge`), and an
attachment's content as the adapter hands it to the core (:class:`FetchedFile`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from gateway.config.model import LOCAL_HOSTS as LOCAL_HOSTS  # a local fake may be plain http
from gateway.errors import GatewayError

MAX_REDIRECTS = 3
# Content types that say nothing of what a download is (the name or the bytes must tell).
GENERIC_TYPES = frozenset({"", "application/octet-stream", "binary/octet-stream"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})

Origin = tuple[str, str, int | None]


def origin(url: URL) -> Origin:
    """Scheme, host and port (the default port filled in, as yarl does)."""
    return (url.scheme, url.host or "", url.port)


def local_origin(base: str) -> Origin | None:
    """``base``'s origin when it is a local fake (its host a loopback name), else None."""
    url = URL(base)
    return origin(url) if url.host in LOCAL_HOSTS else None


class RedirectRefused(GatewayError):
    """A URL (the first, or a redirect's target) the caller's rule refused, or one redirect too
    many (``host`` None then): nothing more was requested."""

    def __init__(self, host: str | None, reason: str) -> None:
        super().__init__(reason)
        self.host = host
        self.reason = reason


def _url(link: str | URL | None) -> URL | None:
    if link is None or isinstance(link, URL):
        return link
    try:
        return URL(link)
    except ValueError:
        return None


@contextlib.asynccontextmanager
async def get_checked(
    http: aiohttp.ClientSession,
    link: str | URL,
    allowed: Callable[[URL], bool],
    **request: Any,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """GET ``link``, following at most ``MAX_REDIRECTS`` redirects by hand; every URL must be
    absolute and pass ``allowed`` before it is requested (:class:`RedirectRefused` otherwise).
    Yields the first answer that is not a redirect."""
    url = _url(link)
    for _ in range(MAX_REDIRECTS + 1):
        if url is None or not url.is_absolute() or not allowed(url):
            raise RedirectRefused(url.host if url is not None else None, "origin not allowed")
        resp = await http.get(url, allow_redirects=False, **request)
        try:
            if resp.status in REDIRECTS:
                try:
                    url = url.join(URL(resp.headers.get("Location", "")))
                except ValueError:
                    url = None
                continue
            yield resp
            return
        finally:
            resp.release()
    raise RedirectRefused(None, "redirected too often")


class DownloadTooLarge(GatewayError):
    """A download longer than the caller's limit: nothing past the limit was read. Distinct
    from a failed download, so the card can say which it was."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """An attachment's content, fetched from the platform on demand."""

    data: bytes
    mime: str
    name: str | None = None


def body_type(resp: aiohttp.ClientResponse) -> str:
    """A download's media type, without parameters."""
    return resp.headers.get("Content-Type", "application/octet-stream").split(";")[0]


async def read_body(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """A download's whole body; :class:`DownloadTooLarge` once it is longer than ``max_bytes``
    (the rest is not read). ``StreamReader.read(n)`` would return only what has arrived so
    far."""
    if (resp.content_length or 0) > max_bytes:
        raise DownloadTooLarge(max_bytes)
    data = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        data += chunk
        if len(data) > max_bytes:
            raise DownloadTooLarge(max_bytes)
    return bytes(data)
