"""The settings, the policy models, the expert interface and the schedule models import one
another in one direction only, counting imports inside functions and under ``TYPE_CHECKING``
(issue 26: settings -> bundles -> experts.base -> settings, and schedule_settings -> settings);
the configuration's errors belong to the one error tree."""

from __future__ import annotations

import ast
from pathlib import Path

from gateway.config.errors import ConfigError, ConfigFileError
from gateway.errors import GatewayError
from tests.support.helpers import ROOT

WATCHED = ("gateway/config", "gateway/policy", "gateway/experts/base.py")
EXTRA = ("gateway/config/schedule_settings.py",)


def module_of(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def product_modules() -> dict[str, Path]:
    paths = [p for top in ("gateway", "adapters", "sessions") for p in (ROOT / top).rglob("*.py")]
    return {module_of(p): p for p in paths}


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module of ours ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found.update(n for n in names if n in known)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
    return found


def reaches(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo.extend(graph.get(mod, ()))
    return seen


def test_no_settings_module_is_in_an_import_cycle() -> None:
    known = product_modules()
    graph = {name: imports(path, known) - {name} for name, path in known.items()}
    watched = [
        name
        for name, path in known.items()
        if any(str(path.relative_to(ROOT)).startswith(w) for w in WATCHED + EXTRA)
    ]
    assert "gateway.config.settings" in watched and "gateway.policy.bundles" in watched
    cycles = {name: sorted(reaches(name, graph) & {n for n in graph if name in reaches(n, graph)})
              for name in watched if name in reaches(name, graph)}  # fmt: skip
    assert cycles == {}


def test_the_base_models_import_nothing_of_the_settings() -> None:
    known = product_modules()
    for name in ("gateway.config.model", "gateway.config.errors"):
        assert imports(known[name], known) <= {"gateway.errors", "gateway.errors.GatewayError"}


def test_config_errors_are_gateway_errors_and_value_errors() -> None:
    for cls in (ConfigError, ConfigFileError):
        assert issubclass(cls, GatewayError) and issubclass(cls, ValueError)
    assert str(ConfigError(["a: b", "c: d"])) == "a: b\nc: d"
