"""Progress -> Lark card JSON 2.0 (docs/lark.md, "Cards and CardKit") and callback toasts ("Card
callbacks").

Card JSON 2.0 rejects unknown attributes, so only documented fields are used. Element ids are
letters, digits and underscores, at most 20 characters. A card and a post are limited to 30 KB,
so the answer shown in a card is capped and the rest is sent as follow-up text (pitfalls #5):
the card is part (1/n), the text messages (2/n)..(n/n) (gateway/edge/parts.py).
"""

from __future__ import annotations

import re
from typing import Any

from gateway.edge.parts import Room, numbered, split_answer
from gateway.progress import Progress

ANSWER_ELEMENT = "answer"
# Bytes of answer kept in one card: the 30 KB limit also has to hold the escaped JSON around it.
CARD_ANSWER_BYTES = 20_000
TEXT_PART_BYTES = 60_000  # text messages may be 150 KB; stay well below
# A markdown component holds at most four Markdown tables (docs/lark.md, "Limits"): the
# card's share stops before a fifth; text messages render no tables, so theirs are not counted.
CARD_ROOM = Room(CARD_ANSWER_BYTES, tables=4)
TEXT_ROOM = Room(TEXT_PART_BYTES)

TEMPLATES = {
    "running": "blue",
    "waiting": "orange",
    "done": "green",
    "rejected": "grey",  # neither a success nor a failure
    "error": "red",
    "cancelled": "grey",
    "ended": "grey",
}
STEP_ICONS = {"running": "⏳", "done": "✅", "failed": "❌", "cancelled": "⏹️"}
TOASTS = {
    "stop": ("info", "Stopping…"),
    "new": ("success", "Starting a new conversation"),
    "confirm": ("success", "Confirmed"),
    "reject": ("info", "Rejected"),
    "retry": ("info", "Retrying…"),
    "routine_confirm": ("success", "Scheduling…"),
    "routine_cancel": ("info", "Cancelled"),
    "answer": ("success", "Answer sent"),
}
# What a click shows at once: (header title, header template, note); None keeps it as it was.
CLICKED: dict[str, tuple[str | None, str | None, str | None]] = {
    "stop": ("Stopping…", "grey", None),
    "new": (None, None, "_This conversation has ended; your next message starts a new one._"),
    "confirm": ("Continuing…", "blue", None),
    "reject": ("Continuing…", "blue", None),
    "retry": ("Retrying…", "blue", None),
    "routine_confirm": ("Scheduling…", "blue", None),
    "routine_cancel": ("Cancelled", "grey", None),
    "answer": (None, None, "_Answer sent; the reply follows._"),  # an option of a question
}


# Lark turns mention tags into real mentions, in text messages (``<at user_id="ou_…">Name</at>``,
# ``<at user_id="all"></at>``: DOC im-v1/message/create_json) and in card markdown (``<at id=all>``,
# ``<at id=ou_…>``, ``<at ids=…>``, ``<at email=…>``: DOC feishu-cards rich-text). The gateway
# writes none of its own, so every one in what it sends came from a user, an agent or memory:
# ``<at`` and ``</at`` in any case, with any whitespace, also spelt as an HTML entity (card
# markdown reads entities), lose their "<" to a fullwidth "＜" (U+FF1C), which no parser reads
# as a tag and which still reads as "<" (issue 25).
_MENTION_TAG = re.compile(r"(?:<|&lt;?|&#0*60;?|&#x0*3c;?)(\s*/?\s*at)(?![\w-])", re.IGNORECASE)


def inert(text: str) -> str:
    """``text`` with no mention tag Lark would act on; everything else as it was."""
    return _MENTION_TAG.sub(lambda m: "\uff1c" + m.group(1), text)


def answer_parts(answer: str) -> list[str]:
    """The whole answer in parts, marked (1/n)..(n/n) when there are several: the card's share
    first (at most CARD_ANSWER_BYTES and four Markdown tables), then the follow-up text
    messages. Mention tags are made inert before the cut, so the parts are measured as sent."""
    return numbered(split_answer(inert(answer), CARD_ROOM, TEXT_ROOM))


def card_answer(progress: Progress) -> str:
    """The answer element's text: what fits in the card, or a placeholder while empty."""
    if progress.answer:
        return answer_parts(progress.answer)[0]
    return "…" if progress.status == "running" else " "


