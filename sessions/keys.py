"""The one key builder: every Redis key and channel the gateway uses is spelled here.

Everything one conversation touches shares the hash tag ``{<conversation>}`` so that the atomic
scripts (intake, claim, finish) address a single slot. The due index is the one global key those
scripts also touch; see ``due`` for why that is acceptable.
"""

from __future__ import annotations

from dataclasses import dataclass


def _tag_safe(value: str) -> str:
    # Braces would end the hash tag early; chat ids never contain them on the real platforms, but a
    # hostile console request could, so they are replaced rather than trusted.
    return value.replace("{", "(").replace("}", ")")


@dataclass(frozen=True, slots=True)
class KeyBuilder:
    """Builds keys as ``<prefix>:<part>:…`` with a per-conversation hash tag."""

    prefix: str = "xgw"
    sep: str = ":"

    def _k(self, *parts: str) -> str:
        return self.sep.join((self.prefix, *parts))

    # --- conversation-scoped (one hash tag each) -------------------------------------------
    def _conv(self, conv: str, part: str) -> str:
        return self._k("{" + _tag_safe(conv) + "}", part)

    def dedup(self, conv: str, event_id: str) -> str:
        return self._conv(conv, "dedup") + self.sep + event_id

    def burst(self, conv: str) -> str:
        return self._conv(conv, "burst")

    def burst_meta(self, conv: str) -> str:
        return self._conv(conv, "burstmeta")

    def turn(self, conv: str) -> str:
        return self._conv(conv, "turn")

    def lease(self, conv: str) -> str:
        return self._conv(conv, "lease")

    def binding(self, conv: str) -> str:
        return self._conv(conv, "binding")

    def cancel(self, conv: str) -> str:
        return self._conv(conv, "cancel")

    # --- global ----------------------------------------------------------------------------
    def due(self) -> str:
        """Sorted set of conversations with pending work, scored by when to look at them next.

        No TTL: it is an index whose members are removed when their work is done. It is shared by
        all conversations, so on Redis Cluster the scripts that touch it would need it sharded by
        slot; the gateway targets a standalone or replicated Redis.
        """
        return self._k("due")

    def session_record(self, session_id: str) -> str:
        return self._k("session", session_id)

    def session_variables(self, session_id: str) -> str:
        return self._k("session", session_id, "vars")

    def chat_sessions(self, integration_id: str, chat_id: str) -> str:
        return self._k("chat-sessions", _tag_safe(f"{integration_id}|{chat_id}"))

    def memory(self, integration_id: str, chat_id: str) -> str:
        return self._k("memory", _tag_safe(f"{integration_id}|{chat_id}"))

    def group_history(self, integration_id: str, chat_id: str) -> str:
        return self._k("group-history", _tag_safe(f"{integration_id}|{chat_id}"))

    def history(self, session_id: str) -> str:
        return self._k("history", session_id)

    def snapshot(self, digest: str) -> str:
        return self._k("snapshot", digest)

    def audit(self) -> str:
        return self._k("audit")

    def record(self, namespace: str, key: str) -> str:
        """An adapter's own record (``sessions.records``); every write there carries a TTL."""
        return self._k("rec", namespace, key)

    def replica(self, replica_id: str) -> str:
        return self._k("replica", replica_id)

    def control_channel(self) -> str:
        return self._k("ctl")

    # --- timeline (the console adapter's chat transcripts) ---------------------------------
    def timeline_messages(self, integration_id: str, chat_id: str) -> str:
        return self._k("{tl|" + _tag_safe(f"{integration_id}|{chat_id}") + "}", "msgs")

    def timeline_order(self, integration_id: str, chat_id: str) -> str:
        return self._k("{tl|" + _tag_safe(f"{integration_id}|{chat_id}") + "}", "order")

    def timeline_channel(self) -> str:
        return self._k("timeline")
