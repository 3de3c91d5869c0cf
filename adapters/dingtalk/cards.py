"""Progress -> DingTalk message bodies: markdown / actionCard (no template) and the AI card's
template variables (with ``cardTemplateId``). See docs/dingtalk.md for the template."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.progress import Progress

MAX_TEXT = 3500  # stay well under DingTalk's markdown size limit; longer answers are split
STEP_ICONS = {"running": "⏳", "done": "✅", "failed": "❌"}
FLOW_STATUS = {"running": "2", "waiting": "4", "done": "3", "ended": "3"}  # else 5 = failed


@dataclass(frozen=True, slots=True)
class Message:
    """One outgoing robot message: markdown, or an actionCard when it has link buttons."""

    title: str
    text: str
    buttons: tuple[tuple[str, str], ...] = ()  # (label, url)

    def webhook_body(self) -> dict[str, Any]:
        """The sessionWebhook payload (§2.5)."""
        if not self.buttons:
            return {"msgtype": "markdown", "markdown": {"title": self.title, "text": self.text}}
        card: dict[str, Any] = {"title": self.title, "text": self.text}
        if len(self.buttons) == 1:
            card.update(singleTitle=self.buttons[0][0], singleURL=self.buttons[0][1])
        else:
            card.update(
                btnOrientation="1",
                btns=[{"title": label, "actionURL": url} for label, url in self.buttons],
            )
        return {"msgtype": "actionCard", "actionCard": card}

    def openapi_param(self) -> tuple[str, str]:
        """(msgKey, msgParam) for the robot OpenAPI sends (§2.5)."""
        param: dict[str, str] = {"title": self.title, "text": self.text}
        if not self.buttons:
            key = "sampleMarkdown"
        elif len(self.buttons) == 1:
            key = "sampleActionCard"
            param.update(singleTitle=self.buttons[0][0], singleURL=self.buttons[0][1])
        else:
            key = f"sampleActionCard{len(self.buttons)}"
            for i, (label, url) in enumerate(self.buttons, start=1):
                param[f"actionTitle{i}"] = label
                param[f"actionURL{i}"] = url
        return key, json.dumps(param, ensure_ascii=False)


def phase(progress: Progress) -> str | None:
    """Which states are worth a message: DingTalk robot messages cannot be edited, so only
    the first ("working on it"), each confirmation prompt, and the final answer are sent."""
    if progress.final:
        return "final"
    if progress.status == "waiting":
        digest = hashlib.sha256(f"{progress.prompt}\n{progress.answer}".encode()).hexdigest()
        return f"waiting-{digest[:16]}"
    return None


def split(text: str, limit: int = MAX_TEXT) -> list[str]:
    """Cut at paragraph or line ends where possible."""
    chunks: list[str] = []
    while len(text) > limit:
        cut = max(text.rfind("\n\n", 0, limit), text.rfind("\n", 0, limit))
        cut = cut if cut > limit // 2 else limit
        chunks.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n")
    return [*chunks, text]


def render_messages(progress: Progress, link: Callable[[str], str] | None) -> list[Message]:
    """The message(s) for one state; buttons (as signed links) go on the last one."""
    title = progress.title
    if progress.status == "running":
        body = f"**{title}**"
    elif progress.status == "error":
        body = f"**{title}**\n\n{progress.error or ''}".rstrip()
        if progress.answer:
            body = f"{progress.answer}\n\n---\n{body}"
    elif progress.status == "waiting":
        body = f"{progress.answer}\n\n---\n**{title}**" if progress.answer else f"**{title}**"
    elif progress.status in ("cancelled", "ended"):
        body = f"{progress.answer}\n\n---\n*{title}*" if progress.answer else f"*{title}*"
    else:
        body = progress.answer or f"*{title}*"
    buttons = tuple((b.label, link(b.action_id)) for b in progress.buttons) if link else ()
    chunks = split(body)
    return [
        Message(title=title, text=chunk, buttons=buttons if i == len(chunks) - 1 else ())
        for i, chunk in enumerate(chunks)
    ]


def steps_markdown(progress: Progress) -> str:
    lines = [f"{STEP_ICONS.get(s.status, '•')} {s.title}" for s in progress.steps]
    lines += [f"{STEP_ICONS.get(t.status, '•')} `{t.title}`" for t in progress.tools]
    return "\n\n".join(lines)


def card_params(progress: Progress) -> dict[str, str]:
    """The AI card's template variables except ``content`` (which is streamed); every value is
    a string (§2.6 cardParamMap)."""
    buttons = {b.action_id for b in progress.buttons}
    return {
        "flowStatus": FLOW_STATUS.get(progress.status, "5"),
        "status": progress.status,
        "statusText": progress.title,
        "steps": steps_markdown(progress),
        "error": progress.error,
        "conversation": progress.conversation,
        "turnId": progress.turn_id,
        "showStop": _flag("stop" in buttons),
        "showConfirm": _flag("confirm" in buttons),
        "showReject": _flag("reject" in buttons),
        "showNew": _flag("new" in buttons),
    }


def card_content(progress: Progress) -> str:
    if progress.answer:
        return progress.answer
    return "" if progress.status == "running" else progress.title


def clicked_params(action_id: str) -> dict[str, str]:
    """What a click changes on the card at once (the callback's answer, §2.6)."""
    text = {
        "stop": "Stopping…",
        "new": "Conversation ended",
        "confirm": "Confirmed",
        "reject": "Rejected",
    }.get(action_id, "")
    return {
        "statusText": text,
        "showStop": "false",
        "showConfirm": "false",
        "showReject": "false",
        "showNew": "false",
    }


def _flag(value: bool) -> str:
    return "true" if value else "false"
