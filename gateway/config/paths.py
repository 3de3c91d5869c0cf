"""Key paths as the file has them, for every message about the configuration: camelCase keys,
list items named by their ``id`` (an event source by its ``source``) where it is unique in the
list and by position otherwise (``integrations[lark-main].routes[0].xpertId``), never a pydantic
union tag; the line of the file a path is on; and the key meant for an unknown one."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from gateway.config.model import ID_PATTERN

Part = str | int
# Where each key and list item of a YAML document starts: its path to its line (1-based).
Marks = Mapping[tuple[Part, ...], int]

# A problem that begins with a dotted path: "integrations.0.routes.1.xpertId: …".
_LEADING_PATH = re.compile(r"^([A-Za-z][\w-]*(?:\.[\w-]+)*)(?=: )")


def parse(path: str) -> tuple[Part, ...]:
    """``integrations.0.xpertId`` as ``("integrations", 0, "xpertId")``."""
    return tuple(int(p) if p.isdigit() else p for p in path.split("."))


def shown(parts: Sequence[Part], data: Any) -> str:
    """The path of ``parts`` as the file has it, naming list items of ``data`` by id."""
    out = ""
    node = data
    for part in parts:
        if isinstance(part, int):
            out += f"[{_item_name(node, part)}]"
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        else:
            out += f".{part}" if out else part
            node = node.get(part) if isinstance(node, Mapping) else None
    return out


def _item_name(items: Any, index: int) -> str:
    """An item's id when it has one that no other item of the list has, else its position."""
    if not isinstance(items, list) or not 0 <= index < len(items):
        return str(index)
    ids = [_id_of(item) for item in items]
    own = ids[index]
    return own if own is not None and ids.count(own) == 1 else str(index)


def _id_of(item: Any) -> str | None:
    """What names an item: its ``id``, else its ``source`` (an integration's event sources)."""
    for key in ("id", "source"):
        value = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
        if isinstance(value, str) and re.fullmatch(ID_PATTERN, value):
            return value
    return None


def item_path(section: str, items: Sequence[Any], index: int) -> str:
    """``integrations[console]``: one item of a list of settings, for messages."""
    return f"{section}[{_item_name(list(items), index)}]"


def rename(problem: str, data: Any, marks: Marks | None = None) -> str:
    """A ``dotted.path: reason`` problem with its path as the file has it, and its line."""
    found = _LEADING_PATH.match(problem)
    if found is None:
        return problem
    parts = parse(found.group(1))
    return shown(parts, data) + problem[found.end() :] + line_note(parts, marks)


def line_note(parts: Sequence[Part], marks: Marks | None) -> str:
    """`` (line 12)``: where the deepest key of ``parts`` that the file has is."""
    if not marks:
        return ""
    for end in range(len(parts), 0, -1):
        line = marks.get(tuple(parts[:end]))
        if line is not None:
            return f" (line {line})"
    return ""


def yaml_marks(text: str) -> dict[tuple[Part, ...], int]:
    """Every key's and list item's line in a YAML document (it parsed already)."""
    marks: dict[tuple[Part, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Part, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    here = (*path, str(key.value))
                    marks.setdefault(here, key.start_mark.line + 1)
                    walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                marks.setdefault((*path, i), item.start_mark.line + 1)
                walk(item, (*path, i))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return marks


def file_parts(
    loc: Sequence[Part], model: type[BaseModel]
) -> tuple[tuple[Part, ...], type[BaseModel] | None]:
    """A pydantic error location as the file's path (union tags, validator names and ``[key]``
    dropped), with the model whose key the last part is (None where it is no model's key)."""
    kept: list[Part] = []
    holder: type[BaseModel] | None = None
    tp: Any = model
    for part in loc:
        if isinstance(part, str) and (part.startswith("function-") or part == "[key]"):
            continue
        current = _unwrap(tp)
        if isinstance(current, list):  # a union: pydantic names the member that was tried
            member = _member(current, part)
            if member is not None or (isinstance(part, str) and not part[:1].islower()):
                tp = member
                continue
            if isinstance(part, str) and _is_type_name(part):
                tp = None
                continue
            current = None
        kept.append(part)
        holder = current if _is_model(current) else None
        tp = _child(current, part)
    return tuple(kept), holder


def suggestion(key: str, model: type[BaseModel] | None) -> str | None:
    """The key of ``model`` that ``key`` most likely meant."""
    if model is None:
        return None
    keys = [field.alias or name for name, field in model.model_fields.items()]
    found = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return found[0] if found else None


def closest(word: str, choices: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _unwrap(tp: Any) -> Any:
    """The type under ``Annotated`` and ``| None``; a real union as the list of its members."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin is Union or origin is UnionType:
            members = [a for a in get_args(tp) if a is not NoneType]
            if len(members) != 1:
                return members
            tp = members[0]
        else:
            return tp


def _member(members: list[Any], part: Part) -> Any:
    """The union member a pydantic location part names: by its tag (a ``Literal`` field such as
    ``kind`` or ``platform``) or by its class name."""
    for member in members:
        if not _is_model(member):
            continue
        if member.__name__ == part:
            return member
        for field in member.model_fields.values():
            if get_origin(field.annotation) is Literal and part in get_args(field.annotation):
                return member
    return None


def _is_type_name(part: str) -> bool:
    return "[" in part or part in {"str", "int", "float", "bool", "none", "dict", "list"}


def _child(tp: Any, part: Part) -> Any:
    """The type of ``tp``'s ``part``: a model's field (by alias or name), a list's item, a
    mapping's value; None when it is not known."""
    if _is_model(tp) and isinstance(part, str):
        for name, field in tp.model_fields.items():
            if part in (field.alias, name):
                return field.annotation
        return None
    origin = get_origin(tp)
    args = get_args(tp)
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        return args[0]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    return None
