"""The conversation id (gateway/conversation.py): ``ConversationId.text_of`` - what intake
uses for every message - is ``str(ConversationId.of(...))`` for every session scope, and both
are the documented text form ``<integrationId>|<p2p|group>:<chatId>[:u:<senderId> |
:t:<thread>]`` with braces replaced; ``parse`` reads a brace-free form back."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.conversation import ConversationId
from gateway.envelope import Chat, Envelope, ReplyTo, Sender, Subject
from tests.support.helpers import id_encoded

IDS = st.text(min_size=1, max_size=30)
SCOPES = st.sampled_from(["chat", "chat_sender", "thread"])


@dataclass
class Integration:
    """The two fields a conversation id reads of an integration's settings."""

    id: str
    session_scope: str


@settings(max_examples=300, deadline=None)
@given(
    integration=IDS,
    scope=SCOPES,
    chat_id=IDS,
    chat_type=st.sampled_from(["p2p", "group"]),
    sender=IDS,
    thread_id=st.none() | IDS,
    reply_to=st.none() | IDS,
    subject=st.none() | st.tuples(IDS, IDS),
)
def test_text_of_is_the_ids_text_for_every_scope(
    integration: str,
    scope: str,
    chat_id: str,
    chat_type: str,
    sender: str,
    thread_id: str | None,
    reply_to: str | None,
    subject: tuple[str, str] | None,
) -> None:
    integ = Integration(integration, scope)
    env = Envelope(
        integration_id=integration,
        platform="console",
        event_id="e1",
        kind="event" if subject else "message",
        chat=Chat(id=chat_id, type=chat_type, thread_id=thread_id),  # type: ignore[arg-type]
        sender=Sender(id=sender),
        reply_to=ReplyTo(message_id=reply_to) if reply_to is not None else None,
        subject=Subject(source=subject[0], key=subject[1]) if subject else None,
    )
    enc = id_encoded
    head = f"{enc(integration)}|{chat_type}:{enc(chat_id)}"
    if subject:
        key = subject[1]  # the last part: it keeps its ":"
        expected = f"{head}:t:{enc(subject[0])}:{':'.join(enc(k) for k in key.split(':'))}"
    elif scope == "chat_sender":
        expected = f"{head}:u:{enc(sender)}"
    elif scope == "thread":
        expected = f"{head}:t:{enc(thread_id or reply_to or '-')}"
    else:
        expected = head
    text = ConversationId.text_of(integ, env)  # type: ignore[arg-type]
    assert text == str(ConversationId.of(integ, env)) == expected  # type: ignore[arg-type]
    parsed = ConversationId.parse(text)
    assert parsed is not None and str(parsed) == text
    assert (parsed.integration_id, parsed.chat_type, parsed.chat_id) == (
        integration,
        chat_type,
        chat_id,
    )
    if not subject and scope == "chat_sender":
        assert parsed.sender_id == sender
