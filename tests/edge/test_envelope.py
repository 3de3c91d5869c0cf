"""The Envelope's stored form (gateway/envelope.py): ``to_json`` writes what pydantic's
``model_dump_json`` writes with the same options (camelCase, no nulls, ``raw`` only when kept),
and ``from_json`` reads it - and the parsed dict - back to an equal Envelope, for every kind of
Envelope and its optional parts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.envelope import Action, Attachment, Chat, Envelope, Mention, ReplyTo, Sender, Subject

TEXT = st.text(max_size=20)
IDS = st.text(min_size=1, max_size=12)
OPTIONAL = st.none() | TEXT
VALUES = st.dictionaries(IDS, st.none() | st.booleans() | st.integers() | TEXT, max_size=3)

# The two required fields whose alias differs go by alias: hypothesis reads pydantic's signature,
# which names them so, and would fill them in beside a snake-case keyword.
envelopes = st.builds(
    Envelope,
    integrationId=IDS,
    platform=st.sampled_from(["lark", "dingtalk", "wecom", "console"]),
    eventId=IDS,
    kind=st.sampled_from(["message", "action", "command", "schedule", "watch", "event"]),
    chat=st.builds(Chat, id=IDS, type=st.sampled_from(["p2p", "group"]), name=OPTIONAL),
    sender=st.builds(Sender, id=IDS, name=OPTIONAL, email=OPTIONAL, is_bot=st.booleans()),
    text=TEXT,
    mentions=st.lists(st.builds(Mention, id=IDS, name=OPTIONAL), max_size=2).map(tuple),
    bot_mentioned=st.booleans(),
    attachments=st.lists(
        st.builds(
            Attachment,
            kind=st.sampled_from(["image", "file", "audio", "video"]),
            key=IDS,
            size=st.none() | st.integers(0, 10**9),
        ),
        max_size=2,
    ).map(tuple),
    reply_to=st.none() | st.builds(ReplyTo, message_id=OPTIONAL),
    action=st.none() | st.builds(Action, id=IDS, value=VALUES, message_id=OPTIONAL),
    subject=st.none() | st.builds(Subject, source=IDS, key=IDS, final=st.booleans()),
    locale=OPTIONAL,
    raw=st.none() | VALUES,
)


@settings(max_examples=200, deadline=None)
@given(env=envelopes, store_raw=st.booleans())
def test_the_stored_form_is_pydantics_and_reads_back(env: Envelope, store_raw: bool) -> None:
    stored = env.to_json(store_raw=store_raw)
    kept = store_raw or env.raw is None
    options: dict[str, Any] = {"by_alias": True, "exclude_none": True}
    assert stored == env.model_dump_json(**options, **({} if kept else {"exclude": {"raw"}}))
    back = Envelope.from_json(stored)
    assert back == (env if kept else env.model_copy(update={"raw": None}))
    assert Envelope.from_json(stored.encode()) == back
    assert Envelope.from_json(back.model_dump(by_alias=True)) == back


def test_from_json_refuses_what_model_validate_refuses() -> None:
    with pytest.raises(ValidationError):
        Envelope.from_json('{"integrationId": "i", "platform": "p", "eventId": "e"}')
    with pytest.raises(ValidationError):
        Envelope.from_json({"integrationId": "i", "unknown": 1})
