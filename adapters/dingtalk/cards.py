"""Progress -> DingTalk message bodies: markdown / actionCard (``cards: markdown``, or a card
refused), the variables of the operator's AI card template (``cardTemplateId``) and of the
public AI markdown card (the default). See docs/dingtalk.md for the templates.

DingTalk measures sizes in UTF-8 bytes: a robot message's ``msgParam`` may hold at most
15000 bytes ("长度限制 15000 字节以内", https://open.dingtalk.com/document/development/
the-robot-sends-a-group-message; longer is 400 ``invalidParameter.msgParam.tooLong``) and a
card's ``cardParamMap`` value at most 1 KB (…/create-and-deliver-cards). A CJK character is 3
bytes, so a length in characters says little: long answers are split by bytes, and by
characters too (``MAX_CHARS``: past about 3,500 a markdown message no longer renders), into
parts marked (1/n)..(n/n) (``gateway.edge.parts``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.edge.parts import MARK_ROOM, Room, mark, numbered, split_answer
from gateway.progress import Progress

MAX_PARAM_BYTES = 15_000  # one robot message (msgParam / webhook body), see above
# Characters of one markdown message, its marker included: DingTalk's markdown stops rendering
# past about 3,500 characters, and connectors split at 3,500-3,800 (secondary sources only:
# /work/shared/reference/limits.md "content limits"; no DingTalk page gives a figure).
MAX_CHARS = 3_400
CARD_VALUE_BYTES = 1_000  # one cardParamMap value ("最长不超过1KB"), with a little room
STEP_ICONS = {"running": "⏳", "done": "✅", "failed": "❌", "cancelled": "⏹️"}
# The AI card's flowStatus: 2 running, 4 waiting, 3 finished; anything else 5 = failed.
FLOW_STATUS = {"running": "2", "waiting": "4", "done": "3", "rejected": "3", "ended": "3"}


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

    def size(self) -> int:
        """Bytes of the larger of the two wire forms (webhook body, OpenAPI msgParam)."""
        return max(len(utf8_json(self.webhook_body())), len(self.openapi_param()[1].encode()))

    def openapi_param(self) -> tuple[str, str]:
        """(msgKey, msgParam) for the robot OpenAPI sends (§2.5)."""
        param: dict[str, str] = {"title": self.title, "text": self.text}
        if not self.buttons:
            key = "sampleMarkdown"
        elif len(self.buttons) == 1:
            key = "sampleActionCard"
            param.update(singleTitle=self.buttons[0][0], singleURL=self.buttons[0][1])
        else:
            # sampleActionCard2…5 hold 2…5 buttons; "6" is another layout (robot-message-type).
            buttons = self.buttons[:5]
            key = f"sampleActionCard{len(buttons)}"
            for i, (label, url) in enumerate(buttons, start=1):
                param[f"actionTitle{i}"] = label
                param[f"actionURL{i}"] = url
        return key, utf8_json(param).decode()


def phase(progress: Progress) -> str | None:
    """Which states are worth a message: DingTalk robot messages cannot be edited, so only
    the first ("working on it"), each confirmation prompt, and the final answer are sent."""
    if progress.final:
        return "final"
    if progress.status == "waiting":
        digest = hashlib.sha256(f"{progress.prompt}\n{progress.answer}".encode()).hexdigest()
        return f"waiting-{digest[:16]}"
    return None


def utf8_json(value: Any) -> bytes:
    """Compact JSON in UTF-8 (a lone surrogate, which no wire carries, becomes "?")."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")


_ESCAPED = {'"': 2, "\\": 2, "\n": 2, "\r": 2, "\t": 2, "\b": 2, "\f": 2}


def _json_size(char: str) -> int:
    """Bytes of ``char`` inside a JSON string as ``utf8_json`` writes it ("\\n" is 2 bytes,
    "中" 3, another control character 6 as ``\\u00XX``, a lone surrogate 1 as "?"), without
    calling the encoder once per character."""
    code = ord(char)
    if code < 0x80:
        return _ESCAPED.get(char, 6 if code < 0x20 else 1)
    if code < 0x800:
        return 2
    if 0xD800 <= code < 0xE000:
        return 1
    return 3 if code < 0x10000 else 4


