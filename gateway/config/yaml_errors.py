"""A YAML syntax error as ``check`` prints it: the file, the line and column to fix, what is
most likely wrong in plain words, and the parser's own words after it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

# pyyaml's problem (a regular expression on it) -> what a person most likely got wrong.
_PLAIN: tuple[tuple[str, str], ...] = (
    (
        r"could not find expected ':'",
        "a key without its colon (write `key: value`), or a line that goes on from the one "
        "above without being indented under it",
    ),
    (
        r"mapping values are not allowed here",
        "a colon where none can be: a value that contains ': ' needs quotes (\"a: b\"), or "
        "this line is indented deeper than the key above it",
    ),
    (r"found character '\\t' that cannot start any token", "a tab: YAML indents with spaces"),
    (
        r"found character '(.)' that cannot start any token",
        "a value cannot begin with {0} unless it is quoted: put the value in quotes",
    ),
    (r"found undefined alias '(.*)'", "*{0} refers to no anchor &{0} above it"),
    (r"found unexpected end of stream", "a quote opened here is never closed"),
    (
        r"expected ',' or '([\]}])'",
        "a bracket opened here is never closed (add `{0}`), or its items are not separated "
        "by commas",
    ),
    (
        r"expected <block end>, but found '<block sequence start>'",
        "a list item (`-`) that does not line up with the items or keys above it",
    ),
    (
        r"expected <block end>, but found '\?'",
        "the indentation does not line up with the lines above, or a bracket or quote opened "
        "above is never closed",
    ),
    (
        r"expected <block end>",
        "the indentation does not line up: this line is indented differently from the keys "
        "above it",
    ),
    (r"did not find expected key", "a key was expected here: the indentation is off"),
    (r"did not find expected '-' indicator", "a list item (`-`) was expected: line up the dashes"),
)


def plain(problem: str) -> str | None:
    """What ``problem`` (pyyaml's words) most likely means, if it is one we know."""
    for pattern, text in _PLAIN:
        found = re.search(pattern, problem)
        if found is not None:
            return text.format(*found.groups())
    return None


def describe(exc: yaml.MarkedYAMLError, path: Path) -> str:
    """``file, line L, column C: not valid YAML: <plain words> (the parser: <its words>)``.

    Where a construct left open began (a quote, a bracket, a key without its colon) is the
    line to fix; inside a block mapping or list it is where the parser stopped."""
    context = exc.context or ""
    block = context.startswith("while parsing a block")
    first, other = exc.context_mark, exc.problem_mark
    if block or first is None:
        first, other = other, first
    where = f"{path}, line {first.line + 1}, column {first.column + 1}" if first else str(path)
    what = exc.problem or "syntax error"
    if first and other and other.line != first.line:
        what += (
            f" (in the {context.removeprefix('while parsing a ')} from line {other.line + 1})"
            if block
            else f" (found at line {other.line + 1})"
        )
    meant = plain(exc.problem or "")
    return f"{where}: not valid YAML: " + (f"{meant} (the parser: {what})" if meant else what)
