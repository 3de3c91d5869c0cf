"""The watches of an integration on the admin API (``/v1.0``, the same bearer token and answers
as ``gateway.ops.admin``):

- ``GET /v1.0/integrations/{id}/watches[?chatId=]``: the config's and the runtime watches, each
  with its ``source`` and its ``enabled`` as it applies now; with ``chatId``, each watch's
  cooldown in that chat (``null`` when none runs);
- ``PUT …/watches/{watchId}``: create or replace a runtime watch (the config's model, 400 on bad
  input, 409 for an id the config defines);
- ``PATCH …/watches/{watchId}`` with ``{"enabled": bool}``: any watch, the config's too (stored
  as a runtime override);
- ``DELETE …/watches/{watchId}``: a runtime watch (404 unknown, 409 for one the config defines).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from pydantic import StrictBool, ValidationError

from gateway.config.bases import IntegrationBase
from gateway.config.model import GatewayModel
from gateway.config.settings import Settings
from gateway.config.watch import ALL_MESSAGES, WATCH_ID, Watch
from gateway.edge.body import body_text, json_object, read_body
from gateway.errors import Refused, first_problem
from gateway.ops.admin import Handler, fail, ok
from gateway.triggers.watch_intake import GroupWatch, WatchEntry

log = structlog.get_logger("gateway.ops.admin")


class EnabledPatch(GatewayModel):
    enabled: StrictBool


def _shown(entry: WatchEntry) -> dict[str, Any]:
    shown = entry.watch.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {**shown, "enabled": entry.enabled, "source": entry.source}


class WatchAdmin:
    def __init__(self, *, settings: Callable[[], Settings], watch: GroupWatch) -> None:
        self.settings = settings
        self.watch = watch

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        r, path = app.router, "/v1.0/integrations/{integrationId}/watches"
        r.add_get(path, guarded(self._answer(self.list)))
        r.add_put(path + "/{watchId}", guarded(self._answer(self.put)))
        r.add_patch(path + "/{watchId}", guarded(self._answer(self.patch)))
        r.add_delete(path + "/{watchId}", guarded(self._answer(self.delete)))

    def _answer(self, handler: Callable[[web.Request], Any]) -> Handler:
        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                result = await handler(request)
            except Refused as exc:
                log.info("watch request refused", path=request.path, status=exc.status)
                return fail(exc.status, exc.code, exc.public)
            return ok(result)

        return answer

    # --- helpers ---------------------------------------------------------------------------
    def _integration(self, request: web.Request) -> IntegrationBase:
        integ = self.settings().integration(request.match_info["integrationId"])
        if integ is None:
            raise Refused(404, "no such integration")
        return integ

    def _watch_id(self, request: web.Request) -> str:
        watch_id = request.match_info["watchId"]
        if not re.fullmatch(WATCH_ID, watch_id):
            raise Refused(400, "watchId: letters, digits and _.- (at most 64)")
        return watch_id

    async def _entry(self, integ: IntegrationBase, watch_id: str) -> WatchEntry | None:
        entries = await self.watch.entries(integ, fresh=True)
        return next((e for e in entries if e.watch.id == watch_id), None)

    @staticmethod
    def _configured(integ: IntegrationBase, watch_id: str) -> bool:
        return any(w.id == watch_id for w in integ.watches)

    # --- routes ----------------------------------------------------------------------------
    async def list(self, request: web.Request) -> list[dict[str, Any]]:
        integ = self._integration(request)
        entries = await self.watch.entries(integ, fresh=True)
        chat_id = request.query.get("chatId")
        if chat_id is None:
            return [_shown(e) for e in entries]
        if not chat_id or len(chat_id) > 256:
            raise Refused(400, "chatId: a chat id (1 to 256 characters)")
        watched = [e for e in entries if e.watch.chat_id in (None, chat_id)]
        states = await self.watch.cooldowns(integ, chat_id, [e.watch for e in watched])
        cooling = {e.watch.id: s for e, s in zip(watched, states, strict=True)}
        return [{**_shown(e), "cooldown": cooling.get(e.watch.id)} for e in entries]

    async def put(self, request: web.Request) -> dict[str, Any]:
        integ, watch_id = self._integration(request), self._watch_id(request)
        if self._configured(integ, watch_id):
            raise Refused(409, f"watch {watch_id!r} is defined in the config: PATCH its enabled")
        body = json_object(body_text(request, await read_body(request)))
        if body.get("id", watch_id) != watch_id:
            raise Refused(400, "id: differs from the watchId in the path")
        try:
            watch = Watch.model_validate({**body, "id": watch_id})
        except ValidationError as exc:
            raise Refused(400, first_problem(exc)) from None
        if integ.group_reply_strategy != "mention_only":
            raise Refused(400, ALL_MESSAGES)
        if watch.xpert_id is not None and self.settings().expert(watch.xpert_id) is None:
            raise Refused(400, f"xpertId: {watch.xpert_id!r} names no expert")
        stored = watch.model_dump_json(by_alias=True, exclude_none=True)
        await self.watch.watches.put(integ.id, watch_id, stored)
        self.watch.invalidate(integ.id)
        log.info("runtime watch saved", integration_id=integ.id, watch=watch_id)
        return _shown(WatchEntry(watch, "runtime", watch.enabled))

    async def patch(self, request: web.Request) -> dict[str, Any]:
        integ, watch_id = self._integration(request), self._watch_id(request)
        body = json_object(body_text(request, await read_body(request)))
        try:
            change = EnabledPatch.model_validate(body)
        except ValidationError as exc:
            raise Refused(400, first_problem(exc)) from None
        if await self._entry(integ, watch_id) is None:
            raise Refused(404, f"no watch {watch_id!r}")
        await self.watch.watches.set_enabled(integ.id, watch_id, change.enabled)
        self.watch.invalidate(integ.id)
        log.info("watch toggled", integration_id=integ.id, watch=watch_id, enabled=change.enabled)
        entry = await self._entry(integ, watch_id)
        if entry is None:  # deleted meanwhile by another request
            raise Refused(404, f"no watch {watch_id!r}")
        return _shown(entry)

    async def delete(self, request: web.Request) -> dict[str, Any]:
        integ, watch_id = self._integration(request), self._watch_id(request)
        if self._configured(integ, watch_id):
            raise Refused(409, f"watch {watch_id!r} is defined in the config: PATCH its enabled")
        if not await self.watch.watches.delete(integ.id, watch_id):
            raise Refused(404, f"no watch {watch_id!r}")
        self.watch.invalidate(integ.id)
        log.info("runtime watch deleted", integration_id=integ.id, watch=watch_id)
        return {"id": watch_id, "deleted": True}
