"""A long answer in numbered parts (gateway/edge/parts.py): within each room, lossless outside
fences, fences closed and reopened, never a torn character."""

from __future__ import annotations

import json

from gateway.edge.parts import MARK_ROOM, Room, numbered, split_answer, utf8_size


def test_a_short_answer_is_one_part_unmarked() -> None:
    assert split_answer("hello", Room(100)) == ["hello"]
    assert numbered(["hello"]) == ["hello"]
    assert split_answer("", Room(100)) == [""]


def test_parts_fit_join_back_and_cut_at_paragraphs() -> None:
    text = "".join(f"Paragraph {i}: " + "词" * (i % 70) + "\n\n" for i in range(600))
    parts = split_answer(text, Room(2_000), Room(5_000))
    assert "".join(parts) == text
    assert utf8_size(parts[0]) <= 2_000 - MARK_ROOM
    assert all(utf8_size(p) <= 5_000 - MARK_ROOM for p in parts[1:])
    assert all(p.endswith("\n\n") for p in parts[:-1]), "each cut at a paragraph end"
    marked = numbered(parts)
    assert marked[0].endswith(f"\n\n(1/{len(parts)})")
    assert marked[-1].endswith(f"\n\n({len(parts)}/{len(parts)})")


def test_one_long_line_is_cut_between_characters() -> None:
    text = "é\u0301😀长" * 5_000  # a combining mark, a 4-byte emoji, a 3-byte character
    parts = split_answer(text, Room(3_000))
    assert "".join(parts) == text
    assert all(utf8_size(p) <= 3_000 for p in parts)
    assert not any(p[0] == "\u0301" for p in parts), "a mark stays with its letter"


def test_a_code_fence_is_closed_and_reopened_across_parts() -> None:
    code = "".join(f"print({i})\n" for i in range(2_000))
    text = f"Here:\n\n```python\n{code}```\n\nDone."
    parts = split_answer(text, Room(4_000))
    assert len(parts) > 3
    for part in parts:
        assert part.count("```") % 2 == 0, "every part's fences are balanced"
    assert all(p.startswith("```python\n") for p in parts[1:-1])
    inner = "".join(p.removeprefix("```python\n").removesuffix("```") for p in parts[1:-1])
    assert code.startswith(inner[: len(inner) // 2])


def test_characters_tables_and_another_measure() -> None:
    text = "".join(f'line {i} "quoted"\n' for i in range(3_000))
    json_size = Room(4_000, chars=1_000, measure=lambda s: len(json.dumps(s)) - 2)
    parts = split_answer(text, json_size)
    assert "".join(parts) == text
    assert all(len(p) <= 1_000 and len(json.dumps(p)) - 2 <= 4_000 for p in parts)
    table = "| a | b |\n| :-- | --: |\n| 1 | 2 |\n\n"
    parts = split_answer(table * 9, Room(10_000, tables=4))
    assert [p.count("| :-- |") for p in parts] == [4, 4, 1]


def test_a_table_cut_between_rows_starts_again_with_its_header() -> None:
    head = "| name | value |\n| :-- | --: |\n"
    rows = "".join(f"| row {i} | {'x' * (i % 40)} |\n" for i in range(400))
    text = f"Before.\n\n{head}{rows}\nAfter."
    parts = split_answer(text, Room(3_000))
    assert len(parts) > 3
    assert all(utf8_size(p) <= 3_000 - MARK_ROOM for p in parts)
    for part in parts[1:]:
        if part.startswith("| row"):
            raise AssertionError("a part starts in a table without its header")
    body = [p for p in parts if "| row" in p]
    assert all(p.startswith(head) or p.startswith("Before.") for p in body)
    # the rows, in order, each once
    seen = [line for p in parts for line in p.splitlines() if line.startswith("| row")]
    assert seen == rows.splitlines()


def test_pipes_in_a_fence_are_no_table() -> None:
    code = "".join(f"a | b | {i}\n" for i in range(800))
    text = f"| h | i |\n| - | - |\n| 1 | 2 |\n\n```\n{code}```\n"
    parts = split_answer(text, Room(2_000))
    assert all(not p.startswith("| h") for p in parts[1:])
    assert all(p.startswith("```") for p in parts[1:])
