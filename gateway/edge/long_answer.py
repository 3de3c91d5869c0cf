"""Huge answers (issue 38): what a card is given of an answer too long to show whole.

A live card is given the answer's head (``live``: at most ``LIVE_BYTES``), so rendering and
splitting an update costs the same however long the answer has grown. A final answer past
``maxAnswerParts`` parts of its platform's size (``Adapter.answer_part_bytes``) becomes a file,
``answer.md`` (``as_file``): the card shows its head and a note, the whole answer follows as one
file message (each adapter's answer-media path), instead of dozens of messages.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.edge.parts import Room, split_answer, utf8_size
from gateway.progress import Media, Progress

__all__ = [
    "ANSWER_FILE",
    "HEAD_BYTES",
    "LIVE_BYTES",
    "as_file",
    "head",
    "is_answer_file",
    "live",
    "size_over",
    "whole_answer",
]

ANSWER_FILE = "answer.md"
ANSWER_MIME = "text/markdown"
LIVE_BYTES = 32_000  # of an answer a live card is given (each platform shows less in one card)
HEAD_BYTES = 8_000  # of a filed answer the final card shows at most
MORE = "\n\n…"


def size_over(text: str, limit: int) -> bool:
    """Whether ``text`` takes more than ``limit`` UTF-8 bytes (encoded only when in doubt)."""
    if len(text) > limit:
        return True
    if len(text) * 4 <= limit:
        return False
    return utf8_size(text) > limit


def head(text: str, max_bytes: int) -> str:
    """The start of ``text`` within ``max_bytes`` of UTF-8, cut as a part is (at a paragraph
    or line end where one is near, a code fence closed): only the head is read, so this costs
    the same for any length."""
    if not size_over(text, max_bytes):
        return text
    return split_answer(text[: max_bytes + 1], Room(max_bytes))[0]


def live(progress: Progress) -> Progress:
    """``progress`` as a live card is given it: its answer's head when the answer is past
    ``LIVE_BYTES`` (same version: the state is the same, only less of it is shown)."""
    if progress.final or not size_over(progress.answer, LIVE_BYTES):
        return progress
    return replace(progress, answer=head(progress.answer, LIVE_BYTES) + MORE)


def note(text: str) -> str:
    kib = max(1, round(utf8_size(text) / 1024))
    return (
        f"\n\n…\n\n_The answer is too long for the chat ({kib} KB): "
        f"the whole answer is in the file {ANSWER_FILE}._"
    )


def as_file(
    progress: Progress, part_bytes: int | None, max_parts: int, part_chars: int | None = None
) -> Progress:
    """The final ``progress`` with an answer past ``max_parts`` parts of ``part_bytes`` (or of
    ``part_chars`` characters, where a part holds fewer) as the
    file ``answer.md`` (first of its media) and its head with a note in the card (its version
    one up); as it is when the answer is shorter or the platform takes no file (``part_bytes``
    None)."""
    answer = progress.answer
    if part_bytes is None:
        return progress
    long = part_chars is not None and len(answer) > part_chars * max_parts
    if not long and not size_over(answer, part_bytes * max_parts):
        return progress
    data = answer.encode("utf-8", "replace")
    text = note(answer)
    room = min(HEAD_BYTES, part_bytes, part_chars or part_bytes) - utf8_size(text) - 64
    shown = head(answer, max(1024, room)) + text
    item = Media(kind="file", url=ANSWER_FILE, data=data, mime=ANSWER_MIME, name=ANSWER_FILE)
    return replace(
        progress, answer=shown, media=(item, *progress.media), version=progress.version + 1
    )


def whole_answer(progress: Progress) -> str:
    """The whole answer of ``progress``: the filed one (``as_file``) when it was filed."""
    if progress.media and is_answer_file(progress.media[0]):
        return progress.media[0].data.decode("utf-8", "replace")
    return progress.answer


def is_answer_file(item: Media) -> bool:
    """Whether ``item`` is a filed answer (``as_file``), not one the answer linked to."""
    return item.kind == "file" and item.url == ANSWER_FILE and item.mime == ANSWER_MIME
