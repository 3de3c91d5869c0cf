"""Access bundles: what a route (a chat, a chat pattern, a chat type or a sender) gives a chat -
its expert, that expert's model and tool allow-list where the expert's kind can take them, the
conversation variables its sessions start with, and its budget (``limits``).

A route is matched on every message (first match wins). The expert, model, tools and variables
are locked into the session's config snapshot (``gateway.turns.snapshot``) when the session
opens, so a running session keeps them across a reload; ``limits`` are read at intake from the
current config, so a changed budget applies at once (``gateway.policy.budgets``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from gateway.config.model import GatewayModel

if TYPE_CHECKING:  # gateway.config.settings imports this module
    from gateway.config.settings import Settings
    from gateway.envelope import Envelope
    from gateway.experts.base import Expert

VARIABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
BUNDLE_OPTIONS = ("model", "tools")  # what a route may set on its expert (Expert.bundle_options)


class Limits(GatewayModel):
    """A budget. Each limit unset or null is unlimited; a route's limits override the
    integration's one by one (a route giving null lifts the integration's)."""

    turns_per_hour_per_chat: int | None = Field(
        None, ge=1, description="Turns a chat may start in any 60 minutes (a merged burst is one)"
    )
    turns_per_hour_per_sender: int | None = Field(
        None, ge=1, description="Turns one sender may start in a chat in any 60 minutes"
    )
    tokens_per_day_per_chat: int | None = Field(
        None,
        ge=1,
        description="Tokens the expert reported for a chat's turns today (the integration's "
        "time zone); checked when a message arrives, so the turn that crosses it runs to its end",
    )

    def over(self, override: Limits | None) -> Limits:
        """These limits with those ``override`` sets (explicitly, null included) replaced."""
        if override is None or not override.model_fields_set:
            return self
        return self.model_copy(update={k: getattr(override, k) for k in override.model_fields_set})

    def as_json(self) -> dict[str, int | None]:
        return {
            "turnsPerHourPerChat": self.turns_per_hour_per_chat,
            "turnsPerHourPerSender": self.turns_per_hour_per_sender,
            "tokensPerDayPerChat": self.tokens_per_day_per_chat,
        }


class Route(GatewayModel):
    """A per-chat rule, an access bundle: the first matching route wins, else the integration's
    own xpertId and limits. Every matcher given must hold."""

    chat_id: str | None = None
    chat_pattern: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A glob on the chat id: * any text, ? one character, [..] a set (oc_team_*)",
    )
    chat_type: Literal["p2p", "group"] | None = None
    sender_id: str | None = None
    xpert_id: str | None = Field(None, description="The expert; default: the integration's")
    model: str | None = Field(
        None, min_length=1, description="The expert's model, for kinds that take one (openai)"
    )
    tools: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="Tool allow-list, for kinds that can restrict tools (see the docs)"
    )
    variables: dict[Annotated[str, Field(pattern=VARIABLE_NAME)], Any] = Field(
        default_factory=dict,
        description="Conversation variables a session of this route starts with",
    )
    limits: Limits | None = Field(None, description="Overrides the integration's limits")
    approvers: list[str] | None = Field(
        None,
        description="Sender ids who may answer Confirm / Reject of another's turn in this route's "
        "chats; default: the integration's approvers",
    )

    @model_validator(mode="after")
    def _has_matcher(self) -> Route:
        matchers = (self.chat_id, self.chat_pattern, self.chat_type, self.sender_id)
        if all(m is None for m in matchers):
            raise ValueError(
                "a route needs at least one of chatId, chatPattern, chatType, senderId"
            )
        return self

    def matches(self, chat_id: str, chat_type: str | None, sender_id: str | None) -> bool:
        """Whether the route holds for this chat and sender (``None``: not known, which only a
        route that asks about it refuses)."""
        if self.chat_id is not None and self.chat_id != chat_id:
            return False
        if self.chat_pattern is not None and not fnmatchcase(chat_id, self.chat_pattern):
            return False
        if self.chat_type is not None and self.chat_type != chat_type:
            return False
        return self.sender_id is None or self.sender_id == sender_id

    def describe(self) -> str:
        """The matchers, for ``check`` and logs."""
        return ", ".join(
            f"{k}={v}"
            for k, v in (
                ("chatId", self.chat_id),
                ("chatPattern", self.chat_pattern),
                ("chatType", self.chat_type),
                ("senderId", self.sender_id),
            )
            if v is not None
        )


def match_route(
    routes: list[Route], chat_id: str, chat_type: str | None, sender_id: str | None
) -> tuple[int, Route] | None:
    """The first route that holds, with its index."""
    for i, route in enumerate(routes):
        if route.matches(chat_id, chat_type, sender_id):
            return i, route
    return None


def route_of(routes: list[Route], envelope: Envelope) -> tuple[int, Route] | None:
    return match_route(routes, envelope.chat.id, envelope.chat.type, envelope.sender.id)


def applied_options(route: Route, kind: type[Expert] | None) -> dict[str, Any]:
    """The route's model and tools its expert's kind takes; the others are left (``check``
    warns about them: :func:`bundle_warnings`)."""
    taken = kind.bundle_options if kind is not None else frozenset()
    return {
        name: value
        for name in BUNDLE_OPTIONS
        if (value := getattr(route, name)) is not None and name in taken
    }


def bundle_part(index: int, route: Route, applied: Mapping[str, Any]) -> dict[str, Any]:
    """What a session's snapshot keeps of its route: which one, its variables, and the model
    and tools put on the snapshot's expert."""
    part: dict[str, Any] = {"route": index, "match": route.describe(), **applied}
    if route.variables:
        part["variables"] = dict(route.variables)
    return part


