"""Chat commands typed into the conversation: /new [text], /stop, /help, group memory and
schedules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

HELP_TEXT = (
    "Commands:\n"
    "/new [text] - start a new conversation (any text becomes its first message)\n"
    "/stop - stop the answer being written\n"
    "/remember <text> - add a rule or fact to this chat's memory (kept across conversations)\n"
    "/memory - list this chat's memory\n"
    "/forget <n> - remove item n from this chat's memory\n"
    "/schedule <cron> <text> - run <text> in this chat at the cron's times (5 fields, or 6 "
    "with seconds first), e.g. /schedule 0 9 * * 1-5 summarize yesterday\n"
    "/schedules - list this chat's schedules with their next run\n"
    "/unschedule <n> - remove schedule n (see /schedules)\n"
    'Or just say it: "every weekday at 9:30 summarize this group" (confirmed with a card)\n'
    "/help - this list"
)


@dataclass(frozen=True, slots=True)
class Command:
    name: Literal[
        "new", "stop", "help", "remember", "memory", "forget", "schedule", "schedules", "unschedule"
    ]
    rest: str = ""


def parse_command(text: str) -> Command | None:
    """Recognise a command at the start of the (mention-stripped) text; else None."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    head, _, rest = stripped.partition(" ")
    if "\n" in head:
        head, _, more = head.partition("\n")
        rest = (more + " " + rest).strip()
    name = head[1:].lower()
    if name == "new":
        return Command("new", rest.strip())
    if name == "stop":
        return Command("stop")
    if name == "help":
        return Command("help")
    if name in ("remember", "memory", "forget", "schedule", "schedules", "unschedule"):
        return Command(name, rest.strip())  # type: ignore[arg-type]
    return None
