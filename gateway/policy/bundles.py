"""Access bundles: what a route (a chat, a chat pattern, a chat type or a sender) gives a chat -
its expert, that expert's model and tool allow-list where the expert's kind can take them, the
conversation variables its sessions start with, and its budget (``limits``).

A route is matched on every message (first match wins). The expert, model, tools and variables
are locked into the session's config snapshot (``gateway.turns.snapshot``) when the session
opens, so a running session keeps them across a reload; ``limits`` are read at intake from the
current config, so a changed budget applies at once (``gateway.policy.budgets``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.bases import ExpertKind
from gateway.config.route import Route, route_of
from gateway.envelope import Envelope
from gateway.experts.base import BUNDLE_OPTIONS


def applied_options(route: Route, kind: type[ExpertKind] | None) -> dict[str, Any]:
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
    routes: list[Route],
    envelope: Envelope,
    expert: Any,
    kind: type[ExpertKind] | None,
    *,
    own: bool,
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
