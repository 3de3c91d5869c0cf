"""A platform is one folder (issue 39): each test-only platform of ``tests/platforms/<name>/``
joins the gateway through its own entry point and the conformance suite through its own
``conformance.py``, so its name, in code or config, appears nowhere outside its folder (prose in
docs/ may describe it)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from gateway.edge.factory import discover_adapters
from tests.support.conformance import harnesses

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PLATFORMS = sorted(p.parent.name for p in HERE.glob("*/conformance.py"))
# Where code and config live; docs/ and README.md are prose.
SCANNED = ("gateway", "adapters", "sessions", "tests", "bench", "config", "deploy")
TOP = ("pyproject.toml", "docker-compose.yml", "Dockerfile", "dev.sh")
SUFFIXES = {".py", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ".sh", ""}


def named(name: str) -> re.Pattern[str]:
    """``name`` as a word of its own: not inside a longer one (``gpt-4o-mini``, ``minimal``)."""
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.IGNORECASE)


def code_of(path: Path) -> str:
    """What of ``path`` is code or config: a Python module without its comments."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py":
        return "\n".join(line.partition("#")[0] for line in text.splitlines())
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return " ".join(t.string for t in tokens if t.type != tokenize.COMMENT)


def outside(folder: Path) -> list[Path]:
    files = [ROOT / name for name in TOP if (ROOT / name).is_file()]
    for top in SCANNED:
        files += [
            p
            for p in (ROOT / top).rglob("*")
            if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
        ]
    return [p for p in files if folder not in p.parents]


def test_there_is_a_test_only_platform() -> None:
    assert PLATFORMS != []


@pytest.mark.parametrize("name", PLATFORMS)
def test_a_test_only_platform_is_named_only_in_its_folder(name: str) -> None:
    pattern = named(name)
    found = [str(p.relative_to(ROOT)) for p in outside(HERE / name) if pattern.search(code_of(p))]
    assert found == []


@pytest.mark.parametrize("name", PLATFORMS)
def test_its_entry_point_and_harness_come_from_its_folder(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = HERE / name
    [dist] = folder.glob("entry_point/*.dist-info")
    entry = (dist / "entry_points.txt").read_text(encoding="utf-8")
    assert "[xpert_gateway.adapters]" in entry
    assert f"{name} = tests.platforms.{name}." in entry
    harness = harnesses()[name]
    assert harness.__module__ == f"tests.platforms.{name}.conformance"
    assert harness.platform == name
    assert name not in discover_adapters()  # not installed for the other tests' gateways
    monkeypatch.syspath_prepend(str(dist.parent))
    assert name in discover_adapters()


def test_the_rule_sees_code_and_config_but_not_prose_or_longer_words(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('x = 1  # the zeta platform (a comment)\nmodel = "gpt-4o-zeta"\n')
    assert not named("zeta").search(code_of(module))
    module.write_text('platforms = ["lark", "zeta"]\n')
    assert named("zeta").search(code_of(module))
    config = tmp_path / "c.yaml"
    config.write_text("integrations:\n  - platform: zeta  # here\n")
    assert named("zeta").search(code_of(config))
