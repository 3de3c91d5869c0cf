"""Progress -> the console's card JSON (the contract of ``GET /console/api/chats/…/messages``)."""

from __future__ import annotations

from typing import Any

from gateway.progress import Progress


def render_card(progress: Progress) -> dict[str, Any]:
    return {
        "status": progress.status,
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
