"""An XpertAI answer with citations renders in time linear in its length (issue 38): each chunk
is rendered once, whatever the answer's length, and the card is given what it gains, never
the whole answer again. Counted, not timed: the characters the renderer reads
(``CitedText.scanned``) and the characters the stream's events carry."""

from __future__ import annotations

import json
import random

from gateway.citations import CitedText, Sources, render
from gateway.events import TextDelta, joined
from gateway.experts.sse import SseEvent
from gateway.experts.xpert_stream import XpertStream
from gateway.progress import Progress


def url(doc: str) -> str:
    return f"xpert://knowledgebase/chunk?knowledgebaseId=kb-1&documentId={doc}&chunkId=c-1"


def cited_answer(paragraphs: int) -> str:
    """Paragraphs of words, each citing one of five documents by link, every tenth bare."""
    out = []
    for i in range(paragraphs):
        doc = f"doc-{i % 5}"
        cite = url(doc) if i % 10 == 9 else f"[⟦{i % 3 + 1}⟧]({url(doc)})"
        out.append(f"Point {i} holds, see [the chart](xpert://dashboard/{i}) {cite}. " + "w " * 60)
    return "\n\n".join(out)


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def streamed(text: str, size: int) -> CitedText:
    cited = CitedText(Sources())
    for chunk in chunks(text, size):
        cited.add(chunk)
    cited.end()
    return cited


def test_the_work_per_character_stays_the_same_however_long_the_answer() -> None:
    short, long = cited_answer(50), cited_answer(400)
    ratio = [streamed(t, 4).scanned / len(t) for t in (short, long)]
    # Rendering the answer again per chunk would read ~len/8 characters per character.
    assert ratio[1] < 1.1 * ratio[0]
    assert ratio[1] < 12
    whole = streamed(long, len(long))
    assert whole.scanned == len(long)


def test_chunked_as_it_streams_or_whole_the_answer_renders_the_same() -> None:
    text = cited_answer(30) + " x [open label ( xpert:/ [a](xpert://knowledgebase/chunk?documentId="
    text += "d-9) xpert:plain " + "[⟦1⟧](" + url("doc-last") + ")  \n\n "
    rng = random.Random(38)
    once = render(text, Sources())
    assert "xpert://" not in once and "⟦" not in once
    assert once.endswith(
        "\n\n(The agent did not name every source; those are listed by document id.)"
    )
    for _ in range(20):
        cited = CitedText(Sources())
        at, seen = 0, []
        while at < len(text):
            step = rng.randint(1, 40)
            cited.add(text[at : at + step])
            at += step
            seen.append(cited.shown)
        cited.end()
        assert cited.shown == once
        # no state on the way shows a link, and the body only ever grew
        assert not [s for s in seen if "xpert://" in s or "⟦" in s]
        bodies = [s.split("\n\n**Sources**")[0] for s in seen]
        assert all(once.startswith(b) for b in bodies)


def test_the_card_is_given_each_character_once_and_the_sources_list_as_a_trailer() -> None:
    """Through the XpertAI stream: no event carries the whole answer again (``replace``), the
    text the events carry adds up to the answer's length, and the card folded from them (as
    gateway/turns/drive.py folds them, in batches) is the answer rendered whole."""
    text = cited_answer(200)
    stream = XpertStream()
    events: list[TextDelta] = []
    for i, chunk in enumerate(chunks(text, 4)):
        frame = {"type": "message", "data": {"type": "text", "text": chunk, "id": "s"}}
        events += [e for e in stream.feed(SseEvent("", json.dumps(frame), str(i)))]
    end = {"type": "event", "event": "on_conversation_end", "data": {"status": "idle"}}
    events += [e for e in stream.feed(SseEvent("", json.dumps(end), None))]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert not [d for d in deltas if d.replace]
    final = render(text, Sources())
    body = final.split("\n\n**Sources**")[0]
    assert sum(len(d.text) for d in deltas) == len(body)
    progress = Progress(turn_id="t")
    for batch in range(0, len(deltas), 97):
        for delta in joined(deltas[batch : batch + 97]):
            progress = progress.apply(delta)
    assert progress.answer == final == stream.shown
    one_by_one = Progress(turn_id="t")
    for delta in deltas[:500]:
        one_by_one = one_by_one.apply(delta)
    assert one_by_one.answer.startswith(body[:100]) and "**Sources**" in one_by_one.answer


def test_a_name_learned_after_the_text_changes_only_the_trailer() -> None:
    sources = Sources()
    cited = CitedText(sources)
    text, tail = cited.add(f"Refunds [⟦1⟧]({url('doc-a')}) take 14 days.")
    assert text == "Refunds [1] take 14 days." and tail is not None and "document doc-a" in tail
    sources.learn(
        {
            "citations": [
                {"documentId": "doc-a", "knowledgebaseId": "kb-1", "documentName": "Refunds.pdf"}
            ]
        }
    )
    assert cited.trailer() == "\n\n**Sources**\n\n- [1] Refunds.pdf"
    progress = Progress(turn_id="t").apply(TextDelta(text, tail=tail))
    progress = progress.apply(TextDelta("", tail=cited.trailer()))
    progress = progress.apply(TextDelta(" More.", tail=cited.trailer()))
    assert progress.answer == "Refunds [1] take 14 days. More.\n\n**Sources**\n\n- [1] Refunds.pdf"
    # a delta without a trailer (the next run's text) goes after it
    assert progress.apply(TextDelta("\n\nNext")).answer.endswith("Refunds.pdf\n\nNext")
