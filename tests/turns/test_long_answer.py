"""What a card is given of a huge answer (gateway/edge/long_answer.py, issue 38): a live card
its head, a final answer past ``maxAnswerParts`` parts the file answer.md and a head with a
note, the whole answer kept for the audit record."""

from __future__ import annotations

from gateway.edge.long_answer import (
    ANSWER_FILE,
    LIVE_BYTES,
    as_file,
    head,
    is_answer_file,
    live,
    whole_answer,
)
from gateway.progress import Media, Progress

FENCED = "intro\n```python\n" + "print('x')\n" * 5_000 + "```\n\nafter"


def test_head_is_cut_at_a_line_end_within_the_bound_and_closes_an_open_fence() -> None:
    cut = head(FENCED, 1_000)
    assert len(cut.encode()) <= 1_000
    assert cut.endswith("```")  # the fence open at the cut is closed
    assert FENCED.startswith(cut.removesuffix("```").rstrip("\n"))
    assert head("short", 1_000) == "short"


def test_a_live_card_gets_the_head_of_a_huge_answer_at_the_same_version() -> None:
    answer = "line of text\n" * 10_000  # 130 KB
    progress = Progress(turn_id="t", answer=answer, version=7)
    shown = live(progress)
    assert shown.version == 7
    assert len(shown.answer.encode()) <= LIVE_BYTES + 10
    assert answer.startswith(shown.answer.removesuffix("\n\n…"))
    small = Progress(turn_id="t", answer="hello")
    assert live(small) is small
    final = progress.finish("success")
    assert live(final) is final  # the final state is filed or split, never cut here


def test_an_answer_past_the_parts_becomes_answer_md_and_a_head_with_a_note() -> None:
    answer = "é" * 40_000  # 80 KB of UTF-8, 40,000 characters
    image = Media(kind="image", url="https://x/a.png", data=b"png", mime="image/png", name="a")
    final = Progress(turn_id="t", answer=answer, media=(image,)).finish("success")
    assert as_file(final, 10_000, 8) is final  # 8 parts of 10 KB hold it
    assert as_file(final, None, 1) is final  # a platform mode that takes no file
    filed = as_file(final, 10_000, 4)
    assert filed.version == final.version + 1  # shown again, never taken for the one shown
    item, rest = filed.media[0], filed.media[1:]
    assert is_answer_file(item) and (item.name, item.mime) == (ANSWER_FILE, "text/markdown")
    assert item.data.decode() == answer
    assert rest == (image,)
    assert ANSWER_FILE in filed.answer and len(filed.answer.encode()) <= 10_000
    assert filed.answer.startswith("é" * 100)
    assert whole_answer(filed) == answer
    assert whole_answer(final) == answer
