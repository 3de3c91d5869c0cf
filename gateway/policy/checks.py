"""What ``check`` says about routes: options or variables its expert's kind cannot take are
warnings, never silently ignored (a route naming no expert is an error:
``gateway.config.route.bundle_problems``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config.bases import ExpertKind
from gateway.config.route import Route
from gateway.experts.base import BUNDLE_OPTIONS


def bundle_warnings(
    path: str,
    default_xpert: str,
    routes: list[Route],
    experts: Mapping[str, Any],
    kinds: Mapping[str, type[ExpertKind]],
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