def bundled(
    routes: list[Route], envelope: Envelope, expert: Any, kind: type[Expert] | None, *, own: bool
) -> tuple[Any, dict[str, Any] | None]:
    """The expert settings (an ExpertBase) a session opened by ``envelope`` uses, and the bundle
    part of its snapshot (None: no route holds). ``own``: the route's expert (or the
    integration's) runs, not one a trigger or an event source names: only then do the route's
    model and tools apply."""
    matched = route_of(routes, envelope)
    if matched is None:
        return expert, None
    index, route = matched
    applied = applied_options(route, kind) if own else {}
    if applied:
        expert = expert.model_copy(update=applied)
    return expert, bundle_part(index, route, applied)


def bundle_problems(path: str, routes: list[Route], experts: Collection[str]) -> list[str]:
    """Errors: a route naming no expert."""
    return [
        f"{path}.routes.{j}.xpertId: {route.xpert_id!r} names no expert"
        for j, route in enumerate(routes)
        if route.xpert_id is not None and route.xpert_id not in experts
    ]


def option_problems(kind: type[Expert]) -> list[str]:
    """A kind's ``bundle_options`` that are unknown or that its settings model has no field
    for (a packaging mistake, reported by the expert registry)."""
    return [
        f"bundle option {option!r} "
        + ("is unknown" if option not in BUNDLE_OPTIONS else "has no field")
        for option in sorted(kind.bundle_options)
        if option not in BUNDLE_OPTIONS or option not in kind.settings_model.model_fields
    ]


def bundle_warnings(
    path: str,
    default_xpert: str,
    routes: list[Route],
    experts: Mapping[str, Any],
    kinds: Mapping[str, type[Expert]],
    declared: set[str],
) -> list[str]:
    """What a route sets that its expert's kind cannot take: never silently ignored."""
    warnings: list[str] = []
    for j, route in enumerate(routes):
        expert = experts.get(route.xpert_id or default_xpert)
        if expert is None:
            continue
        kind = kinds.get(expert.kind)
        taken = kind.bundle_options if kind is not None else frozenset()
        for option in BUNDLE_OPTIONS:
            if getattr(route, option) is not None and option not in taken:
                warnings.append(
                    f"{path}.routes.{j}.{option}: expert {expert.id!r} (kind {expert.kind}) "
                    f"cannot {'pick a model' if option == 'model' else 'restrict its tools'} per "
                    f"chat, so this is not applied; give the chat its own expert instead"
                )
        if kind is not None and kind.declared_variables_only:
            own = {v.name for v in getattr(expert, "variables", [])}
            for name in sorted(set(route.variables) - declared - own):
                warnings.append(
                    f"{path}.routes.{j}.variables.{name}: not declared (integration or expert "
                    f"variables), and kind {expert.kind} sends declared variables only"
                )
    return warnings


def budget_warnings(settings: Settings) -> list[str]:
    """What ``check`` (and ``run``, in its log) says about routes and limits that will not do
    what they seem to."""
    warnings: list[str] = []
    experts = {e.id: e for e in settings.experts}
    for i, integ in enumerate(settings.integrations):
        path = f"integrations.{i}"
        declared = {v.name for v in integ.variables}
        warnings += bundle_warnings(
            path, integ.xpert_id, integ.routes, experts, settings.expert_kinds, declared
        )
        limited = any(
            v is not None
            for limits in (integ.limits, *(r.limits for r in integ.routes if r.limits))
            for v in limits.as_json().values()
        )
        if limited and integ.session_scope != "chat":
            warnings.append(
                f"{path}.limits: with sessionScope {integ.session_scope} every "
                f"{'sender' if integ.session_scope == 'chat_sender' else 'thread'} of a chat has "
                "counters of its own, so the per-chat limits apply to each of them"
            )
    return warnings
