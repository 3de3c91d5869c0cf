"""Which XpertAI user a turn acts as (``x-principal-user-id``), and what a refusal of it says.

XpertAI takes the header as a user id in the API key's tenant and answers 401 when it names
none (xpert-ai/xpert @5135ce25, ``packages/server/src/api-key/api-key-principal.ts:37-43``,
``api-key.service.ts:46-113``: ``findOneByIdWithinTenant`` throws, the strategy turns that into
``UnauthorizedException``). No API-key route finds a user by email or third-party id, so the
gateway keeps the map: the expert's ``principals`` then the runtime entries the admin API added
(``/v1.0/principals``, oldest first; first match wins), else ``principalUserId``, else no header
(the assistant's technical user).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError

from gateway.experts.base import TurnInput
from gateway.experts.http import ExpertHttpError
from gateway.experts.xpert_settings import PrincipalEntry, XpertExpertSettings
from sessions import STORE_DOWN, PrincipalStore

log = structlog.get_logger("gateway.experts.xpert")
HEADER = "x-principal-user-id"


@dataclass(frozen=True, slots=True)
class Principal:
    """The user a turn acts as; ``entry`` names where it came from, for logs and cards."""

    user_id: str | None
    entry: str

    @property
    def headers(self) -> dict[str, str]:
        return {HEADER: self.user_id} if self.user_id else {}


def matches(entry: PrincipalEntry, turn: TurnInput) -> bool:
    """Every field the entry gives equals the turn's; where the platform does not vouch for
    who sent the message (the console: the request names its sender), only an entry naming
    the integration matches."""
    if entry.integration_id is not None and entry.integration_id != turn.integration_id:
        return False
    if entry.integration_id is None and not turn.sender_verified:
        return False
    if entry.sender_id is not None and entry.sender_id != turn.sender_id:
        return False
    if entry.email is not None:
        email = turn.variables.get("sys.user_email")
        if not email or email.casefold() != entry.email.casefold():
            return False
    return True


def describe(entry: PrincipalEntry, where: str) -> str:
    """``principals[1] (senderId=bob)``: the entry as a person would find it in the config."""
    given = (
        ("integrationId", entry.integration_id),
        ("senderId", entry.sender_id),
        ("email", entry.email),
    )
    keys = ", ".join(f"{name}={value}" for name, value in given if value is not None)
    return f"{where} ({keys})"


def choose(
    settings: XpertExpertSettings,
    turn: TurnInput,
    runtime: Sequence[tuple[str, PrincipalEntry]] = (),
) -> Principal:
    """The first ``principals`` entry matching the turn, else the first runtime one (id,
    entry), else ``principalUserId``; a group turn of an expert whose ``groupIdentity`` is
    ``shared`` acts as ``principalUserId`` whoever sent it."""
    default = settings.principal_user_id
    if settings.group_identity == "shared" and turn.chat_type == "group":
        return Principal(default, "principalUserId (groupIdentity shared)" if default else "none")
    for index, entry in enumerate(settings.principals):
        if matches(entry, turn):
            return Principal(entry.user_id, describe(entry, f"principals[{index}]"))
    for entry_id, entry in runtime:
        if matches(entry, turn):
            return Principal(entry.user_id, describe(entry, f"runtime principal {entry_id}"))
    return Principal(default, "principalUserId" if default else "none")


def thread_key(settings: XpertExpertSettings, turn: TurnInput, principal: Principal) -> str | None:
    """The identity a group session keeps an XpertAI thread for (issue 36): the user the turn
    acts as ("-": the assistant's technical user), so a turn never continues another user's
    thread; None (one thread per session) in a direct chat or a ``shared`` group."""
    if turn.chat_type != "group" or settings.group_identity == "shared":
        return None
    return principal.user_id or "-"


RUNTIME_FIELDS = ("integrationId", "senderId", "email", "userId")


def runtime_entries(raw: dict[str, str], expert_id: str) -> list[tuple[str, PrincipalEntry]]:
    """The stored runtime entries of one expert, oldest first (one that no longer parses is
    left out)."""
    found: list[tuple[int, str, PrincipalEntry]] = []
    for entry_id, text in raw.items():
        try:
            data: Any = json.loads(text)
            if data.get("expertId") != expert_id:
                continue
            fields = {k: data[k] for k in RUNTIME_FIELDS if k in data}
            entry = PrincipalEntry.model_validate(fields)
            found.append((int(data.get("createdAt", 0)), entry_id, entry))
        except (ValueError, TypeError, AttributeError, ValidationError):
            log.warning("runtime principal entry unreadable; left out", entry_id=entry_id)
    return [(entry_id, entry) for _, entry_id, entry in sorted(found, key=lambda f: f[:2])]


async def resolve(
    settings: XpertExpertSettings, store: PrincipalStore | None, turn: TurnInput
) -> Principal:
    """:func:`choose` with the runtime entries as Redis holds them now (a turn reads their version,
    and reads and parses them again only after a change; Redis down: the config's entries
    only)."""
    runtime: list[tuple[str, PrincipalEntry]] = []
    if store is not None:
        try:
            expert_id = settings.id
            runtime = await store.entries_as(expert_id, lambda raw: runtime_entries(raw, expert_id))
        except STORE_DOWN as exc:
            log.warning("runtime principals unreadable; config only", error=type(exc).__name__)
    return choose(settings, turn, runtime)


NO_ACCESS = "You do not have access to this assistant."


def refused(exc: BaseException, principal: Principal, turn: TurnInput) -> BaseException:
    """A 401 while acting as a principal: XpertAI knows no such user in the key's tenant (or
    the key itself is wrong; the server answers both alike). A 403: the user exists but fails
    the assistant's access check (``resolveAssistantForRequest``, xpert-ai/xpert @5135ce25
    ``packages/server-ai/src/ai/commands/handlers/thread-create.handler.ts`` l.53-60: 403 ``You
    do not have access to this assistant.``, ``xpert/published-xpert-access.service.ts``
    l.540-616). Logged with the ``principals`` entry; the card names the XpertAI user that was
    refused. Any other error is returned as it is."""
    if not (isinstance(exc, ExpertHttpError) and exc.status in (401, 403) and principal.user_id):
        return exc
    _warn(principal, turn, exc.status)
    if exc.status == 403:
        return ExpertHttpError(denied_text(principal), status=403)
    return ExpertHttpError(
        f"{exc} XpertAI refuses both a wrong API key and a principal user id that is not a "
        f"user of the key's tenant: this sender acts as user {principal.user_id} "
        f"({principal.entry}); an administrator needs to check that mapping.",
        status=401,
    )


def refused_run(error: str, principal: Principal, turn: TurnInput) -> str:
    """A run the stream refused with the access check's message (an ``event: error`` frame:
    ``run-create-stream.handler.ts`` l.357-362 throws before the run starts) named as
    :func:`refused` names a 403; any other error as it is."""
    if NO_ACCESS not in error or not principal.user_id:
        return error
    _warn(principal, turn, 403)
    return denied_text(principal)


def denied_text(principal: Principal) -> str:
    return (
        f"XpertAI refused the run: its user {principal.user_id}, whom this sender acts as, "
        "does not have access to this assistant. An administrator needs to share the "
        "assistant with that user or map the sender to another one."
    )


def _warn(principal: Principal, turn: TurnInput, status: int | None) -> None:
    log.warning(
        "xpert refused the principal user",
        status=status,
        entry=principal.entry,
        user_id=principal.user_id,
        integration_id=turn.integration_id,
        sender_id=turn.sender_id,
    )
