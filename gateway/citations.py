"""Knowledge-base citations in an answer -> footnote markers and a "Sources" list.

XpertAI asks its model to copy each retrieved chunk's ``citationMarkdown`` verbatim into the
answer: ``[⟦n⟧](xpert://knowledgebase/chunk?knowledgebaseId=…&documentId=…&chunkId=…)``
(xpert-ai/xpert @5135ce25 ``packages/server-ai/src/knowledgebase/citation.ts`` l.33-74). No chat
can open an ``xpert://`` link, so none reaches one raw: each becomes ``[n]``, numbered by source
document in the order the answer first cites it (XpertAI's own ``n`` restarts at 1 with every
retrieval call, l.120-121, so it cannot name a source across calls), and a "Sources" list ends
the answer. Names come from what the run streamed: the retrieval tool's output lists its
``citations`` with ``documentName`` (``formatKnowledgebaseRetrievalToolOutput`` l.115-137;
``knowledgebase/retriever.ts`` l.212-229 returns it as the tool's output, which
``xpert-agent/agent.ts`` l.316-343 streams as the tool component's ``output``). A document the
run never named is listed by its id, and the list says so.

Platform-free: experts call ``render`` on their answer, so every platform shows the same text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

# A Markdown link to an xpert:// URL (any label: models do not always copy ⟦n⟧ verbatim), or a bare
# one; one pass, so sources are numbered in the order the answer cites them. A URL is at most
# URL_CHARS long (real ones are ~150): what a streaming answer holds back stays bounded.
URL_CHARS = 2000
LINK = rf"\[([^\[\]\n]{{0,80}})\]\((xpert://[^)\s]{{0,{URL_CHARS}}})\)"
BARE = rf"xpert://[^\s)\]]{{0,{URL_CHARS}}}"
CITE = re.compile(f"{LINK}|{BARE}")


def _prefixes(word: str, then: str) -> str:
    """A regex for any non-empty prefix of ``word``, and ``word`` followed by ``then``."""
    out = then
    for char in reversed(word[1:]):
        out = f"(?:{re.escape(char)}{out})?"
    return re.escape(word[0]) + out


# Where a citation may begin that the text so far leaves undecided (more text may complete it or
# not): an open label, a label and "](" with the start of an xpert:// URL, or a bare URL growing.
OPEN = re.compile(
    r"\[[^\[\]\n]{0,80}(?:\](?:\((?:"
    + _prefixes("xpert://", rf"[^)\s]{{0,{URL_CHARS}}}")
    + r")?)?)?\Z|"
    + _prefixes("xpert://", rf"[^\s)\]]{{0,{URL_CHARS - 1}}}")
    + r"\Z"
)
HOLD_CHARS = URL_CHARS + 100  # the longest text OPEN can match
KNOWLEDGEBASE = "xpert://knowledgebase/chunk"
# What XpertAI takes a document's name from (citation.ts l.99-103), for a retriever's own
# documents (``on_retriever_end``: agent.ts l.392-409 streams them as the component's ``data``).
NAME_KEYS = ("title", "originalFileName", "filename")


@dataclass(frozen=True, slots=True)
class Source:
    knowledgebase_id: str
    document_id: str
    name: str = ""


@dataclass
class Sources:
    """The documents a run's retrievals returned, learned from its tool outputs."""

    names: dict[tuple[str, str], str] = field(default_factory=dict)
    version: int = 0  # one up with every name learned

    def _named(self, key: tuple[str, str], name: str) -> None:
        if key not in self.names:
            self.names[key] = name
            self.version += 1

    def learn(self, value: Any) -> None:
        """Take the citations out of a tool's output (the JSON text the retrieval tool returns,
        or its parsed object) or a retriever's documents; anything else is left alone."""
        if isinstance(value, str):
            if '"citations"' not in value and '"documentId"' not in value:
                return
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    self._document(item)
            return
        if not isinstance(value, dict):
            return
        for key in ("citations", "chunks"):
            for item in value.get(key) or []:
                if isinstance(item, dict):
                    self._citation(item)

    def _citation(self, item: dict[str, Any]) -> None:
        kb, doc = str(item.get("knowledgebaseId") or ""), str(item.get("documentId") or "")
        if not doc:
            kb, doc = _ids(str(item.get("citationUrl") or ""))
        name = item.get("documentName")
        if doc and isinstance(name, str) and name.strip():
            self._named((kb, doc), name.strip())

    def _document(self, item: dict[str, Any]) -> None:
        meta = item.get("metadata")
        if not isinstance(meta, dict):
            return
        doc = str(meta.get("documentId") or meta.get("knowledgeId") or "")
        name = next((meta[k] for k in NAME_KEYS if isinstance(meta.get(k), str)), "")
        if doc and name.strip():
            self._named((str(meta.get("knowledgebaseId") or ""), doc), name.strip())

    def name(self, kb: str, doc: str) -> str:
        if (kb, doc) in self.names:
            return self.names[(kb, doc)]
        # A retriever's own document may carry no knowledge base id (the tool adds it).
        return next((n for (k, d), n in self.names.items() if d == doc and not k), "")