def json_size(text: str) -> int:
    """Bytes ``text`` takes inside a JSON string as ``utf8_json`` writes it: what a part adds
    to a message's ``msgParam``. It adds up over concatenation (each character is escaped on
    its own), as :class:`Room` needs; a single character is looked up, a longer text measured
    by one encoder call, so a split never calls the encoder once per character."""
    if len(text) == 1:
        return _json_size(text)
    return len(utf8_json(text)) - 2


def split(text: str, budget: int) -> list[str]:
    """``text`` in unnumbered parts (``gateway.edge.parts``): each part and its marker within
    ``budget`` bytes as JSON-escaped UTF-8 (how ``msgParam`` is measured) and ``MAX_CHARS``
    characters, cut at a paragraph or line end where one is near, never inside a character
    nor a code fence. Linear in the answer: each line measured once (issue 25: a rescan of the
    rest per piece made a 300 KB answer hold the event loop for half a minute)."""
    return split_answer(text, Room(budget, chars=MAX_CHARS - MARK_ROOM, measure=json_size))


def fit(text: str, limit: int = CARD_VALUE_BYTES, *, keep_end: bool = False) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (at a character boundary), marked with "…"."""
    if len(text.encode()) <= limit:
        return text
    room = limit - len("…".encode())
    if keep_end:
        tail = text.encode()[-room:].decode(errors="ignore")
        return "…" + tail
    return text.encode()[:room].decode(errors="ignore") + "…"


def as_messages(title: str, text: str, buttons: tuple[tuple[str, str], ...] = ()) -> list[Message]:
    """``text`` as one or more messages, each within MAX_PARAM_BYTES and MAX_CHARS, marked
    ``(i/n)`` when there are several; the buttons go on the last one (the room they take is
    kept free in every part)."""
    budget = MAX_PARAM_BYTES - Message(title, "", buttons).size()
    chunks = numbered(split(text, budget))
    return [
        Message(title=title, text=chunk, buttons=buttons if i == len(chunks) - 1 else ())
        for i, chunk in enumerate(chunks)
    ]


def render_messages(
    progress: Progress,
    link: Callable[[str], str] | None,
    *,
    withheld: frozenset[str] = frozenset(),
    note: str = "",
) -> list[Message]:
    """The message(s) for one state; buttons (as signed links) go on the last one, except the
    ``withheld`` ones (sent to each person who may answer privately: ``private_message``), and
    ``note`` ends the text."""
    title = progress.title
    if progress.status == "running":
        body = f"**{title}**"
    elif progress.status == "error":
        body = f"**{title}**\n\n{progress.error or ''}".rstrip()
        if progress.answer:
            body = f"{progress.answer}\n\n---\n{body}"
    elif progress.status == "waiting":
        body = f"{progress.answer}\n\n---\n**{title}**" if progress.answer else f"**{title}**"
    elif progress.status in ("cancelled", "rejected", "ended"):
        body = f"{progress.answer}\n\n---\n*{title}*" if progress.answer else f"*{title}*"
    else:
        body = progress.answer or f"*{title}*"
    if note:
        body = f"{body}\n\n{note}"
    shown = [b for b in progress.buttons if b.action_id not in withheld]
    buttons = tuple((b.label, link(b.action_id)) for b in shown) if link else ()
    return as_messages(title, body, buttons)


def private_message(
    progress: Progress, link: Callable[[str], str], *, actions: frozenset[str], asked_in: str
) -> Message:
    """A group chat's question, sent to one person who may answer it, with buttons (links
    signed for them) for ``actions`` only."""
    title = fit(progress.title, 200)
    text = f"**{progress.title}**\n\nAsked in {asked_in}; your answer goes to that chat."
    mine = [b for b in progress.buttons if b.action_id in actions]
    buttons = tuple((b.label, link(b.action_id)) for b in mine)
    return Message(title=title, text=fit(text, MAX_PARAM_BYTES // 2), buttons=buttons)


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
        "statusText": fit(progress.title),
        "steps": fit(steps_markdown(progress), keep_end=True),  # the latest steps matter
        "error": fit(progress.error),
        "conversation": progress.conversation,
        "turnId": progress.turn_id,
        "showStop": _flag("stop" in buttons),
        "showConfirm": _flag("confirm" in buttons),
        "showReject": _flag("reject" in buttons),
        "showRetry": _flag("retry" in buttons),
        "showNew": _flag("new" in buttons),
    }


def card_content(progress: Progress) -> str:
    if progress.answer:
        return progress.answer
    return "" if progress.status == "running" else progress.title


# The public AI markdown card's flowStatus (AICardStatus of the stream SDK's card_replier.py:
# 1 processing, 2 inputting, 3 finished, 4 executing, 5 failed); a stopped or rejected turn is
# finished, not failed.
AI_FLOW_STATUS = {"waiting": "4", "done": "3", "rejected": "3", "ended": "3", "cancelled": "3"}


def ai_card_markdown(progress: Progress) -> str:
    """What the public AI markdown card shows in ``msgContent``: the answer, or the steps (the
    status before any) while there is none yet, with the outcome under a rule as the markdown
    messages show it."""
    answer, title = progress.answer, progress.title
    if progress.status == "running":  # never empty: the card is created inputting with it
        return answer or steps_markdown(progress) or f"*{title}*"
    if progress.status == "error":
        tail = f"**{title}**\n\n{progress.error or ''}".rstrip()
    elif progress.status == "waiting":
        tail = f"**{title}**"
    elif progress.status in ("cancelled", "rejected", "ended"):
        tail = f"*{title}*"
    else:
        return answer or f"*{title}*"
    return f"{answer}\n\n---\n{tail}" if answer else tail


def ai_card_params(progress: Progress, content: str, links: str) -> dict[str, str]:
    """The public AI markdown card's variables besides the streamed ``msgContent``: running is
    2 (inputting) once there is something to show, else 1 (processing); ``links`` the buttons
    as markdown links, in ``staticMsgContent`` (the SDK's non-streamed markdown block)."""
    if progress.status == "running":
        flow = "2" if content else "1"
    else:
        flow = AI_FLOW_STATUS.get(progress.status, "5")
    return {"flowStatus": flow, "staticMsgContent": links}


def ai_card_create_params(content: str, links: str) -> dict[str, str]:
    """The public card's first variables, as DingTalk's connector and channel SDK set them
    (``config`` autoLayout: dingtalk-openclaw-connector card.ts l.372-383, dingtalk-channel-sdk-
    python card.py ``create_and_deliver``) with the stream SDK's ``get_card_data`` keys
    (``sys_full_json_obj`` orders the card's blocks: the answer, then the links). With something
    to show (the steps) it is created inputting (2), as ``ai_card_params`` would put it, so no
    call later only changes the status (issue 38: 300 such PUTs of 300 turns queued the finals
    behind them on the same API's 20 a second); else processing (1)."""
    return {
        "flowStatus": "2" if content else "1",
        "msgContent": content,
        "staticMsgContent": links,
        "sys_full_json_obj": json.dumps({"order": ["msgContent", "staticMsgContent"]}),
        "config": json.dumps({"autoLayout": True}),
    }


def link_line(labels: list[tuple[str, str]]) -> str:
    """Buttons as one line of markdown links (the public card has no buttons of its own)."""
    return " · ".join(f"[{label}]({url})" for label, url in labels)


def card_parts(text: str, title: str) -> list[str]:
    """A card's answer in parts: the first is shown on the card, the others follow as markdown
    messages. Each part fits one robot message (MAX_PARAM_BYTES, MAX_CHARS): no AI card size
    limit was found, so the card holds no more than a message does. Several parts are marked
    (1/n)..(n/n)."""
    budget = MAX_PARAM_BYTES - Message(title, "").size()
    return numbered(split(text, budget)) if text else []


def first_part(text: str, title: str, parts: list[str] | None = None) -> str:
    """The part of a still growing answer that the card shows (no marker yet: n is unknown);
    ``parts`` when ``card_parts`` was already called."""
    parts = card_parts(text, title) if parts is None else parts
    if len(parts) < 2:
        return text
    return parts[0].removesuffix(mark(1, len(parts)))


def clicked_params(action_id: str) -> dict[str, str]:
    """What a click changes on the card at once (the callback's answer, §2.6)."""
    text = {
        "stop": "Stopping…",
        "new": "Conversation ended",
        "confirm": "Confirmed",
        "reject": "Rejected",
        "retry": "Retrying…",
    }.get(action_id, "")
    return {
        "statusText": text,
        "showStop": "false",
        "showConfirm": "false",
        "showReject": "false",
        "showRetry": "false",
        "showNew": "false",
    }


def _flag(value: bool) -> str:
    return "true" if value else "false"
