"""A long answer in numbered parts: each platform's content limit is a :class:`Room` (bytes as
the platform measures them, characters that still render, Markdown tables per message); an
answer past it is cut into parts that each fit, at a paragraph end where one is near, else at a
line end, else between characters (never inside one, nor before a combining mark). A Markdown
code fence open at a cut is closed at the end of its part and opened again, with its language,
at the start of the next; a Markdown table cut between its rows starts again in the next part
with its header row and delimiter row, so each part's table renders as one. ``numbered`` marks
the parts ``(1/n)`` … ``(n/n)``.

Without a fence or a table open at a cut, the parts joined are the answer exactly."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MARK_ROOM", "Room", "mark", "numbered", "split_answer", "utf8_size"]

# What a marker "\n\n(i/n)" takes at most (n < 1000): every Room keeps it free.
MARK_ROOM = 16
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|\s*$")


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Room:
    """What one message holds: ``size`` units of ``measure`` (UTF-8 bytes unless told; it must
    add up over concatenation), at most ``chars`` characters and ``tables`` Markdown tables."""

    size: int
    chars: int | None = None
    tables: int | None = None
    measure: Callable[[str], int] = utf8_size


def mark(i: int, n: int) -> str:
    return f"\n\n({i}/{n})"


def numbered(parts: list[str]) -> list[str]:
    """Each part followed by its marker ``(i/n)``; a single part stays as it is."""
    if len(parts) < 2:
        return parts
    return [part + mark(i, len(parts)) for i, part in enumerate(parts, start=1)]


@dataclass(slots=True)
class _Line:
    text: str
    fence: str  # the opening line of the fence open before this line, "" outside one
    rule: bool  # a table's delimiter row: the table counts here
    blank: bool  # a blank line outside a fence: a paragraph ends after it
    header: str = ""  # a table body row's header and delimiter rows, "" outside a table body


def _closing(opening: str) -> str:
    match = _FENCE.match(opening)
    return match.group(1) if match else "```"


def _joined(text: str, i: int) -> bool:
    """Whether a cut before ``text[i]`` would tear one visible character apart."""
    return (
        unicodedata.combining(text[i]) > 0 or text[i] in "\u200d\ufe0f" or text[i - 1] == "\u200d"
    )


def _pieces(line: str, room: int, measure: Callable[[str], int]) -> list[str]:
    """``line`` cut between characters into pieces of at most ``room``."""
    pieces: list[str] = []
    start, size = 0, 0
    for i, char in enumerate(line):
        width = measure(char)
        if size + width > room and i > start:
            cut = i
            while cut > start + 1 and _joined(line, cut):
                cut -= 1
            pieces.append(line[start:cut])
            start, size = cut, measure(line[cut : i + 1])
            continue
        size += width
    pieces.append(line[start:])
    return pieces


def _lines(text: str, room: Room) -> list[_Line]:
    out: list[_Line] = []
    fence = ""
    header = ""  # the open table's header and delimiter rows
    longest = max(1, room.size // 8)  # a long line is cut in pieces a part packs well
    previous = ""
    for raw in text.splitlines(keepends=True):
        before = fence
        match = _FENCE.match(raw)
        if match and not fence:
            fence = raw.rstrip("\r\n")
        elif match and fence:
            marker, bare = _closing(fence), raw.strip()
            if len(bare) >= len(marker) and bare == marker[0] * len(bare):
                fence = ""
        rule = not before and bool(_TABLE_RULE.match(raw))
        blank = not before and not fence and not raw.strip()
        row_of = header if header and not before and not fence and "|" in raw else ""
        header = row_of
        if rule and "|" in previous:
            header = _header(previous, raw, room)
        previous = raw
        pieces = [raw]
        if room.measure(raw) > longest or (room.chars and len(raw) > room.chars // 8):
            limit = min(longest, room.chars // 8) if room.chars else longest
            pieces = _pieces(raw, limit, room.measure)
        for j, piece in enumerate(pieces):
            last = j == len(pieces) - 1
            out.append(_Line(piece, before, rule and j == 0, blank and last, row_of * (j == 0)))
    return out


def _header(row: str, rule: str, room: Room) -> str:
    """A table's header and delimiter rows, repeated where a part starts in its body; "" when
    they would take more than a quarter of a part (a part must still hold rows)."""
    header = row + ("" if row.endswith("\n") else "\n") + rule
    header += "" if header.endswith("\n") else "\n"
    if room.measure(header) > room.size // 4 or (room.chars and len(header) > room.chars // 4):
        return ""
    return header


def split_answer(text: str, room: Room, rest: Room | None = None) -> list[str]:
    """``text`` in parts: the first within ``room``, the others within ``rest`` (``room`` when
    not given); each keeps ``MARK_ROOM`` free for its marker."""
    lines = _lines(text, room if rest is None else min(room, rest, key=lambda r: r.size))
    parts: list[str] = []
    start = 0
    while start < len(lines):
        fits = room if not parts else (rest or room)
        end = _cut(lines, start, fits)
        parts.append(_part(lines, start, end))
        start = end
    return parts or [text]


def _part(lines: list[_Line], start: int, end: int) -> str:
    body = "".join(line.text for line in lines[start:end])
    opening = lines[start].fence
    if opening:
        body = opening + "\n" + body
    elif lines[start].header:
        body = lines[start].header + body
    closing = lines[end].fence if end < len(lines) else ""
    if closing:
        body += ("" if body.endswith("\n") else "\n") + _closing(closing)
    return body


def _cut(lines: list[_Line], start: int, room: Room) -> int:
    """Where the part starting at ``start`` ends: as many lines as fit, back to the last
    paragraph end when that keeps at least half."""
    measure = room.measure
    budget = room.size - MARK_ROOM
    opening = lines[start].fence
    header = "" if opening else lines[start].header
    size = measure(opening + "\n") if opening else measure(header)
    chars = len(opening) + 1 if opening else len(header)
    tables = 1 if header else 0
    paragraph = -1  # index after the last paragraph end
    end = start
    while end < len(lines):
        line = lines[end]
        grow = measure(line.text)
        after = lines[end + 1].fence if end + 1 < len(lines) else ""
        close = measure("\n" + _closing(after)) if after else 0
        over = size + grow + close > budget
        if room.chars is not None:
            over = over or chars + len(line.text) + (len(after) + 1 if after else 0) > room.chars
        table_over = line.rule and room.tables is not None and tables + 1 > room.tables
        if (over or table_over) and end > start:
            if paragraph > start and (table_over or size >= budget // 2):
                return paragraph
            if table_over and end - 1 > start:
                return end - 1  # the header row goes with its table
            return end
        size += grow
        chars += len(line.text)
        tables += line.rule
        end += 1
        if line.blank:
            paragraph = end
    return end
