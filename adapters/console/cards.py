"""Progress -> the console's card JSON (the contract of ``GET /console/api/chats/…/messages``).

``status`` is the state's id (the page styles by it), ``statusText`` the words for it and
``title`` the headline: the question while a card waits, else the same as ``statusText``, so a
page shows the status once and adds ``statusText`` only where the title is a question.
"""

from __future__ import annotations

from typing import Any

from gateway.progress import Progress


def render_card(progress: Progress) -> dict[str, Any]:
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
