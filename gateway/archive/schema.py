"""The archive's tables (SQLAlchemy Core), as the newest migration leaves them
(``gateway.archive.migrations``). Times are epoch milliseconds, as everywhere in the gateway;
JSON columns are ``jsonb`` on PostgreSQL and text on SQLite.

- ``turns``: one row per audit record (``gateway.turns.audit_record.AuditRecord``), keyed by
  its id (``<turnId>-<claim>``), with the columns a query filters on and the record itself.
- ``sessions``: one row per session, keyed by its id: where it ran, with which expert and
  config snapshot, when it opened, was last active and ended, its turns, its final answer and
  the artifacts its turns produced; its idle timeout, by which a session nobody ended gets
  ``ended_at`` = last active + timeout (``gateway.archive.ends``).
- ``memory_changes``: who remembered or forgot what in a chat's memory, and when.
- ``erasures``: which chat or sender was erased when, for a day (``gateway.archive.tombstones``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()
Json = JSON().with_variant(JSONB(), "postgresql")
ID = 200  # ids: integrations' and chats' (platform ids), sessions' (uuid hex), turns'

turns = Table(
    "turns",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("turn_id", String(ID), nullable=False),
    Column("integration_id", String(ID), nullable=False),
    Column("platform", String(40), nullable=False),
    Column("chat_id", String(ID), nullable=False),
    Column("chat_type", String(20), nullable=False),
    Column("conversation", Text, nullable=False),
    Column("session_id", String(ID), nullable=False),  # "": the turn failed before binding
    Column("sender_id", String(ID), nullable=False),
    Column("trigger_kind", String(20), nullable=False),
    Column("input_text", Text, nullable=False),
    Column("expert_id", String(ID)),
    Column("model", String(ID)),
    Column("input_tokens", BigInteger),
    Column("output_tokens", BigInteger),
    Column("cost", Float),
    Column("outcome", String(40), nullable=False),
    Column("error", Text, nullable=False),
    Column("answer", Text, nullable=False),
    Column("received_at", BigInteger, nullable=False),
    Column("finished_at", BigInteger, nullable=False),
    Column("replica", String(ID), nullable=False),
    Column("record", Json, nullable=False),  # the audit record as the admin API answers it
    Column("archived_at", BigInteger, nullable=False),
)
Index("turns_integration_finished", turns.c.integration_id, turns.c.finished_at)
Index("turns_chat_finished", turns.c.integration_id, turns.c.chat_id, turns.c.finished_at)
Index("turns_sender", turns.c.integration_id, turns.c.sender_id)
Index("turns_session", turns.c.session_id, turns.c.finished_at)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("integration_id", String(ID), nullable=False),
    Column("chat_id", String(ID), nullable=False),
    Column("chat_type", String(20)),
    Column("conversation", Text),
    Column("scope", String(20)),
    Column("xpert_id", String(ID)),
    Column("snapshot_hash", String(ID)),
    Column("sender_id", String(ID)),  # who opened it
    Column("opened_at", BigInteger),
    Column("last_active_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("ended_by", String(20)),  # user | admin | trigger | timeout (idle past timeout_ms)
    Column("turns", Integer, nullable=False, default=0),
    Column("last_outcome", String(40)),
    Column("final_text", Text),  # the answer of its newest turn
    Column("artifacts", Json, nullable=False),  # [{kind, url, name}] its turns produced
    Column("archived_at", BigInteger, nullable=False),
    Column("timeout_ms", BigInteger),  # v2: its sessionTimeoutSeconds when it opened
)
Index("sessions_integration_active", sessions.c.integration_id, sessions.c.last_active_at)
Index("sessions_chat", sessions.c.integration_id, sessions.c.chat_id)
Index("sessions_ended", sessions.c.ended_at)  # v2: the open ones, for the idle pass

memory_changes = Table(
    "memory_changes",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("integration_id", String(ID), nullable=False),
    Column("chat_id", String(ID), nullable=False),
    Column("action", String(20), nullable=False),  # remember | forget
    Column("by", String(ID)),  # the sender who asked
    Column("text", Text, nullable=False),
    Column("item", Json, nullable=False),
    Column("at", BigInteger, nullable=False),
    Column("archived_at", BigInteger, nullable=False),
)
Index("memory_changes_chat", memory_changes.c.integration_id, memory_changes.c.chat_id)

erasures = Table(  # v2: tombstones of erasures, kept a day (gateway.archive.tombstones)
    "erasures",
    metadata,
    Column("integration_id", String(ID), primary_key=True),
    Column("kind", String(20), primary_key=True),  # chat | sender
    Column("subject", String(ID), primary_key=True),  # the chat's or sender's id
    Column("erased_at", BigInteger, nullable=False),
)
