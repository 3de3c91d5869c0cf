"""Progress -> WeCom JSON: the app's ``button_interaction`` template card (platforms.md §3.3)
and the markdown an AI-bot stream shows (steps above the answer)."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.edge.media import shown
from gateway.edge.parts import Room, numbered, split_answer
from gateway.envelope import Action
from gateway.progress import Progress

# Button styles of template cards (⚠ docs: 1..4, 1 = blue); Stop is red, New is grey.
STYLES = {"primary": 1, "default": 2, "danger": 3}
MARKS = {"running": "⏳", "done": "✅", "failed": "❌", "cancelled": "⏹️"}
APP_MARKDOWN_BYTES = 2048  # message/send markdown content limit
STREAM_BYTES = 20_480  # AI-bot stream content limit (§3.5)
WELCOME = "Hi! Send me a message to get started. Commands: /new, /stop, /help."
CLICKED = {
    "stop": "Stop requested",
    "new": "New conversation",
    "confirm": "Confirmed",
    "reject": "Rejected",
}


def task_id_for(idempotency_key: str) -> str:
    """``task_id`` is unique per app, ≤128 bytes of ``[0-9a-zA-Z_-@]``."""
    return ("xgw-" + re.sub(r"[^0-9A-Za-z_@-]", "-", idempotency_key))[:128]


def button_key(progress: Progress, action_id: str) -> str:
    value = {"conversation": progress.conversation, "turnId": progress.turn_id, "action": action_id}
    return json.dumps(value, separators=(",", ":"))


def parse_button_key(key: str) -> dict[str, str] | None:
    try:
        value = json.loads(key)
    except (ValueError, TypeError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return None
    return {k: str(value.get(k) or "") for k in ("conversation", "turnId", "action")}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def steps_text(progress: Progress) -> str:
    items = (*progress.steps, *progress.tools)
    return "\n".join(f"{MARKS.get(s.status, '•')} {s.title}" for s in items)


def template_card(progress: Progress, task_id: str) -> dict[str, Any]:
    desc = progress.error if progress.status == "error" else ""
    if progress.final and progress.answer and not desc:
        desc = "The answer follows in the next message"
    card: dict[str, Any] = {
        "card_type": "button_interaction",
        "task_id": task_id,
        "main_title": {"title": _clip(progress.title, 36), "desc": _clip(desc, 44)},
        "button_list": [
            {"text": b.label, "style": STYLES[b.style], "key": button_key(progress, b.action_id)}
            for b in progress.buttons
        ],
    }
    steps = steps_text(progress)
    if steps:
        card["sub_title_text"] = _clip(steps, 112)
    return card


def card_update(progress: Progress, task_id: str) -> dict[str, Any]:
    """The body part of update_template_card: a new card, or (no buttons left) a greyed one."""
    if not progress.buttons:
        return {"button": {"replace_name": _clip(progress.title, 20)}}
    return {"template_card": template_card(progress, task_id)}


def clicked_card(action: Action, user: str) -> dict[str, Any]:
    """An AI-bot card after a click (``update_template_card``, same ``task_id``): it says
    what was clicked and by whom, and keeps one grey button with the same value."""
    label = CLICKED.get(action.id, "Done")
    return {
        "card_type": "button_interaction",
        "task_id": action.message_id or "",
        "main_title": {"title": label, "desc": _clip(f"by {user}", 44)},
        "button_list": [
            {
                "text": label,
                "style": STYLES["default"],
                "key": json.dumps(action.value, separators=(",", ":")),
            }
        ],
    }


def final_text(progress: Progress) -> str:
    """What is sent as markdown after the final card update. WeCom markdown shows no images
    (limits.md, WeCom "images"): an image in the answer is a plain link there."""
    answer = shown(progress.answer).strip()
    parts = [answer] if answer else []
    if progress.status == "error" and progress.error:
        parts.append(f"**{progress.title}**: {progress.error}")
    elif progress.status == "cancelled" and parts:
        parts.append("_(stopped)_")
    return "\n\n".join(parts)


# Callback mode parts leave room for the note that tells how to get the next one.
MORE_ROOM = 160


def callback_parts(text: str) -> list[str]:
    """``text`` in parts for AI-bot callback mode (stream, ``response_url``, a ``more``
    reply's stream), each with room left for ``more_note``, marked (1/n)..(n/n)."""
    return numbered(split_answer(text, Room(STREAM_BYTES - MORE_ROOM))) if text.strip() else []


def more_note(next_part: int, total: int) -> str:
    return f"\n\n_Reply **more** for part {next_part}/{total}._"


def stream_text(progress: Progress) -> str:
    """The status and steps, then the answer so far (the final text once the turn is over)."""
    lines = [] if progress.status == "done" else [f"**{progress.title}**"]
    lines += [f"- {line}" for line in steps_text(progress).splitlines()]
    head = "\n".join(lines)
    body = final_text(progress) if progress.final else shown(progress.answer)
    # An agent's question: a stream takes no buttons, so its options are listed, to be typed
    # (a direct chat over the long connection gets them as a card's buttons as well).
    options = "\n".join(f"{i}. {o}" for i, o in enumerate(progress.options, 1))
    return "\n\n".join(p for p in (head, body, options if progress.final else "") if p)


def stream_parts(progress: Progress) -> list[str]:
    """The AI-bot stream content - the status and steps, then the answer so far - in parts of
    at most STREAM_BYTES, marked (1/n)..(n/n) when there are several: the stream shows the
    first, the others follow as messages of their own once the turn is over."""
    return split_bytes(stream_text(progress), STREAM_BYTES)


def stream_markdown(progress: Progress) -> str:
    """What the stream shows: the first of ``stream_parts``."""
    return (stream_parts(progress) or [""])[0]


def clip_bytes(text: str, limit: int) -> str:
    """``text`` within ``limit`` bytes, for what is never long (notes, notices); an answer is
    split instead (``split_bytes``)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    note = "\n\n…"
    return data[: limit - len(note.encode())].decode(errors="ignore") + note


def split_bytes(text: str, limit: int = APP_MARKDOWN_BYTES) -> list[str]:
    """``text`` whole in parts of at most ``limit`` UTF-8 bytes, at paragraph or line ends
    where possible, marked (1/n)..(n/n) when there are several (gateway/edge/parts.py)."""
    return numbered(split_answer(text, Room(limit))) if text.strip() else []
