"""A turn's attachments as its expert gets them: pictures (for experts that take pictures) and
other files (PDF, Word, text…, for experts that read files) fetched through the adapter and
inlined as data URLs, within the integration's caps on count and bytes per turn; and what the
card says of each one left out, so the turn runs on the text and the user knows why."""

from __future__ import annotations

import base64
import functools
import mimetypes
from dataclasses import dataclass, field
from typing import Any

import structlog

from gateway.edge.adapter import Adapter
from gateway.edge.downloads import GENERIC_TYPES, DownloadTooLarge, FetchedFile
from gateway.envelope import Attachment, Envelope
from gateway.experts.base import Expert

log = structlog.get_logger("gateway.turns")

MAX_PICTURE_BYTES = 10 * 1024 * 1024  # one picture at most; files are bounded by the turn's
MIB = 1024 * 1024


@functools.cache
def _types() -> mimetypes.MimeTypes:
    """Python's own table (not the host's mime.types: the same answer everywhere), plus the
    text types it lacks."""
    table = mimetypes.MimeTypes(filenames=())
    for ext, mime in (
        (".md", "text/markdown"),
        (".csv", "text/csv"),
        (".json", "application/json"),
    ):
        table.add_type(mime, ext)
    return table


def file_type(fetched: FetchedFile, name: str | None) -> str:
    """A download's media type: the platform's, unless it says only "bytes" (WeCom, DingTalk
    links), then the file name's, then a PDF's magic number."""
    mime = fetched.mime.split(";")[0].strip().lower()
    if mime not in GENERIC_TYPES:
        return mime
    guessed = _types().guess_type(name or "", strict=False)[0]
    if guessed:
        return guessed
    return "application/pdf" if fetched.data.startswith(b"%PDF-") else "application/octet-stream"


KIND_LABELS = {"image": "a picture", "audio": "a voice message", "video": "a video"}


def picture_type(fetched: FetchedFile) -> str:
    """A picture's media type from its first bytes (PNG, JPEG, GIF, WebP), as XpertAI's
    official DingTalk plugin reads it (xpert-ai/xpert-plugins ``xpertai/integrations/dingtalk/
    src/lib/conversation.service.ts`` l.1025, 1328-1359): a platform often says only "bytes"
    or a wrong type. Else the platform's."""
    data = fetched.data
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return fetched.mime.split(";")[0].strip().lower() or "application/octet-stream"


def _label(attachment: Attachment) -> str:
    return attachment.name or KIND_LABELS.get(attachment.kind, "a file")


def _names(labels: list[str]) -> str:
    shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
    return f"{shown} {'was' if len(labels) == 1 else 'were'}"


@dataclass
class _LeftOut:
    """What was left out, by reason, for the card."""

    pictures: int = 0  # past the bytes
    files: list[str] = field(default_factory=list)  # past the bytes
    unread: list[str] = field(default_factory=list)  # the expert reads no files
    refused: dict[str, list[str]] = field(default_factory=dict)  # reason -> names
    failed: list[str] = field(default_factory=list)  # the download failed


async def collect(
    adapter: Adapter,
    expert: Expert,
    items: tuple[Envelope, ...],
    *,
    max_count: int,
    max_bytes: int,
) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """The attachments of ``items`` and the card's notices. At most ``max_count`` go along,
    and pictures and files up to ``max_bytes`` in all, in the order sent (one that
    does not fit what is left is left out; smaller ones after it still go); a picture is at
    most 10 MiB. A download is cut off at what is left, so nothing larger is held."""
    out: list[dict[str, Any]] = []
    every = [(e, a) for e in items for a in e.attachments]
    over_count = max(0, len(every) - max_count)
    left = _LeftOut()
    budget = max_bytes
    for envelope, attachment in every[:max_count]:
        entry = attachment.model_dump(by_alias=True, exclude_none=True)
        picture = attachment.kind == "image"
        if attachment.kind == "file" and not expert.accepts_files:
            left.unread.append(_label(attachment))
            out.append(entry)  # its key alone, as before: the expert cannot read it
            continue
        refusal = expert.refuses_kind(attachment.kind)
        if refusal is not None and attachment.kind in ("audio", "video"):
            left.refused.setdefault(refusal, []).append(_label(attachment))
            continue
        if attachment.url or not (expert.accepts_files if not picture else expert.accepts_images):
            out.append(entry)  # audio, video, or a picture the expert does not look at
            continue
        limit = min(budget, MAX_PICTURE_BYTES) if picture else budget
        fetched = None
        try:
            if limit <= 0:
                raise DownloadTooLarge(0)
            fetched = await adapter.fetch_attachment(envelope, attachment, max_bytes=limit)
        except DownloadTooLarge:
            if picture:
                left.pictures += 1
            else:
                left.files.append(_label(attachment))
            continue
        except Exception as exc:
            log.warning("attachment download failed", kind=attachment.kind, error=str(exc))
        if fetched is None:
            if not picture:
                left.failed.append(_label(attachment))
                continue
            out.append(entry)  # as before: the picture's key alone
            continue
        mime = picture_type(fetched) if picture else file_type(fetched, attachment.name)
        reason = None if picture else expert.refuses_file(mime)
        if reason is not None:
            left.refused.setdefault(reason, []).append(_label(attachment))
            continue
        budget -= len(fetched.data)
        encoded = base64.b64encode(fetched.data).decode()
        entry |= {"url": f"data:{mime};base64,{encoded}", "mime": mime, "size": len(fetched.data)}
        if not picture and not attachment.name:  # an AI bot's file comes without one
            entry["name"] = "file" + (_types().guess_extension(mime, strict=False) or "")
        out.append(entry)
    return tuple(out), _notices(max_count, max_bytes, len(every), over_count, left)


def _notices(
    max_count: int, max_bytes: int, sent: int, over_count: int, left: _LeftOut
) -> tuple[str, ...]:
    notices: list[str] = []
    mib = max_bytes / MIB
    if over_count:
        log.warning("attachments left out: too many in one turn", left_out=over_count)
        notices.append(
            f"{over_count} of {sent} attachments were left out: "
            f"at most {max_count} go along with one message"
        )
    if left.pictures:
        log.warning("pictures left out: too large for what is left", left_out=left.pictures)
        notices.append(
            f"{left.pictures} picture(s) were left out: at most {mib:g} MiB of attachments "
            f"(and {MAX_PICTURE_BYTES // MIB} MiB a picture) go along with one message"
        )
    if left.files:
        log.warning("files left out: too large for what is left", left_out=len(left.files))
        notices.append(
            f"{_names(left.files)} left out: at most {mib:g} MiB of attachments go along "
            "with one message"
        )
    if left.unread:
        notices.append(f"{_names(left.unread)} not passed on: this expert cannot read files")
    for reason, names in left.refused.items():
        notices.append(f"{_names(names)} not passed on: {reason}")
    if left.failed:
        log.warning("file downloads failed", failed=len(left.failed))
        notices.append(f"{_names(left.failed)} not passed on: the download from the chat failed")
    return tuple(notices)


__all__ = ["collect", "file_type", "picture_type"]
