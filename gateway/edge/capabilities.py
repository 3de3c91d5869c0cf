"""What a platform (in an integration's mode) can do for its users, as its adapter declares it
(``Adapter.capabilities()``). The conformance suite (tests/conformance/) checks each declared
capability end to end against the platform's fake, and that an undeclared one fails gently
(a link or typed option where a button or file would be); README's "what works where" table is
checked against the declarations (tests/test_readme.py)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Capability"]


class Capability(StrEnum):
    # The bot talks in group chats (mentioned there), not only with one person at a time.
    GROUPS = "groups"
    # A file or picture a user sends reaches the expert (downloaded from the platform).
    FILES_IN = "files_in"
    # The answer's images are shown as images (in the card, or image messages after it).
    IMAGES_OUT = "images_out"
    # Files the answer links are sent as files; without it they stay links.
    FILES_OUT = "files_out"
    # An answer past ``maxAnswerParts`` parts is sent as one file (``answer_part_bytes``); without
    # it every part is sent.
    LONG_ANSWER_FILE = "long_answer_file"
    # The sender's email is looked up in the platform's directory (``sys.user_email``).
    SENDER_EMAIL = "sender_email"
    # The answer shows the turn's steps as they went (tools called, files uploaded or left out
    # and why); without it only the answer's text is shown.
    STEPS = "steps"
    # A clarification's options and Confirm / Reject are buttons (or links) a user clicks, in a
    # direct chat at least; without it they are numbered and the user types one.
    BUTTONS = "buttons"
    # ...and in a group too, for the asker and the chat's approvers only.
    GROUP_BUTTONS = "group_buttons"
