"""Images and files out: what an expert's Markdown answer names (``![alt](url)`` images, and
``[text](url)`` links to files: PDFs, Office documents, archives…), fetched for the final card
so the chat shows them as the platform can (an uploaded image, a file message).

XpertAI streams no file frames to API clients (xpert-ai/xpert ``shared/agent/stream-text.ts``
l.40-61), so the answer's Markdown is the source. An answer is not a trusted URL: only the
expert's own origin (its base URL) and the hosts its ``mediaHosts`` names are fetched from,
https unless the host is local, every redirect checked the same way (``get_checked``), each
body size-capped, counts and the whole fetch bounded (docs/security.md, "Images and files
out"). A refused or failed fetch leaves the Markdown a plain link and logs one line.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

import aiohttp
import structlog
from yarl import URL

from gateway.config.model import LOCAL_HOSTS, media_host
from gateway.edge.downloads import (
    GENERIC_TYPES,
    DownloadTooLarge,
    RedirectRefused,
    body_type,
    get_checked,
    read_body,
)
from gateway.events import ArtifactEvent
from gateway.progress import Media

__all__ = [
    "MediaCaps",
    "MediaSources",
    "Ref",
    "fetch_media",
    "find",
    "inline_media",
    "shown",
]

log = structlog.get_logger("gateway.edge.media")

MIB = 1024 * 1024
_TITLE = r'(?:\s+"[^"\n]*")?'
IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?" + _TITLE + r"\s*\)")
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?" + _TITLE + r"\s*\)")
FENCE = re.compile(r"(```.*?(?:```|\Z)|`[^`\n]*`)", re.DOTALL)  # code is shown as written
# A link is a file the agent produced when its path ends like one of these.
FILE_SUFFIXES = frozenset(
    {
        ".pdf", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".csv", ".txt", ".md",
        ".json", ".zip", ".rtf", ".odt", ".ods", ".odp",
    }
)  # fmt: skip
# What the platforms take as images (Lark: JPEG PNG WEBP GIF TIFF BMP ICO, im-v1/image/create);
# anything else (SVG, HTML served under a .png name) stays a link.
IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


@dataclass(frozen=True, slots=True)
class MediaCaps:
    """Bounds of one answer's fetch (docs/security.md): bytes per image and per file, how many
    of each, and seconds for all of them together."""

    image_bytes: int = 10 * MIB
    file_bytes: int = 20 * MIB
    images: int = 10
    files: int = 5
    total_s: float = 20.0


@dataclass(frozen=True, slots=True)
class Ref:
    """An image or file link found in the answer."""

    kind: Literal["image", "file"]
    alt: str
    url: str


@dataclass(frozen=True, slots=True)
class MediaSources:
    """Where an answer's images and files may be fetched from (``Expert.media_sources``: the
    expert's own origin and its ``mediaHosts``): an origin with a scheme is matched exactly, a
    host (and port) without one over https. https only, except a local host."""

    hosts: frozenset[tuple[str | None, str, int]] = frozenset()

    @classmethod
    def of(cls, entries: Iterable[str]) -> MediaSources:
        """The sources of ``entries``; one that is not allowed (an expert's own plain-http
        origin on a host that is not local) is left out with a log line."""
        hosts = set()
        for entry in entries:
            try:
                hosts.add(media_host(entry))
            except ValueError as exc:
                log.debug("media source left out", reason=str(exc))
        return cls(hosts=frozenset(hosts))

    def __bool__(self) -> bool:
        return bool(self.hosts)

    def allows(self, url: URL) -> bool:
        if url.scheme not in ("http", "https") or not url.host or url.user is not None:
            return False
        if url.scheme == "http" and url.host not in LOCAL_HOSTS:
            return False
        host, port = url.host.lower(), url.port or 0
        return (None, host, port) in self.hosts or (url.scheme, host, port) in self.hosts


def _outside_code(text: str, sub: Callable[[str], str]) -> str:
    """``sub`` applied to the parts of ``text`` that are not code (fenced or inline)."""
    parts = FENCE.split(text)
    return "".join(p if i % 2 else sub(p) for i, p in enumerate(parts))


def _is_file(url: str) -> bool:
    try:
        path = URL(url).path.lower()
    except ValueError:
        return False
    return any(path.endswith(s) for s in FILE_SUFFIXES)


def find(answer: str) -> list[Ref]:
    """The answer's images and file links, in order, each URL once (code left alone)."""
    found: dict[str, Ref] = {}

    def collect(text: str) -> str:
        for m in IMAGE.finditer(text):
            found.setdefault(m.group(2), Ref("image", m.group(1), m.group(2)))
        for m in LINK.finditer(text):
            if _is_file(m.group(2)):
                found.setdefault(m.group(2), Ref("file", m.group(1), m.group(2)))
        return text

    _outside_code(answer, collect)
    return list(found.values())


def _as_image(alt: str, key: str) -> str:
    return f"![{alt}]({key})"


def shown(
    answer: str,
    images: Mapping[str, str] | None = None,
    *,
    image: Callable[[str, str], str] = _as_image,
) -> str:
    """``answer`` as a chat shows it: each image whose URL ``images`` maps to the platform's key
    as ``image(alt, key)`` (Markdown ``![alt](key)`` by default), every other image a plain
    link ``[alt](url)`` (a live card's, one not fetched, one the platform cannot show)."""

    def one(m: re.Match[str]) -> str:
        alt, url = m.group(1), m.group(2)
        key = images.get(url) if images else None
        return image(alt, key) if key else f"[{alt or 'image'}]({url})"

    if "![" not in answer:
        return answer
    return _outside_code(answer, lambda text: IMAGE.sub(one, text))


