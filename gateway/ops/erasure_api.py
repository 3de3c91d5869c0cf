"""Erasure on request in the admin API (bearer ``admin.token``):

- ``DELETE /v1.0/chats/{integrationId}/{chatId}/records`` removes what Redis and the archive
  hold of one chat: its turns' audit records, its sessions (records, histories, variables),
  its memory and its changes, recent group messages, its transcript and what waits in the
  archive outbox about it;
- ``DELETE /v1.0/senders/{integrationId}/{senderId}/records`` removes one sender's turns, the
  memory items and changes they made, and the sessions they opened that have no turn left.

Each answers what it removed, per store, and logs one line (ids only, never what was said).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from gateway.archive.database import ArchiveDatabase
from gateway.archive.erasure import archived, erase_chat, erase_sender
from gateway.config.settings import Settings
from gateway.ops.admin import Handler, fail, ok
from sessions.erasure import RedisErasure

log = structlog.get_logger("gateway.ops.admin")
# What no erasure here reaches, said in every answer (issue 36).
NOT_ERASED = (
    "what the experts' own servers keep: an XpertAI thread and its messages, files uploaded to "
    "it, an OpenAI-compatible server's logs; and what the chat platform itself holds. Erase "
    "those there."
)


class ErasureApi:
    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        redis: RedisErasure,
        archive: ArchiveDatabase | None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.archive = archive

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        r = app.router
        r.add_delete("/v1.0/chats/{integrationId}/{chatId}/records", guarded(self.chat))
        r.add_delete("/v1.0/senders/{integrationId}/{senderId}/records", guarded(self.sender))

    async def _ids(self, request: web.Request, name: str) -> tuple[str, str] | web.Response:
        """The ids; an integration no longer in the config is still erased while Redis or the
        archive holds records of it (issue 36), else 404."""
        integration_id, value = request.match_info["integrationId"], request.match_info[name]
        if not (0 < len(value) <= 256 and value.isprintable()):
            return fail(400, "bad_request", f"{name}: not a valid id")
        if self.settings().integration(integration_id) is None:
            known = await self.redis.known(integration_id)
            if not known and self.archive is not None:
                known = await archived(self.archive, integration_id)
            if not known:
                return fail(404, "not_found", "no such integration")
        return integration_id, value

    async def chat(self, request: web.Request) -> web.Response:
        ids = await self._ids(request, "chatId")
        if isinstance(ids, web.Response):
            return ids
        redis = await self.redis.chat(*ids)
        archive = await erase_chat(self.archive, *ids) if self.archive is not None else None
        return self._answer("chat records erased", ids, "chatId", redis, archive)

    async def sender(self, request: web.Request) -> web.Response:
        ids = await self._ids(request, "senderId")
        if isinstance(ids, web.Response):
            return ids
        redis = await self.redis.sender(*ids)
        archive = await erase_sender(self.archive, *ids) if self.archive is not None else None
        return self._answer("sender records erased", ids, "senderId", redis, archive)

    def _answer(
        self,
        event: str,
        ids: tuple[str, str],
        name: str,
        redis: dict[str, int],
        archive: dict[str, int] | None,
    ) -> web.Response:
        log.info(event, integration_id=ids[0], **{name: ids[1]}, redis=redis, archive=archive)
        result: dict[str, Any] = {"integrationId": ids[0], name: ids[1], "redis": redis}
        result["archive"] = archive  # null: the archive is off
        result["notErased"] = NOT_ERASED
        return ok(result)