def _steps(progress: Progress) -> str:
    lines = [f"{STEP_ICONS.get(s.status, '•')} {s.title}" for s in progress.steps]
    for tool in progress.tools:
        icon = STEP_ICONS.get(tool.status, "•")
        detail = f": {tool.detail}" if tool.detail else ""
        lines.append(f"{icon} 🔧 {tool.title}{detail[:200]}")
    return inert("\n".join(lines))


def button_value(progress: Progress, action_id: str, chat_type: str) -> dict[str, str]:
    """Every click must bring back its conversation and turn (the contract of action envelopes)."""
    return {
        "conversation": progress.conversation,
        "turnId": progress.turn_id,
        "action": action_id,
        "chatType": chat_type,
    }


def render_card(progress: Progress, *, chat_type: str, streaming: bool = False) -> dict[str, Any]:
    elements: list[dict[str, Any]] = []
    steps = _steps(progress)
    if steps:
        elements.append({"tag": "markdown", "element_id": "steps", "content": steps})
    elements.append(
        {"tag": "markdown", "element_id": ANSWER_ELEMENT, "content": card_answer(progress)}
    )
    if progress.error:
        elements.append(
            {
                "tag": "markdown",
                "element_id": "error",
                "content": f"**Error:** {inert(progress.error)}",
            }
        )
    for button in progress.buttons:
        elements.append(
            {
                "tag": "button",
                "element_id": f"btn_{button.action_id}"[:20],
                "type": button.style,
                "text": {"tag": "plain_text", "content": inert(button.label)},
                "behaviors": [
                    {
                        "type": "callback",
                        "value": button_value(progress, button.action_id, chat_type),
                    }
                ],
            }
        )
    title = inert(progress.title)  # plain text, but a title may quote anyone
    config: dict[str, Any] = {"update_multi": True, "summary": {"content": title}}
    if streaming:
        config["streaming_mode"] = True
    return {
        "schema": "2.0",
        "config": config,
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": TEMPLATES.get(progress.status, "blue"),
        },
        "body": {"elements": elements},
    }


def _value(element: dict[str, Any]) -> dict[str, Any]:
    for behavior in element.get("behaviors") or ():
        if isinstance(behavior, dict) and isinstance(behavior.get("value"), dict):
            return dict(behavior["value"])
    return {}


def clicked_card(card: dict[str, Any], action_id: str, turn_id: str) -> dict[str, Any] | None:
    """The card as it looks right after a click, from the card as last rendered: buttons gone,
    the header or a note saying what happens next. None when the card shown has no such button
    for that turn (already moved on): then the click does not change it."""
    body, header = card.get("body"), card.get("header")
    if not isinstance(body, dict) or not isinstance(header, dict):
        return None
    elements = body.get("elements")
    if not isinstance(elements, list):
        return None
    buttons = [_value(e) for e in elements if isinstance(e, dict) and e.get("tag") == "button"]
    if not any(v.get("action") == action_id and v.get("turnId") == turn_id for v in buttons):
        return None
    clicked = CLICKED.get("answer" if action_id.startswith("answer_") else action_id)
    title, template, note = clicked or (None, None, None)
    kept = [e for e in elements if not (isinstance(e, dict) and e.get("tag") == "button")]
    if note:
        kept.append({"tag": "markdown", "element_id": "clicked", "content": note})
    header = dict(header)
    if title:
        header["title"] = {"tag": "plain_text", "content": title}
    if template:
        header["template"] = template
    config = {k: v for k, v in (card.get("config") or {}).items() if k != "streaming_mode"}
    return {**card, "config": config, "header": header, "body": {**body, "elements": kept}}


def toast(
    action_id: str,
    *,
    duplicate: bool = False,
    card: dict[str, Any] | None = None,
    notice: str = "",
) -> dict[str, Any]:
    """The callback answer (within Lark's 3 s): a toast and, when the click changes the card,
    the updated card, which Lark shows at once; later states arrive through the renderer.
    ``notice``: a refused click's warning toast (who may answer instead)."""
    kind, text = TOASTS.get(
        "answer" if action_id.startswith("answer_") else action_id, ("info", "OK")
    )
    if duplicate:
        kind, text = "info", "Already received"
    if notice:
        kind, text = "warning", notice
    answer: dict[str, Any] = {"toast": {"type": kind, "content": text, "i18n": {"en_us": text}}}
    if card is not None:
        answer["card"] = {"type": "raw", "data": card}
    return answer
