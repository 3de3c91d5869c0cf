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

# A Markdown link to an xpert:// URL (any label: models do not always copy ⟦n⟧ verbatim).
LINK = re.compile(r"\[([^\[\]\n]{0,80})\]\((xpert://[^)\s]*)\)")
BARE = re.compile(r"xpert://[^\s)\]]*")
BARE_TAIL = re.compile(r"xpert:[^\s)\]]*$")
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
            self.names.setdefault((kb, doc), name.strip())

    def _document(self, item: dict[str, Any]) -> None:
        meta = item.get("metadata")
        if not isinstance(meta, dict):
            return
        doc = str(meta.get("documentId") or meta.get("knowledgeId") or "")
        name = next((meta[k] for k in NAME_KEYS if isinstance(meta.get(k), str)), "")
        if doc and name.strip():
            self.names.setdefault((str(meta.get("knowledgebaseId") or ""), doc), name.strip())

    def name(self, kb: str, doc: str) -> str:
        if (kb, doc) in self.names:
            return self.names[(kb, doc)]
        # A retriever's own document may carry no knowledge base id (the tool adds it).
        return next((n for (k, d), n in self.names.items() if d == doc and not k), "")


def render(text: str, sources: Sources, *, partial: bool = False) -> str:
    """``text`` with every xpert:// link replaced (citations by ``[n]``) and, when it cites
    anything, a "Sources" list at its end. ``partial``: the answer is still streaming, so a
    tail that may yet become a link is left out until it is whole."""
    if "xpert:" not in text and not (partial and "[" in text[-200:]):
        return text
    if partial:
        text = _whole(text)
    cited: list[Source] = []

    def marker(url: str, label: str) -> str:
        if not url.startswith(KNOWLEDGEBASE):
            return label  # another xpert:// link: its words, without the link
        kb, doc = _ids(url)
        if not doc:
            return ""
        for n, source in enumerate(cited, start=1):
            if source.document_id == doc and source.knowledgebase_id == kb:
                return f"[{n}]"
        cited.append(Source(kb, doc, sources.name(kb, doc)))
        return f"[{len(cited)}]"

    text = LINK.sub(lambda m: marker(m.group(2), m.group(1)), text)
    text = BARE.sub(lambda m: marker(m.group(0), ""), text)
    if not cited:
        return text
    return text.rstrip() + "\n\n" + sources_list(cited)


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


def _whole(text: str) -> str:
    """A streaming answer without the tail that may still become an xpert:// link: an unclosed
    ``[…`` (any label may precede one), a label with ``(`` and the start of ``xpert://``, or a
    bare ``xpert:…`` still growing."""
    text = BARE_TAIL.sub("", text)
    at = text.rfind("[")
    tail = text[at:] if at >= 0 else ""
    if not tail or "\n" in tail or len(tail) > 2000:
        return text
    if "]" not in tail:
        return text[:at] if len(tail) <= 81 else text
    rest = tail.split("]", 1)[1]
    if not rest:
        return text[:at]
    if not rest.startswith("(") or ")" in rest:
        return text
    url = rest[1:]
    return text[:at] if "xpert://".startswith(url) or url.startswith("xpert://") else text


def _ids(url: str) -> tuple[str, str]:
    query = parse_qs(urlsplit(url).query)
    return query.get("knowledgebaseId", [""])[0], query.get("documentId", [""])[0]
