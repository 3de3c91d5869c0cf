"""The README stays a front page: at most 300 lines, its example table lists every file in
``config/examples/``, every local link and picture it has points at a file that exists, and its
"what works where" table (and docs/xpertai.md's) says what each platform declares."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.edge.capabilities import Capability
from gateway.edge.factory import discover_adapters
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


# --- "what works where": README's table and docs/xpertai.md's, against the declarations --------
# Each column is a platform in the mode the table means (the conformance suite holds each
# platform to its declarations: tests/conformance/); each row a capability, and how a cell says
# the platform has it (gateway/edge/capabilities.py).
AES = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
COLUMNS: dict[str, tuple[str, dict[str, Any]]] = {
    "Lark / Feishu": ("lark", {"appId": "cli_a", "appSecret": "s", "verificationToken": "v"}),
    "DingTalk": ("dingtalk", {"clientId": "c", "clientSecret": "s"}),
    "WeCom app": (
        "wecom",
        {
            "connectionMode": "app",
            "token": "t",
            "encodingAesKey": AES,
            "corpId": "c",
            "agentId": 1,
            "corpSecret": "s",
        },
    ),
    # The AI bot's column means its long connection; a cell says where callbacks differ.
    "WeCom AI bot": ("wecom", {"connectionMode": "aibot_ws", "botId": "b", "botSecret": "s"}),
}


def _not(*words: str) -> Callable[[str], bool]:
    """A cell says the platform has it unless it begins with one of ``words``."""
    return lambda cell: not re.match(rf"({'|'.join(words)})\b", cell.strip(), flags=re.I)


ROWS: dict[str, tuple[Capability, Callable[[str], bool]]] = {
    "files in": (Capability.FILES_IN, _not("no", "none")),
    "images in the answer": (Capability.IMAGES_OUT, _not("no", "none", "links")),
    "files the answer links": (Capability.FILES_OUT, _not("links", "none")),
    "a long answer": (Capability.LONG_ANSWER_FILE, lambda cell: "answer." in cell),
    "the sender's email": (Capability.SENDER_EMAIL, _not("none")),
    "sender email": (Capability.SENDER_EMAIL, _not("none")),
    "an `ask_clarification`'s options": (Capability.BUTTONS, _not("numbered", "typed")),
    "a clarification's options": (Capability.BUTTONS, _not("numbered", "typed")),
    "Confirm / Reject": (Capability.BUTTONS, _not("none", "typed", "no")),
}


def declared() -> dict[str, frozenset[Capability]]:
    factories = discover_adapters()
    out: dict[str, frozenset[Capability]] = {}
    for column, (platform, options) in COLUMNS.items():
        factory = factories[platform]
        fields = {"id": "x", "platform": platform, "xpertId": "e", **options}
        out[column] = factory.declared(factory.settings_model.model_validate(fields))
    return out


def table(path: Path) -> list[list[str]]:
    """The "what works where" table of ``path``: its header, then its rows, cell by cell."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| | Lark / Feishu |"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


@pytest.mark.parametrize("page", ["README.md", "docs/xpertai.md"])
def test_what_works_where_says_what_the_platforms_declare(page: str) -> None:
    header, *rows = table(ROOT / page)
    columns = header[1:]
    assert columns == list(COLUMNS), columns
    capabilities = declared()
    checked = 0
    for label, *cells in rows:
        row = next((v for k, v in ROWS.items() if label.startswith(k)), None)
        if row is None:
            continue  # a row no capability decides (citations, pictures in, a 60 KB answer)
        capability, says = row
        for column, cell in zip(columns, cells, strict=True):
            has = capability in capabilities[column]
            assert says(cell) == has, f"{page}: {label!r} / {column}: {cell!r}, declared {has}"
        checked += 1
    assert checked >= 5, f"{page}: only {checked} rows checked"
