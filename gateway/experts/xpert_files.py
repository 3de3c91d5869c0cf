"""Files (PDF, Word, text…) a turn hands an XpertAI agent, uploaded before the run.

What the real server does, read in its source (xpert-ai/xpert @5135ce25, ``SA`` =
``packages/server-ai/src``): ``POST /contexts/file`` takes a multipart ``file`` with optional
``conversationId``/``threadId``/``xpertId``, API keys accepted (SA/ai/context.controller.ts
l.49-51, 63-94); the file name is read as the raw UTF-8 bytes of ``filename=``
(packages/common/src/utils/file-name.ts ``decodeMultipartFileName``), so it is not
percent-encoded. It answers an AgentFile (l.252-271), which goes in the run's ``input.files``
exactly as returned: its ``fileId`` + ``storageFileId`` pair is what makes the server treat it
as a FileAsset (SA/xpert/commands/handlers/chat-file-assets.ts l.321-332); a bare ``{id}`` would
be read as a legacy storage attachment (l.134-159, 300-302). Under parseMode ``auto`` a file over
2 MB is parsed in the background (context.controller.ts l.242-250, SA/file-understanding/
commands/handlers/enqueue-file-parse.handler.ts l.19-39): its status stays ``parsing`` until
``GET /files/{id}/status`` (SA/file-understanding/file-understanding.controller.ts l.54-58,
queries/handlers/get-file-parse-status.handler.ts: ``{fileId, status, error, parsedAt}``) says
``ready``, ``partial`` or ``failed`` (domain/types.ts l.5). That is waited for, within
``fileParseWaitSeconds`` for the turn; past it the run goes on and the card says so.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import structlog

from gateway.events import RunEvent, StepEvent
from gateway.experts.base import TurnInput
from gateway.experts.http import ExpertHttpError, error_for
from gateway.experts.xpert_settings import XpertExpertSettings

log = structlog.get_logger("gateway.experts.xpert")
SETTLED = frozenset({"ready", "partial", "failed"})
FIRST_POLL_S, LAST_POLL_S = 0.25, 2.0
_UNSAFE = re.compile(r'["\\\r\n\x00]')  # what would break the part's Content-Disposition


AUDIO = "XpertAI does not take audio files yet"
VIDEO = "XpertAI cannot read video files in most set-ups"


def refuses_media(mime: str) -> str | None:
    """Why a run cannot take a file of this type: building the run's message throws
    ``Audio files are not supported yet`` for ``audio/*``, and ``Video file path is required``
    for ``video/*`` unless the file is on the server's own disk (xpert-ai/xpert @5135ce25
    ``packages/server-ai/src/shared/agent/message.ts`` l.285-301), which fails the whole run.
    Such a file is not handed over; the card names it and the rest of the message runs."""
    if mime.startswith("audio/"):
        return AUDIO
    if mime.startswith("video/"):
        return VIDEO
    return None


def uploads(turn: TurnInput) -> list[tuple[str, str, bytes]]:
    """The turn's fetched files (not pictures: those go inline) as (name, type, bytes)."""
    out = []
    for attachment in turn.attachments:
        url = str(attachment.get("url") or "")
        if attachment.get("kind") != "file" or not url.startswith("data:"):
            continue
        head, _, payload = url.partition(",")
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error:
            continue  # the gateway wrote it: never happens
        mime = str(attachment.get("mime") or head[5:].split(";")[0])
        if refuses_media(mime):
            continue  # the runner left it out already (XpertExpert.refuses_file)
        name = _UNSAFE.sub("_", str(attachment.get("name") or "file")).rsplit("/", 1)[-1]
        out.append((name or "file", mime, data))
    return out


async def upload_files(
    http: aiohttp.ClientSession,
    settings: XpertExpertSettings,
    turn: TurnInput,
    headers: dict[str, str],
    thread_id: str,
    into: list[dict[str, Any]],
) -> AsyncIterator[RunEvent]:
    """Upload each of the turn's files and wait for the queued parses; the AgentFiles go to
    ``into``, what happens to each to the card as a step. A file that fails to upload is left
    out (the card says so) and the run goes on with the rest."""
    files = uploads(turn)
    if not files:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.file_parse_wait_seconds
    for i, (name, mime, data) in enumerate(files):
        step = f"xpert:file:{i}"
        yield StepEvent(step, f"Uploading {name}", "running")
        try:
            agent_file = await _upload(http, settings, headers, thread_id, name, mime, data)
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("xpert file upload failed", error=str(exc), size=len(data))
            yield StepEvent(step, f"{name} could not be uploaded to XpertAI: {exc}", "failed")
            continue
        into.append(agent_file)
        status, error = str(agent_file.get("status") or ""), ""
        if status not in SETTLED:
            yield StepEvent(step, f"XpertAI is reading {name}", "running")
            status, error = await _settled(http, settings, headers, agent_file, deadline)
        if status == "failed":
            if not error:  # an AgentFile carries no error (context.controller.ts l.252-271)
                read = await _status(http, settings, headers, agent_file) or {}
                error = str(read.get("error") or "")
            detail = f": {error}" if error else ""
            yield StepEvent(step, f"XpertAI could not read {name}{detail}", "failed")
        elif status == "partial":  # the parser read some of it (parse-file-asset l.86)
            yield StepEvent(step, f"XpertAI could read only part of {name}", "done")
        elif status not in SETTLED:
            log.info("xpert file parse still queued; the run goes on", status=status)
            yield StepEvent(
                step,
                f"XpertAI is still reading {name}: the agent may not see all of it yet",
                "failed",
            )
        else:
            yield StepEvent(step, f"Uploaded {name}", "done")


async def _upload(
    http: aiohttp.ClientSession,
    settings: XpertExpertSettings,
    headers: dict[str, str],
    thread_id: str,
    name: str,
    mime: str,
    data: bytes,
) -> dict[str, Any]:
    form = aiohttp.FormData(quote_fields=False)  # the name as UTF-8 bytes, as the server reads it
    # A stream, not bytes: aiohttp warns of (and in strict mode refuses) a body over 1 MB
    form.add_field("file", io.BytesIO(data), filename=name, content_type=mime)
    form.add_field("threadId", thread_id)
    form.add_field("xpertId", settings.assistant_id or settings.id)
    url = f"{settings.base_url}/contexts/file"
    async with http.post(url, data=form, headers=headers) as resp:
        if not 200 <= resp.status < 300:
            raise await error_for(resp, "XpertAI")
        body = await resp.json()
    if not isinstance(body, dict) or not body.get("fileId") or not body.get("storageFileId"):
        raise ValueError("XpertAI answered the upload without a file")
    return body


async def _settled(
    http: aiohttp.ClientSession,
    settings: XpertExpertSettings,
    headers: dict[str, str],
    agent_file: dict[str, Any],
    deadline: float,
) -> tuple[str, str]:
    """The file's parse status once it settled, or the last one seen at ``deadline``."""
    loop = asyncio.get_running_loop()
    status, delay = str(agent_file.get("status") or ""), FIRST_POLL_S
    while loop.time() < deadline:
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, LAST_POLL_S)
        body = await _status(http, settings, headers, agent_file)
        if body is not None:
            status = str(body.get("status") or status)
            if status in SETTLED:
                return status, str(body.get("error") or "")
    return status, ""


async def _status(
    http: aiohttp.ClientSession,
    settings: XpertExpertSettings,
    headers: dict[str, str],
    agent_file: dict[str, Any],
) -> dict[str, Any] | None:
    """``GET /files/{id}/status``: ``{fileId, status, error, parsedAt}``, None when unread."""
    url = f"{settings.base_url}/files/{agent_file['fileId']}/status"
    try:
        async with http.get(url, headers=headers) as resp:
            if not 200 <= resp.status < 300:
                raise await error_for(resp, "XpertAI")
            body = await resp.json()
    except (ExpertHttpError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.warning("xpert file status read failed", error=str(exc))
        return None
    return body if isinstance(body, dict) else None
