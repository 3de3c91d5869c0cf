"""The core names no platform (issue 39): an adapter declares everything about its platform
(published limits, the APIs that send to a chat, connection states, aliases, body formats), and
``gateway/`` reads it from the installed adapters. The rule covers code - identifiers, attribute
names and string literals, which users see in ``check``, ``/metrics``, the schema and logs -
and leaves prose alone: comments and docstrings may cite a platform's public source as the
reason for a general rule, and the CLI's ``--help`` page (``HELP``, a user's text) says which
platforms the gateway connects."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "gateway"
PLATFORM = re.compile(
    r"lark|feishu|飞书|dingtalk|dingding|钉钉|wecom|weixin|wework|wxwork|workwx|qywx|企业微信",
    re.IGNORECASE,
)


def docstring_lines(source: str) -> set[int]:
    """The first lines of every module, class and function docstring of ``source``, and of the
    ``--help`` page (a module-level ``HELP``)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "HELP"
        ]:
            lines.add(node.value.lineno)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.add(body[0].lineno)
    return lines


def platform_names_in_code(source: str) -> list[tuple[int, str]]:
    """(line, token) of each name or string literal of ``source`` that names a platform;
    comments and docstrings are prose, not code."""
    docs = docstring_lines(source)
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and tok.start[0] in docs:
            continue
        if tok.type in (tokenize.NAME, tokenize.STRING) or tok.type == getattr(
            tokenize, "FSTRING_MIDDLE", -1
        ):
            if PLATFORM.search(tok.string):
                found.append((tok.start[0], tok.string[:60]))
    return found


def test_no_platform_is_named_in_the_core_code() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(CORE.rglob("*.py"))
        for line, text in platform_names_in_code(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_rule_catches_names_and_literals_but_not_prose() -> None:
    code = '''"""Lark's docs say so (a docstring: prose)."""
LARK_QPS = 5  # a comment on DingTalk: prose
limits = {"wecom": 1}
label = f"feishu-{x}"


def f() -> None:
    """WeCom's page (prose)."""
    return lark.send()
'''
    lines = [line for line, _ in platform_names_in_code(code)]
    assert sorted(set(lines)) == [2, 3, 4, 9]