def _name(resp: aiohttp.ClientResponse, ref: Ref) -> str:
    disposition = resp.content_disposition
    if disposition is not None and disposition.filename:
        return disposition.filename.rsplit("/", 1)[-1][:200]
    tail = unquote(URL(ref.url).path.rsplit("/", 1)[-1])
    return (tail or ref.alt or ref.kind)[:200]


def _image_type(mime: str, data: bytes) -> str | None:
    """The image's type by its first bytes (a header can be wrong), else by a header naming a
    type the platforms take; None when it is no such image."""
    for magic, kind in IMAGE_MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return mime if mime in ("image/tiff", "image/x-icon") else None


def _file_type(mime: str, name: str) -> str:
    if mime not in GENERIC_TYPES:
        return mime
    # Python's own table, not the host's mime.types: the same answer everywhere
    guessed = mimetypes.MimeTypes(filenames=()).guess_type(name, strict=False)[0]
    return guessed or "application/octet-stream"


async def _fetch(
    http: aiohttp.ClientSession, ref: Ref, sources: MediaSources, caps: MediaCaps
) -> Media | None:
    limit = caps.image_bytes if ref.kind == "image" else caps.file_bytes
    host = _host(ref.url)
    try:
        allowed = sources.allows(URL(ref.url))
    except ValueError:
        allowed = False
    if not allowed:
        log.info("media left as a link", kind=ref.kind, host=host, reason="origin not allowed")
        return None
    try:
        async with get_checked(http, ref.url, sources.allows) as resp:
            if resp.status != 200:
                log.info("media left as a link", kind=ref.kind, host=host, reason=resp.status)
                return None
            data = await read_body(resp, limit)
            mime, name = body_type(resp).lower(), _name(resp, ref)
    except RedirectRefused as exc:  # the first URL was allowed: a redirect was not
        reason = "redirected off" if exc.host is not None else exc.reason
        log.info("media left as a link", kind=ref.kind, host=exc.host or host, reason=reason)
        return None
    except DownloadTooLarge:
        log.info("media left as a link", kind=ref.kind, host=host, reason=f"over {limit} bytes")
        return None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        log.info("media left as a link", kind=ref.kind, host=host, reason=type(exc).__name__)
        return None
    if not data:
        log.info("media left as a link", kind=ref.kind, host=host, reason="empty")
        return None
    if ref.kind == "image":
        kind = _image_type(mime, data)
        if kind is None:
            log.info("media left as a link", kind="image", host=host, reason="not an image")
            return None
        return Media("image", ref.url, data, kind, name, ref.alt)
    if _web_page(mime, data):  # a sign-in or error page where the file was: not that file
        log.info("media left as a link", kind="file", host=host, reason="a web page")
        return None
    return Media("file", ref.url, data, _file_type(mime, name), name, ref.alt)


def _web_page(mime: str, data: bytes) -> bool:
    """Whether a file link answered with an HTML page (no suffix of FILE_SUFFIXES is one): by
    its type, or by its first bytes when the type says nothing."""
    if mime in ("text/html", "application/xhtml+xml"):
        return True
    if mime not in GENERIC_TYPES:
        return False
    head = data[:64].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _host(url: str) -> str:
    try:
        return URL(url).host or ""
    except ValueError:
        return ""


async def fetch_media(
    answer: str,
    sources: MediaSources,
    *,
    caps: MediaCaps | None = None,
    http: aiohttp.ClientSession | None = None,
) -> tuple[Media, ...]:
    """The answer's images and files that could be fetched, in the answer's order, within
    ``caps``; what is left out is logged (one line each) and stays a link."""
    caps = caps or MediaCaps()
    found = find(answer)
    images = [r for r in found if r.kind == "image"]
    files = [r for r in found if r.kind == "file"]
    wanted = images[: caps.images] + files[: caps.files]
    if len(images) > caps.images or len(files) > caps.files:
        log.info(
            "media left as links",
            reason="over the count",
            images=max(0, len(images) - caps.images),
            files=max(0, len(files) - caps.files),
        )
    if not wanted:
        return ()
    session = http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=caps.total_s))
    tasks = [asyncio.create_task(_fetch(session, ref, sources, caps)) for ref in wanted]
    try:
        done, pending = await asyncio.wait(tasks, timeout=caps.total_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            log.info("media left as links", reason=f"over {caps.total_s:g} s", count=len(pending))
    finally:
        for task in tasks:
            task.cancel()
        if http is None:
            await session.close()
    got: dict[str, Media] = {}
    for task in done:
        if task.cancelled() or task.exception() is not None:
            continue
        if (item := task.result()) is not None:
            got[item.url] = item
    return tuple(got[r.url] for r in found if r.url in got)


def inline_media(
    artifacts: Iterable[ArtifactEvent], caps: MediaCaps | None = None
) -> tuple[Media, ...]:
    """Files an expert handed over as bytes (an ``ArtifactEvent`` whose URL is a
    ``data:…;base64,`` URL: an A2A ``raw`` part), within ``caps`` like fetched ones. Each goes
    as a file (an image too: the card shows only the images its answer names). Nothing is
    fetched."""
    caps = caps or MediaCaps()
    out: list[Media] = []
    for artifact in artifacts:
        url = artifact.url
        if artifact.kind == "link" or not url.startswith("data:") or ";base64," not in url:
            continue
        head, payload = url[5:].split(";base64,", 1)
        try:
            data = base64.b64decode(payload, validate=True)
        except ValueError:
            continue
        if not data or len(data) > caps.file_bytes or len(out) >= caps.files:
            log.info("inline file left out", size=len(data))
            continue
        name = (artifact.name or "file")[:200]
        mime = _file_type(head.lower() or "application/octet-stream", name)
        out.append(Media("file", f"inline:{len(out)}", data, mime, name, name))
    return tuple(out)
