"""A long plain answer in linear time (issue 38): XpertAI streams an answer in small chunks, and
rendering its citations (gateway/citations.py) rescans the whole answer. While the card shows
the answer as written (no ``xpert://`` link in it, nothing held back), a chunk added at its end
that keeps it so goes on as it is, unrendered; only a chunk that may start a link renders the
answer again."""

from __future__ import annotations

from dataclasses import dataclass

HELD = 200  # render() holds back a "[" in the last this many characters of a streaming answer


@dataclass
class PlainRun:
    """What is known of the answer's end: whether the card shows it as written and how much."""

    plain: bool = True  # the card's answer is prefix + own as written
    shown: int = -1  # the card shows (prefix + own)[:shown]; -1: the stream's ``_shown``
    own: int = 0  # characters of the run's own answer
    clean: int = 0  # characters at its end since its last "["
    tail: str = ""  # its last characters (an "xpert:" split between two chunks)

    def rendered(self, own: str, now: str, prefix: str) -> None:
        """The answer was rendered whole into ``now``."""
        self.shown = -1
        self.plain = "xpert:" not in own and len(now) == len(prefix) + len(own)

    def grew(self, text: str, showing: int | None, prefix: int) -> bool:
        """``text`` was added at the end of the run's own answer; ``showing``: the length of
        what the card shows when that is the answer as written (None: not known so), of which
        ``prefix`` is the answer before this run. Whether ``text`` may go on as it is."""
        before = self.own
        self.own += len(text)
        tail = self.tail + text
        self.tail = tail[-8:]
        cut = text.rfind("[")
        self.clean = self.clean + len(text) if cut < 0 else len(text) - cut - 1
        if showing is None or not self.plain or "xpert:" in tail or cut >= 0:
            return False
        if self.clean <= HELD or showing != prefix + before:
            return False
        self.shown = showing + len(text)
        return True