def render(text: str, sources: Sources, *, partial: bool = False) -> str:
    """``text`` with every xpert:// link replaced (citations by ``[n]``) and, when it cites
    anything, a "Sources" list at its end. ``partial``: the answer is still streaming, so a
    tail that may yet become a link is left out until it is whole (as :class:`CitedText`
    shows it)."""
    cited = CitedText(sources)
    cited.add(text)
    if not partial:
        cited.end()
    return cited.shown


class CitedText:
    """An answer rendered as it streams, in time linear in its length (issue 38): each chunk
    renders only what it completes. Text that may still become a link (``OPEN``: at most
    ``HOLD_CHARS``) is held back; the rest is rendered once and never again. While the answer
    cites anything, the card's text is ``body`` then the "Sources" list (the trailer), and a
    blank at the body's end is held back, as the answer rendered whole (``rstrip``) has none
    there. ``add`` and ``end`` return what the body gains and the trailer (None: no citation
    yet, so none). ``scanned`` counts the characters read, for tests that the work is linear."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.body: list[str] = []  # rendered, shown
        self.scanned = 0
        self._pend = ""  # raw, held back: may still become a link
        self._blank: list[str] = []  # rendered blanks at the body's end, held back
        self._cited: list[tuple[str, str]] = []  # (knowledge base, document) in citing order
        self._numbers: dict[tuple[str, str], int] = {}
        self._trailer: str | None = None
        self._made = (0, -1)  # (citations, sources version) the trailer was made from

    @property
    def shown(self) -> str:
        return "".join(self.body) + (self._trailer or "")

    def add(self, text: str) -> tuple[str, str | None]:
        pend = self._pend + text
        self.scanned += len(pend)
        cut = _settled(pend)
        self._pend = pend[cut:]
        return self._show(CITE.sub(self._marker, pend[:cut]) if cut else "")

    def end(self) -> tuple[str, str | None]:
        """The answer is whole: nothing is held back but the body's trailing blank."""
        pend, self._pend = self._pend, ""
        self.scanned += len(pend)
        return self._show(CITE.sub(self._marker, pend))

    def trailer(self) -> str | None:
        """The "Sources" list as the card ends with it (None: nothing cited)."""
        if not self._cited:
            return None
        made = (len(self._cited), self.sources.version)
        if made != self._made:
            self._made = made
            cited = [Source(kb, doc, self.sources.name(kb, doc)) for kb, doc in self._cited]
            self._trailer = "\n\n" + sources_list(cited)
        return self._trailer

    def _show(self, piece: str) -> tuple[str, str | None]:
        if self._cited and piece:
            kept = piece.rstrip()
            blank = piece[len(kept) :]
            if kept:
                piece = "".join(self._blank) + kept
                self._blank.clear()
            else:
                piece = ""
            if blank:
                self._blank.append(blank)
        if piece:
            self.body.append(piece)
        return piece, self.trailer()

    def _marker(self, match: re.Match[str]) -> str:
        label, url = match.group(1), match.group(2)
        if url is None:
            url, label = match.group(0), ""
        if not url.startswith(KNOWLEDGEBASE):
            return CITE.sub(self._marker, label)  # another xpert:// link: its words, no link
        key = _ids(url)
        if not key[1]:
            return ""
        number = self._numbers.get(key)
        if number is None:
            self._cited.append(key)
            number = self._numbers[key] = len(self._cited)
        return f"[{number}]"


def sources_list(cited: list[Source]) -> str:
    lines = ["**Sources**", ""]
    unnamed = False
    for n, source in enumerate(cited, start=1):
        if source.name:
            lines.append(f"- [{n}] {source.name}")
        else:
            unnamed = True
            lines.append(f"- [{n}] document {source.document_id}")
    if unnamed:
        lines += ["", "(The agent did not name every source; those are listed by document id.)"]
    return "\n".join(lines)


def _settled(pend: str) -> int:
    """How much of ``pend`` (text that starts where no citation is open) no later text can
    change: up to the first place where a citation may begin that is not yet decided, unless
    that place is inside a link already whole. An open citation is never longer than
    ``HOLD_CHARS``, so only that much of the end is searched."""
    low = max(0, len(pend) - HOLD_CHARS)
    found = OPEN.search(pend, low)
    cut = found.start() if found else len(pend)
    if "[" not in pend and "xpert:" not in pend:
        return cut
    for match in CITE.finditer(pend):
        if match.start() >= cut:
            break
        if match.end() > cut:  # the open place is inside a whole link: look past it
            found = OPEN.search(pend, max(match.end(), low))
            cut = found.start() if found else len(pend)
    return cut


def _ids(url: str) -> tuple[str, str]:
    query = parse_qs(urlsplit(url).query)
    return query.get("knowledgebaseId", [""])[0], query.get("documentId", [""])[0]
