"""Ids as parts of Redis keys and conversation ids (issue 25): every id is one part, so no two
conversations - and no two keys of one conversation - can share a key, and no id can leave its
Redis Cluster hash tag. Used by the key builder (sessions.keys) and gateway.conversation."""

from __future__ import annotations

import re

_ENCODED = {"%": "%25", ":": "%3A", "|": "%7C", "{": "%7B", "}": "%7D"}
_ENCODE = re.compile(r"[%:|{}]")


def id_part(value: str) -> str:
    """An id as one part of a key (or of a conversation id): ``%``, the separator ``:``, ``|``
    and the braces of a hash tag percent-encoded, so no part spills into the next and no two
    ids give one key (issue 25); an id without those characters - every id the platforms
    issue - is itself, so its keys are the ones earlier versions wrote."""
    return _ENCODE.sub(lambda m: _ENCODED[m.group()], value) if _ENCODE.search(value) else value


_ENCODE_TAIL = re.compile(r"[%|{}]")


def id_tail(value: str) -> str:
    """An id that ends a conversation id and keeps its ``:`` (an external event's subject key,
    ``pr:owner/repo#2``): as :func:`id_part` otherwise. A key built on such a conversation still
    reads back one way only: a key's argument never holds ``:`` nor a part's name."""
    return _ENCODE_TAIL.sub(lambda m: _ENCODED[m.group()], value)


# The parts of a conversation's keys (``<conversation>:<part>``); those that take an argument
# (``<conversation>:<part>:<argument>``) are marked. An argument is an id part that never equals
# a part's name (:func:`arg`), so a key reads back one way only even where a conversation id
# has one ``:``-field more than another (an external event's thread is ``<source>:<key>``).
_PARTS = frozenset(
    (
        "dedup", "burst", "burstmeta", "turn", "lease", "binding", "cancel", "evcard", "watch",
        "bturns", "bsender", "btokens", "brefused",
    )
)  # fmt: skip


def arg(value: str) -> str:
    """A key's argument (an event id, a sender, a watch id, a day): an id part that is never a
    part's name."""
    part = id_part(value)
    if part in _PARTS:  # never a part's name: its first letter encoded
        return f"%{ord(part[0]):02X}{part[1:]}"
    return part
