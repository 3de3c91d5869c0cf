"""Chat commands typed into the conversation - /new [text], /stop, /help, group memory and
schedules - as text: which command a message is, and the help listing them
(``gateway.intake.chat_commands`` does what each says).

The rule: a command is ``/`` followed by a word of ASCII letters (then letters, digits or ``_``)
and then whitespace or the end of the text, e.g. ``/help`` or ``/new tell me more``. Anything
else is a message: ``/ something``, ``/usr/bin is slow``, ``/天气``. A command that is none of
the known ones is answered "unknown command, try /help" (it does not go to the expert).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

KNOWN = (
    "new", "stop", "help", "remember", "memory", "forget", "schedule", "schedules", "unschedule",
)  # fmt: skip
SCHEDULE_COMMANDS = ("schedule", "schedules", "unschedule")  # gateway/triggers/routines.py
NO_REST = ("stop", "help")  # what follows these is dropped

_COMMAND = re.compile(r"/([A-Za-z][A-Za-z0-9_]*)(?=\s|$)")


@dataclass(frozen=True, slots=True)
class Command:
    name: str  # lower case; one of KNOWN, or an unknown command's word
    rest: str = ""

    @property
    def known(self) -> bool:
        return self.name in KNOWN


def parse_command(text: str) -> Command | None:
    """The command at the start of the (mention-stripped) text, known or not; else None."""
    stripped = text.strip()
    found = _COMMAND.match(stripped)
    if found is None:
        return None
    name = found.group(1).lower()
    rest = "" if name in NO_REST else stripped[found.end() :].strip()
    return Command(name, rest)
