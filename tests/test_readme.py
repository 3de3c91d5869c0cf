"""The README stays a front page: at most 300 lines, its example table lists every file in
``config/examples/``, and every local link and picture it has points at a file that exists."""

from __future__ import annotations

import ast
import re

from tests.support.helpers import ROOT

README = ROOT / "README.md"
MAX_LINES = 300


def test_the_readme_is_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES})"


def test_the_example_table_lists_every_example_config() -> None:
    text = README.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(config/[^`]+)` \|", text, flags=re.M))
    examples = {
        f"config/examples/{p.name}" for p in (ROOT / "config" / "examples").iterdir() if p.is_file()
    }
    assert examples, "config/examples/ is empty"
    assert examples - listed == set(), "README.md's example table misses these"
    assert {p for p in listed if not (ROOT / p).is_file()} == set(), "listed but not there"


def test_local_links_and_pictures_point_at_files() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"^[a-z]+://", t)]
    assert "docs/console.png" in local
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_the_architecture_page_has_each_gateway_package_as_its_docstring_says() -> None:
    """docs/architecture.md has one line per package of ``gateway/``: its docstring."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = text.split("### `gateway/` packages", 1)[1].split("\n#", 1)[0]
    rows = dict(re.findall(r"^\| `gateway/(\w+)/` \| (.*) \|$", packages, flags=re.M))
    assert len(rows) == len(list((ROOT / "gateway").glob("*/__init__.py")))
    for init in sorted((ROOT / "gateway").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert rows.get(init.parent.name) == " ".join(doc.split()).replace("``", "`"), init
