"""Progress -> the console's card JSON (the contract of ``GET /console/api/chats/…/messages``).

``status`` is the state's id (the page styles by it), ``statusText`` the words for it and
``title`` the headline: the question while a card waits, else the same as ``statusText``, so a
page shows the status once and adds ``statusText`` only where the title is a question.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gateway.edge.long_answer import head, size_over
from gateway.progress import Progress

# What the transcript keeps of an answer (in Redis, sent to every open page): past it the head,
# the whole answer's length and SHA-256 beside it (``answerChars``, ``answerSha256``).
ANSWER_BYTES = 64_000


def render_card(progress: Progress) -> dict[str, Any]:
    card = _card(progress)
    answer = progress.answer
    if size_over(answer, ANSWER_BYTES):
        card["answer"] = head(answer, ANSWER_BYTES) + f"\n\n…[cut: {len(answer)} characters in all]"
        card["answerChars"] = len(answer)
        card["answerSha256"] = hashlib.sha256(answer.encode("utf-8", "replace")).hexdigest()
    return card


def _card(progress: Progress) -> dict[str, Any]:
    return {
        "status": progress.status,
        "statusText": progress.status_title,
        "title": progress.title,
        "steps": [{"title": s.title, "status": s.status} for s in progress.steps],
        "tools": [
            {"title": t.title, "status": t.status, "detail": t.detail} for t in progress.tools
        ],
        "answer": progress.answer,
        "error": progress.error,
        "buttons": [
            {"actionId": b.action_id, "label": b.label, "style": b.style} for b in progress.buttons
        ],
    }
