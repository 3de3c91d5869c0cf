"""``/v1.0/principals`` on the admin API (the same bearer auth as the other admin routes): the
senders mapped to XpertAI users (gateway/experts/xpert_principals.py). ``GET`` lists every
``xpert`` expert's entries, the config's (in order) then the runtime ones (oldest first), in
the order they are matched; ``POST`` adds a runtime entry (400 with the reason, 409 for an id
in use or a full store); ``DELETE /v1.0/principals/{id}`` removes a runtime one (404 unknown;
the config's entries have no id: they change in the file). An entry applies from the next
turn on."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from pydantic import ValidationError

from gateway.config.model import ID_PATTERN
from gateway.config.settings import Settings
from gateway.edge.body import body_text, json_value, read_body
from gateway.errors import Refused
from gateway.experts.xpert_principals import RUNTIME_FIELDS, runtime_entries
from gateway.experts.xpert_settings import PrincipalEntry, XpertExpertSettings
from gateway.ops.admin import fail, ok
from sessions import PrincipalStore

log = structlog.get_logger("gateway.ops.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_RUNTIME = 10_000  # runtime entries of all experts together


class PrincipalsApi:
    def __init__(self, *, settings: Callable[[], Settings], store: PrincipalStore) -> None:
        self.settings = settings  # read per request: a reload changes the config's entries
        self.store = store

    def _experts(self) -> dict[str, XpertExpertSettings]:
        return {e.id: e for e in self.settings().experts if isinstance(e, XpertExpertSettings)}

    async def list(self, request: web.Request) -> web.Response:
        wanted = request.query.get("expertId")
        raw = await self.store.entries()
        listed: list[dict[str, Any]] = []
        for expert_id, expert in self._experts().items():
            if wanted and expert_id != wanted:
                continue
            for index, entry in enumerate(expert.principals):
                listed.append(
                    {"expertId": expert_id, "source": "config", "index": index, **_fields(entry)}
                )
            for entry_id, entry in runtime_entries(raw, expert_id):
                stored = json.loads(raw[entry_id])
                listed.append(
                    {
                        "id": entry_id,
                        "expertId": expert_id,
                        "source": "runtime",
                        **_fields(entry),
                        "createdAt": stored.get("createdAt"),
                    }
                )
        return ok(listed)

    async def create(self, request: web.Request) -> web.Response:
        try:
            entry_id, data = self._entry(json_value(body_text(request, await read_body(request))))
        except Refused as exc:
            return _refused(exc)
        outcome = await self.store.add(entry_id, json.dumps(data), limit=MAX_RUNTIME)
        if outcome == 0:
            return _refused(Refused(409, f"id: {entry_id} is in use"))
        if outcome < 0:
            return _refused(Refused(409, f"the store holds {MAX_RUNTIME} runtime entries"))
        log.info("principal added", id=entry_id, expert_id=data["expertId"])
        return ok({"id": entry_id, "source": "runtime", **data})

    def _entry(self, body: Any) -> tuple[str, dict[str, Any]]:
        """The runtime entry a POST body (parsed JSON) describes: its id and what is stored."""
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        expert_id = body.pop("expertId", None)
        if not isinstance(expert_id, str) or expert_id not in self._experts():
            names = ", ".join(sorted(self._experts())) or "none"
            raise Refused(400, f"expertId: name an expert of kind xpert ({names})")
        entry_id = body.pop("id", None) or uuid.uuid4().hex[:12]
        if not isinstance(entry_id, str) or not re.fullmatch(ID_PATTERN, entry_id):
            raise Refused(400, f"id: must match {ID_PATTERN}")
        try:
            entry = PrincipalEntry.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise Refused(400, f"{where}: {first['msg']}" if where else first["msg"]) from None
        created = int(time.time() * 1000)
        return entry_id, {"expertId": expert_id, **_fields(entry), "createdAt": created}

    async def delete(self, request: web.Request) -> web.Response:
        entry_id = request.match_info["principalId"]
        if not await self.store.remove(entry_id):  # the config's entries have no id
            return _refused(Refused(404, f"no runtime entry {entry_id}"))
        log.info("principal removed", id=entry_id)
        return ok({"id": entry_id, "deleted": True})

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        r = app.router
        r.add_get("/v1.0/principals", guarded(self.list))
        r.add_post("/v1.0/principals", guarded(self.create))
        r.add_delete("/v1.0/principals/{principalId}", guarded(self.delete))


def _fields(entry: PrincipalEntry) -> dict[str, str]:
    data = entry.model_dump(by_alias=True, exclude_none=True)
    return {k: data[k] for k in RUNTIME_FIELDS if k in data}


def _refused(exc: Refused) -> web.Response:
    log.info("principal request refused", status=exc.status, reason=exc.reason)
    return fail(exc.status, exc.code, exc.public)
