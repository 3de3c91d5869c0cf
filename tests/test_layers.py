"""The packages of ``gateway/`` in one order (docs/architecture.md, "What each package may
import"): a module imports only from its own package and the packages below it. Every import
counts, wherever it is: at module level, inside a function, under ``TYPE_CHECKING`` - a type
hint that points up is a dependency all the same."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first. "base" is the flat modules (gateway/*.py): the shared types; __main__ is the
# command line, so it sits with the runtime.
LAYERS = (
    "base",
    "config",
    "edge",
    "experts",
    "policy",
    "turns",
    "intake",
    "actions",
    "archive",
    "ops",
    "triggers",
    "runtime",
)


def layer_of_file(path: Path, root: Path) -> str:
    parts = path.relative_to(root / "gateway").parts
    if len(parts) == 1:
        return "runtime" if parts[0] == "__main__.py" else "base"
    return parts[0]


def layer_of_module(dotted: str, packages: set[str]) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "gateway":
        return None
    if len(parts) > 1 and parts[1] in packages:
        return parts[1]
    if len(parts) > 1 and parts[1] == "__main__":
        return "runtime"
    return "base"


def imports_of(path: Path, root: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (dotted, absolute) with its line, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "gateway":  # from gateway import clock: the module gateway.clock
                found += [(f"gateway.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((module, node.lineno))
    return found


def backward_imports(root: Path, layers: tuple[str, ...] = LAYERS) -> list[str]:
    """``file:line: A imports B`` for each import of a package above the importer's."""
    gateway = root / "gateway"
    packages = {p.name for p in gateway.iterdir() if (p / "__init__.py").is_file()}
    rank = {name: i for i, name in enumerate(layers)}
    found: list[str] = []
    for path in sorted(gateway.rglob("*.py")):
        mine = layer_of_file(path, root)
        for module, line in sorted(imports_of(path, root), key=lambda item: item[1]):
            theirs = layer_of_module(module, packages)
            if theirs is not None and rank[theirs] > rank[mine]:
                where = path.relative_to(root).as_posix()
                found.append(f"{where}:{line}: {mine} imports {theirs} ({module})")
    return found


def test_every_gateway_package_has_its_place_in_the_order() -> None:
    packages = {p.name for p in (ROOT / "gateway").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYERS) - {"base"}


def test_gateway_packages_import_in_one_direction() -> None:
    found = backward_imports(ROOT)
    assert found == [], (
        "imports pointing up the order " + " < ".join(LAYERS) + ":\n" + "\n".join(found)
    )


def test_the_layer_rule_catches_a_backward_import(tmp_path: Path) -> None:
    for folder in ("config", "runtime"):
        (tmp_path / "gateway" / folder).mkdir(parents=True)
        (tmp_path / "gateway" / folder / "__init__.py").write_text("")
    (tmp_path / "gateway" / "clock.py").write_text("import time\n")
    (tmp_path / "gateway" / "runtime" / "app.py").write_text("from gateway.config import x\n")
    (tmp_path / "gateway" / "config" / "hints.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from gateway import clock\n"
        "if TYPE_CHECKING:\n"
        "    from gateway.runtime.app import App\n"
        "def f() -> None:\n"
        "    from ..runtime import app\n"
    )
    layers = ("base", "config", "runtime")
    assert backward_imports(tmp_path, layers) == [
        "gateway/config/hints.py:4: config imports runtime (gateway.runtime.app)",
        "gateway/config/hints.py:6: config imports runtime (gateway.runtime)",
    ]
