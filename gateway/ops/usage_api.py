"""Budget usage on the admin API (bearer ``admin.token``, the answers of ``gateway.ops.admin``):

``GET /v1.0/usage?integrationId=<id>[&chatId=<id>]`` ->
``{"integrationId", "limits": {"turnsPerHourPerChat", "turnsPerHourPerSender",
"tokensPerDayPerChat"} (each a number or null), "chats": [{"chatId", "turnsLastHour",
"tokensToday", "refusedToday"}]}``: the integration's limits (with ``chatId``, that chat's, its
route's over them) and per chat, the most recently active first, at most 1000 (with ``chatId``,
that chat alone, zeros when it used nothing). 400 without ``integrationId`` or with a malformed
one, 404 for an integration the config does not have.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from gateway.config.bases import IntegrationBase
from gateway.config.model import ID_PATTERN
from gateway.config.route import match_route
from gateway.config.settings import Settings
from gateway.conversation import ConversationId
from gateway.ops.admin import Handler, fail, ok
from gateway.policy.budgets import Budgets, day_of
from sessions.budgets import HOUR_MS

log = structlog.get_logger("gateway.ops.admin")

CHAT_ID = re.compile(r"[^\x00-\x1f\x7f]{1,256}")  # a chat id: any printable text
MAX_CHATS = 1000  # listed at most, the most recently active first


async def usage_of(budgets: Budgets, integ: IntegrationBase, chat_id: str | None) -> dict[str, Any]:
    """The integration's limits (with ``chat_id``, that chat's: its route's over them) and
    per chat its turns in the last hour, tokens and refusals today, the most recently
    active chats first; a chat's conversations (per sender, per thread) are added up."""
    at = budgets.clock()
    day, _ = day_of(integ.timezone, at)
    used = await budgets.counters.used(integ.id, since_ms=at - 48 * HOUR_MS, limit=MAX_CHATS * 4)
    chats: dict[str, dict[str, Any]] = {}
    types: dict[str, str] = {}
    parsed = [(c, ConversationId.parse(c)) for c in used]
    mine = [
        (c, p)
        for c, p in parsed
        if p is not None and p.integration_id == integ.id and chat_id in (None, p.chat_id)
    ]
    for row, (_, conv) in zip(
        await budgets.counters.usage([c for c, _ in mine], now_ms=at, day=day), mine, strict=True
    ):
        assert conv is not None
        types.setdefault(conv.chat_id, conv.chat_type)
        chat = chats.setdefault(
            conv.chat_id,
            {"chatId": conv.chat_id, "turnsLastHour": 0, "tokensToday": 0, "refusedToday": 0},
        )
        chat["turnsLastHour"] += row.turns_last_hour
        chat["tokensToday"] += row.tokens_today
        chat["refusedToday"] += row.refused_today
    limits = integ.limits
    if chat_id is not None:
        matched = match_route(integ.routes, chat_id, types.get(chat_id), None)
        limits = limits.over(matched[1].limits if matched else None)
        if chat_id not in chats:
            chats[chat_id] = {
                "chatId": chat_id,
                "turnsLastHour": 0,
                "tokensToday": 0,
                "refusedToday": 0,
            }
    return {
        "integrationId": integ.id,
        "limits": limits.as_json(),
        "chats": list(chats.values())[:MAX_CHATS],
    }


class UsageApi:
    def __init__(self, *, settings: Callable[[], Settings], budgets: Budgets) -> None:
        self.settings = settings  # read per request: a reload changes integrations and limits
        self.budgets = budgets

    async def usage(self, request: web.Request) -> web.Response:
        integration_id = request.query.get("integrationId", "")
        chat_id = request.query.get("chatId") or None
        if not integration_id:
            return self._bad("integrationId is required")
        if not re.fullmatch(ID_PATTERN, integration_id):
            return self._bad("integrationId: not a valid id")
        if chat_id is not None and not (CHAT_ID.fullmatch(chat_id) and chat_id.isprintable()):
            return self._bad("chatId: not a valid id")
        integ = self.settings().integration(integration_id)
        if integ is None:
            log.info("usage of an unknown integration")
            return fail(404, "not_found", f"no integration {integration_id!r}")
        return ok(await usage_of(self.budgets, integ, chat_id))

    @staticmethod
    def _bad(msg: str) -> web.Response:
        log.info("usage request refused", reason=msg)
        return fail(400, "bad_request", msg)

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        app.router.add_get("/v1.0/usage", guarded(self.usage))
