"""The keys of the session audit trail (sessions/audit.py), a part of the one key builder:
:class:`sessions.keys.KeyBuilder` takes them from :class:`AuditKeys`, so they are spelled here and
nowhere else.

Every key of an integration's audit trail carries the integration's id as its hash tag, so
the one script that stores a turn's record, indexes it and trims the oldest (audit_put.lua)
and every read (audit_page.lua) address one slot, on a cluster as on a single server. The
price: one integration's trail lives on one primary - one script call and a few KB per turn,
bounded by audit.maxRecords and audit.retentionDays - while different integrations spread.
Every key gets the retention as its TTL on each write; entries are trimmed on write.
"""

from __future__ import annotations

from sessions.key_ids import id_part


class AuditKeys:
    """An integration's audit trail keys: ``<prefix>:audit:{<integration>}:<part>``."""

    __slots__ = ()
    prefix: str
    sep: str

    def _audit(self, integration_id: str, *parts: str) -> str:
        return self.sep.join((self.prefix, "audit", "{" + id_part(integration_id) + "}", *parts))

    def audit_records(self, integration_id: str) -> str:
        """The integration's audit records: record id -> JSON."""
        return self._audit(integration_id, "records")

    def audit_ends(self, integration_id: str) -> str:
        """Every record id of the integration, scored by when its turn ended."""
        return self._audit(integration_id, "ends")

    def audit_chat(self, integration_id: str, chat_id: str) -> str:
        """The record ids of one chat, scored by end."""
        return self._audit(integration_id, "chat", id_part(chat_id))

    def audit_session(self, integration_id: str, session_id: str) -> str:
        """The record ids of one session, scored by end (its turns in order)."""
        return self._audit(integration_id, "session", id_part(session_id))

    def audit_outcome(self, integration_id: str, outcome: str) -> str:
        """The record ids of one outcome (done, error, …), scored by end."""
        return self._audit(integration_id, "outcome", id_part(outcome))

    def audit_sessions(self, integration_id: str) -> str:
        """The integration's sessions, scored by their last activity."""
        return self._audit(integration_id, "sessions")

    def audit_session_info(self, integration_id: str) -> str:
        """Session id -> JSON summary (chat, expert, turns, outcomes, last activity)."""
        return self._audit(integration_id, "session-info")

    def audit_events(self, integration_id: str) -> str:
        """The integration's event stream: one short row per turn that ran to its end, added by
        the script that stores the turn's record (bounded by MAXLEN, and the retention as TTL)."""
        return self._audit(integration_id, "events")

    def audit_outbox(self, integration_id: str) -> str:
        """What the archive has yet to commit (sessions/outbox.py): no TTL, bounded by
        ``archive.outboxMaxLength``; an entry leaves once the database committed it."""
        return self._audit(integration_id, "outbox")
