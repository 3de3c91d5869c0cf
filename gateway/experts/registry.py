"""Expert kinds are found like adapters: each installed kind is an :class:`Expert` subclass
registered under the ``xpert_gateway.experts`` entry point group, named by its ``kind``, and
brings its settings model. Adding a kind is a package with one entry point, not a core edit::

    [project.entry-points."xpert_gateway.experts"]
    mykind = "my_package.expert:MyExpert"
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Literal, get_args, get_origin

from gateway.config.bases import ExpertBase, ExpertKind
from gateway.errors import GatewayError
from gateway.experts.base import BUNDLE_OPTIONS, Expert, ExpertContext
from sessions import HistoryStore, PrincipalStore

ENTRY_POINT_GROUP = "xpert_gateway.experts"


class ExpertKindError(GatewayError):
    """An installed expert kind that cannot be used (a packaging mistake, not a config one)."""


def discover_experts() -> dict[str, type[Expert]]:
    """Installed expert kinds by ``kind``."""
    found: dict[str, type[Expert]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kind = checked_kind(ep.name, ep.load(), where=ep.value)
        if found.get(ep.name, kind) is not kind:
            raise ExpertKindError(f"expert kind {ep.name!r} is registered twice ({ep.value})")
        found[ep.name] = kind
    return found


def checked_kind(name: str, target: object, *, where: str = "") -> type[Expert]:
    """``target`` if it is a usable expert kind named ``name``, else an :class:`ExpertKindError`
    saying what is wrong with it."""
    label = f"expert kind {name!r}" + (f" ({where})" if where else "")
    if not (isinstance(target, type) and issubclass(target, Expert)):
        raise ExpertKindError(f"{label}: not a subclass of gateway.experts.Expert")
    if inspect.isabstract(target):
        missing = ", ".join(sorted(getattr(target, "__abstractmethods__", ())))
        raise ExpertKindError(f"{label}: does not implement {missing}")
    if getattr(target, "kind", None) != name:
        raise ExpertKindError(f"{label}: its class says kind {getattr(target, 'kind', None)!r}")
    model = getattr(target, "settings_model", None)
    if not (isinstance(model, type) and issubclass(model, ExpertBase)):
        raise ExpertKindError(
            f"{label}: settings_model must subclass gateway.config.bases.ExpertBase"
        )
    tag = model.model_fields["kind"].annotation
    if get_origin(tag) is not Literal or get_args(tag) != (name,):
        raise ExpertKindError(f"{label}: {model.__name__}.kind must be Literal[{name!r}]")
    for problem in option_problems(target):
        raise ExpertKindError(f"{label}: {problem}")
    return target


def build_expert(
    settings: ExpertBase,
    *,
    history: HistoryStore | None = None,
    kinds: Mapping[str, type[ExpertKind]] | None = None,
    principals: PrincipalStore | None = None,
    current: Callable[[str], ExpertBase | None] | None = None,
) -> Expert:
    """The expert for ``settings``, built by its kind (``kinds``: a settings model's
    ``expert_kinds``; the installed ones when not given)."""
    kind = (discover_experts() if kinds is None else kinds).get(settings.kind)
    if kind is None or not issubclass(kind, Expert):
        raise ValueError(f"expert kind {settings.kind!r} is not installed")
    context = ExpertContext(history=history, principals=principals, current=current)
    return kind.create(settings=settings, context=context)


def option_problems(kind: type[ExpertKind]) -> list[str]:
    """A kind's ``bundle_options`` that are unknown or that its settings model has no field
    for (a packaging mistake, reported by the expert registry)."""
    return [
        f"bundle option {option!r} "
        + ("is unknown" if option not in BUNDLE_OPTIONS else "has no field")
        for option in sorted(kind.bundle_options)
        if option not in BUNDLE_OPTIONS or option not in kind.settings_model.model_fields
    ]
