"""The fake XpertAI's file routes and what a run's ``input.files`` becomes (mounted by
``tests/fakes/xpertai.py``). ``X:`` paths are in ``xpert-ai/xpert`` @5135ce25 under
``packages/`` (``SA`` = ``X:server-ai/src``).

- ``POST /api/ai/contexts/file`` (SA/ai/context.controller.ts l.47-160): the same API-key guard
  as every route (l.49-51: 401 ``{message:'Unauthorized', statusCode:401}``); multipart
  ``file`` (multer ``FileInterceptor('file')``, l.64, registered without limits in
  X:server/src/server.module.ts l.60, so no size is refused) and the optional ``target``,
  ``purpose``, ``parseMode``, ``conversationId``, ``threadId``, ``projectId``, ``xpertId``,
  ``workspacePath`` fields (l.84-94). Refusals: a ``target`` that is not JSON → 400 'Invalid target
  JSON' (l.224-230), one without ``kind`` → 400 'Invalid target payload' (l.209-212); a
  ``parseMode`` not auto|fast|deep|none → 400 'Invalid parseMode payload' (l.232-240); no
  ``file`` part → a TypeError reading ``originalname`` of undefined
  (X:server/src/file/file-upload/upload-file.service.ts l.79), so 500 'Internal server error'.
  No file type is refused: an unknown one is parsed as text
  (SA/file-understanding/parsers/file-parser.registry.ts l.22-32). The name is the part's raw
  ``filename=`` bytes as UTF-8 (busboy reads them as latin1, X:common/src/utils/file-name.ts
  ``decodeMultipartFileName`` turns them back); a percent-encoded name stays as it is. The
  answer is 201 (Nest's POST default) with the AgentFile of ``withFileUnderstanding``
  (l.252-271); the stored object's key is ``contexts/<tenant>/files-<ms>-<6 hex><ext>``
  (X:server/src/file/file-upload/strategies/storage-target.strategy.ts l.26-28, 55-58).
  ``parseMode`` auto parses inline up to 2 000 000 bytes (l.242-250): the answer is then
  ``ready`` with ``capabilities`` ['preview', 'read'] (parse-file-asset.handler.ts l.86-90);
  larger, the parse is queued (enqueue-file-parse.handler.ts l.19-39): ``parsing``, ``[]``.
  A parse ends ``ready``, ``partial`` or ``failed`` with its error (``FakeFiles.parse_outcome``;
  parse-file-asset.handler.ts l.86, 104-109).
- ``GET /api/ai/files/{id}/status`` (SA/file-understanding/file-understanding.controller.ts
  l.54-58; RouterModule ``/ai``, file-understanding.module.ts l.20) → ``{fileId, status, error,
  parsedAt}``, 404 'File asset "<id>" not found' for an unknown id
  (queries/handlers/get-file-parse-status.handler.ts l.15-25).
- A run's ``input.files`` (SA/xpert/commands/handlers/chat-file-assets.ts): an entry with
  ``fileAssetId``, or with ``fileId`` and ``storageFileId`` together, is a FileAsset (l.321-332)
  linked to the message through the ``chat_message_file_asset`` join table
  (SA/chat-message/chat-message.entity.ts l.144-148), whose foreign key refuses an id that is no
  FileAsset: the run fails. An entry with only ``id`` (no ``storageFileId``, not FileAsset-like)
  is a legacy StorageFile attachment (l.134-159), recorded in ``legacy`` and not attached.

Not traced (the fake's choices): ids as uuid4; ``url``/``fileUrl`` on the fake's own origin;
the tenant id; a queued parse that ends after ``parse_reads`` status reads (None: never); the
constraint's name in the foreign-key error; ``parsedAt`` as an ISO string; the proxy's 413 page
(``proxy_max_body``).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.xpertai_agent import dumps, iso_now
from tests.fakes.xpertai_input import HttpError, Principal, bad_request, type_error

UNAUTHORIZED = {"message": "Unauthorized", "statusCode": 401}
INLINE_PARSE_BYTES = 2_000_000  # context.controller.ts shouldRunParseInline, l.249
PARSE_MODES = ("auto", "fast", "deep", "none")
TENANT = "tenant-1"
_FILENAME = re.compile(r'filename="([^"]*)"')


@dataclass
class StoredFile:
    agent_file: dict[str, Any]
    data: bytes
    fields: dict[str, str]  # the form's other fields (threadId, xpertId, …)
    reads_left: int | None  # status reads until a queued parse ends (None: it never does)


@dataclass
class FakeFiles:
    parse_reads: int | None = 2
    # How a parse ends (inline or queued): 'ready'; 'partial', the parser's own status
    # (SA/file-understanding/commands/handlers/parse-file-asset.handler.ts l.86); or 'failed'
    # with the parser's error message and no ``parsedAt`` (l.104-109).
    parse_outcome: tuple[str, str | None] = ("ready", None)
    # Multer takes any size; a reverse proxy in front may not: nginx's client_max_body_size is
    # 1m by default and answers 413 with an HTML page
    # (https://nginx.org/en/docs/http/ngx_http_core_module.html#client_max_body_size).
    proxy_max_body: int | None = None
    stored: dict[str, StoredFile] = field(default_factory=dict)  # by FileAsset id
    uploads: list[dict[str, Any]] = field(default_factory=list)  # each request's fields and name
    status_reads: list[str] = field(default_factory=list)
    attached: dict[str, list[str]] = field(default_factory=dict)  # thread -> FileAsset ids
    legacy: dict[str, list[str]] = field(default_factory=dict)  # thread -> bare ids

    def mount(self, app: web.Application, user: Callable[[web.Request], Principal | None]) -> None:
        async def upload(request: web.Request) -> web.Response:
            limit = self.proxy_max_body
            if limit is not None and (request.content_length or 0) > limit:
                html = "<html><head><title>413 Request Entity Too Large</title></head></html>"
                return web.Response(status=413, text=html, content_type="text/html")
            if user(request) is None:
                return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
            try:
                return web.json_response(await self._upload(request), status=201, dumps=dumps)
            except HttpError as exc:
                return web.json_response(exc.body, status=exc.status, dumps=dumps)

        async def status(request: web.Request) -> web.Response:
            if user(request) is None:
                return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
            return self._status(request.match_info["fid"])

        app.router.add_post("/api/ai/contexts/file", upload)
        app.router.add_get("/api/ai/files/{fid}/status", status)

    async def _upload(self, request: web.Request) -> dict[str, Any]:
        fields: dict[str, str] = {}
        file: tuple[str, str, bytes] | None = None
        if not request.content_type.startswith("multipart/"):  # Express' form parser's fields
            fields = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        multipart = request.content_type.startswith("multipart/")
        reader = await request.multipart() if multipart else None
        while reader is not None and (part := await reader.next()) is not None:
            if not isinstance(part, aiohttp.BodyPartReader) or not part.name:
                continue
            if part.name == "file" and file is None:
                match = _FILENAME.search(part.headers.get("Content-Disposition", ""))
                mime = part.headers.get("Content-Type", "application/octet-stream")
                file = (match.group(1) if match else "", mime, bytes(await part.read()))
            else:
                fields[part.name] = await part.text()
        self.uploads.append({**fields, "name": file[0] if file else None})
        if "target" in fields:
            try:
                target = json.loads(fields["target"])
            except json.JSONDecodeError:
                raise bad_request("Invalid target JSON") from None
            if not isinstance(target, dict) or not target.get("kind"):
                raise bad_request("Invalid target payload")
        mode = fields.get("parseMode") or "auto"
        if mode not in PARSE_MODES:
            raise bad_request("Invalid parseMode payload")
        if file is None:
            raise type_error("Cannot read properties of undefined (reading 'originalname')")
        name, mime, data = file
        inline = mode == "fast" or (mode == "auto" and len(data) <= INLINE_PARSE_BYTES)
        settled = mode == "none" or inline
        status = "parsing"
        if settled:
            status = self.parse_outcome[0] if inline else "ready"
        asset, storage = str(uuid.uuid4()), str(uuid.uuid4())
        ext = os.path.splitext(name)[1]
        key = f"contexts/{TENANT}/files-{int(time.time() * 1000)}-{os.urandom(3).hex()}{ext}"
        url = f"{request.url.origin()}/public/{key}"
        agent_file: dict[str, Any] = {"id": asset, "fileId": asset, "storageFileId": storage}
        agent_file["objectKey"] = key
        agent_file |= {"url": url, "fileUrl": url, "originalName": name, "size": len(data)}
        agent_file |= {"mimeType": mime, "status": status, "parseStatus": status}
        agent_file |= {"purpose": fields.get("purpose") or "chat_attachment", "parseMode": mode}
        agent_file["capabilities"] = ["preview", "read"] if inline else []
        reads = None if settled else self.parse_reads
        self.stored[asset] = StoredFile(dict(agent_file), data, fields, reads)
        if inline and status == "failed":  # kept on the asset, not in the AgentFile (l.252-271)
            self.stored[asset].agent_file["error"] = self.parse_outcome[1]
        return agent_file

    def _status(self, fid: str) -> web.Response:
        self.status_reads.append(fid)
        stored = self.stored.get(fid)
        if stored is None:
            missing = {"message": f'File asset "{fid}" not found', "error": "Not Found"}
            return web.json_response({**missing, "statusCode": 404}, status=404, dumps=dumps)
        agent_file = stored.agent_file
        if stored.reads_left is not None and agent_file["status"] == "parsing":
            stored.reads_left -= 1
            if stored.reads_left <= 0:
                outcome, error = self.parse_outcome
                agent_file["status"] = agent_file["parseStatus"] = outcome
                if outcome == "failed":
                    agent_file["error"] = error
                else:
                    agent_file["parsedAt"] = iso_now()
        body: dict[str, Any] = {"fileId": fid, "status": agent_file["status"]}
        body["error"] = agent_file.get("error")
        if agent_file.get("parsedAt"):
            body["parsedAt"] = agent_file["parsedAt"]
        return web.json_response(body, dumps=dumps)

    def attach(self, thread: str, files: Any) -> None:
        """What the chat does with the input's files before the run (see the module doc)."""
        for file in files if isinstance(files, list) else []:
            if not isinstance(file, dict):
                continue
            storage = file.get("storageFileId")
            asset = file.get("fileAssetId") or (file.get("fileId") if storage else None)
            if isinstance(asset, str) and asset:
                if asset not in self.stored:
                    raise HttpError(
                        500,
                        'insert or update on table "chat_message_file_asset" violates foreign '
                        'key constraint "FK_chat_message_file_asset_file_asset"',
                        {"statusCode": 500, "message": "Internal server error"},
                    )
                self.attached.setdefault(thread, []).append(asset)
            elif not storage and isinstance(file.get("id"), str) and not _asset_like(file):
                self.legacy.setdefault(thread, []).append(file["id"])


def _asset_like(file: dict[str, Any]) -> bool:
    """chat-file-assets.ts ``isFileAssetLike`` (l.334-351), for an entry without
    ``storageFileId``: a ``fileId`` with a FileAsset's fields."""
    if not file.get("fileId"):
        return False
    marks = ("workspacePath", "filePath", "parseStatus", "status")
    return any(file.get(k) for k in marks) or isinstance(file.get("capabilities"), list)
