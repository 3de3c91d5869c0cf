"""Binding a turn to its session: route -> open a new session or continue the bound one ->
the session's typed config snapshot (docs/architecture.md, "Sessions": a config change applies to
new sessions)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.conversation import ConversationId
from gateway.envelope import Envelope
from gateway.policy.bundles import bundled
from gateway.policy.routing import named_expert, route
from gateway.turns.snapshot import SessionSnapshot, snapshot_of
from sessions import Claim, SessionRecords, SessionStore

log = structlog.get_logger("gateway.turns")


@dataclass(frozen=True)
class Session:
    id: str
    snapshot: SessionSnapshot
    thread_id: str | None  # the expert backend's conversation, kept as long as the session
    new: bool
    # The backend's conversation per identity its turns acted as (binding fields
    # ``thread:<key>``: a group whose turns act as their senders keeps one per user; issue 36).
    threads: dict[str, str] = field(default_factory=dict)


THREAD_FIELD = "thread:"


def threads_of(fields: Mapping[str, str]) -> dict[str, str]:
    """The binding's per-identity backend conversations (``thread:<key>`` fields)."""
    return {k[len(THREAD_FIELD) :]: v for k, v in fields.items() if k.startswith(THREAD_FIELD)}


class Binder:
    def __init__(
        self,
        *,
        store: SessionStore,
        records: SessionRecords,
        settings: Callable[[], Settings],
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.records = records
        self.settings = settings
        self.clock = clock
        self._stored: set[str] = set()  # snapshot digests known to be in Redis
        # Parsed snapshots by digest (content-addressed: what a digest names never changes), and
        # the current config's snapshot per (integration, expert, bundle) objects of a config.
        self._snapshots: dict[str, SessionSnapshot] = {}
        self._configs: dict[tuple[int, int, str, str], tuple[object, object, str, str]] = {}

    async def bind(
        self, claim: Claim, integ: IntegrationBase, last: Envelope, *, card: str
    ) -> Session:
        """Continue the conversation's session, or open one (after the idle timeout) with a
        snapshot of the current config; a turn resumed from a crashed replica keeps its own.
        ``card`` (the turn id the card's buttons carry) becomes the session's current card.
        A session the claim already continued (``claim.bound``) only needs its snapshot."""
        if claim.bound is not None:
            fields = claim.bound.fields
            snapshot = self._snapshots.get(fields.get("snapshot", ""))
            if snapshot is None:
                snapshot = await self._snapshot_of(integ, last, fields.get("snapshot"))
            return Session(
                id=claim.bound.session_id,
                snapshot=snapshot,
                thread_id=fields.get("threadId") or None,
                new=False,
                threads=threads_of(fields),
            )
        xpert_id, _text, digest = self._current(integ, last)
        known = claim.turn.get("session")
        if last.trigger is not None and last.trigger.xpert_id and not known:
            await self._switch_expert(claim.conversation, xpert_id)
        binding = await self.store.open_or_continue(
            conversation=claim.conversation,
            now_ms=self.clock(),
            timeout_ms=integ.session_timeout_seconds * 1000,
            new_session_id=uuid.uuid4().hex,
            xpert_id=xpert_id,
            snapshot_hash=digest,
            count_turn=not known,
            card=card,
        )
        session_id = known or binding.session_id
        snapshot = await self._snapshot_of(integ, last, binding.fields.get("snapshot", digest))
        if binding.state == "new":
            log.info("session opened", session_id=session_id, xpert_id=xpert_id)
            await self.records.opened(
                session_id,
                {
                    "conversation": claim.conversation,
                    "integrationId": integ.id,
                    "chatId": last.chat.id,
                    "chatType": last.chat.type,
                    "xpertId": xpert_id,
                    "senderId": last.sender.id,
                    "snapshot": snapshot.digest,
                    "scope": integ.session_scope,
                },
                at_ms=self.clock(),
                timeout_ms=integ.session_timeout_seconds * 1000,
            )
            defaults = {d.name: d.default for d in snapshot.declared if d.default is not None}
            defaults.update(snapshot.bundle_variables)  # the route's values win
            await self.records.apply_variables(
                integ.id,
                last.chat.id,
                session_id,
                [(name, "default", value) for name, value in defaults.items()],
            )
        return Session(
            id=session_id,
            snapshot=snapshot,
            thread_id=binding.fields.get("threadId") or None,
            new=binding.state == "new",
            threads=threads_of(binding.fields),
        )

    def _current(self, integ: IntegrationBase, last: Envelope) -> tuple[str, str, str]:
        """The expert this message routes to and the current config's snapshot of it (JSON and
        digest), computed once per distinct (integration, expert, bundle) of a config."""
        xpert_id = route(integ, last)
        settings = self.settings()
        expert = settings.expert(xpert_id)
        if expert is None:
            raise LookupError(f"expert {xpert_id!r} is not configured")
        # The route's access bundle (model, tools, variables) goes into the snapshot.
        kind = settings.expert_kinds.get(expert.kind)
        own = named_expert(integ, last) is None
        expert, bundle = bundled(integ.routes, last, expert, kind, own=own)
        key = (id(integ), id(expert), xpert_id, repr(bundle))
        cached = self._configs.get(key)
        if cached is None or cached[0] is not integ or cached[1] is not expert:
            if len(self._configs) > 256:  # a reload's old objects go
                self._configs.clear()
            text, digest = snapshot_of(integ, expert, xpert_id, bundle)
            cached = self._configs[key] = (integ, expert, text, digest)
        return xpert_id, cached[2], cached[3]

    async def _snapshot_of(
        self, integ: IntegrationBase, last: Envelope, digest: str | None
    ) -> SessionSnapshot:
        """The snapshot ``digest`` names: known here (content-addressed, so it never changes),
        the current config's, or the stored one; the current config's when the stored one is
        gone (or no digest was bound)."""
        if digest and (known := self._snapshots.get(digest)) is not None:
            return known
        _xpert_id, text, current = self._current(integ, last)
        snapshot = None
        if digest and digest != current:
            snapshot = await self.snapshot(digest)
        if snapshot is None:  # the current config (or the bound one is gone)
            snapshot = SessionSnapshot.parse(text, current)
            if current not in self._stored:
                await self.store.put_snapshot(current, text)
                self._stored.add(current)
        if len(self._snapshots) > 1024:
            self._snapshots.clear()
        self._snapshots[snapshot.digest] = snapshot
        return snapshot

    async def _switch_expert(self, conversation: str, xpert_id: str) -> None:
        """A trigger (schedule, watch) that names its expert: a session going on with another
        expert ends, so the turn opens one with the named expert."""
        bound = await self.store.binding(conversation)
        if bound.get("sessionId") and bound.get("xpertId") != xpert_id:
            await self.store.end_session(conversation)
            log.info("session ended: the trigger names another expert", xpert_id=xpert_id)
            await self.store.audit(
                {
                    "event": "session.end",
                    "session": bound["sessionId"],
                    "conversation": conversation,
                    "at": self.clock(),
                    "by": "trigger",
                }
            )
            parsed = ConversationId.parse(conversation)
            if parsed is not None:
                at = self.clock()
                await self.records.ended(
                    parsed.integration_id, bound["sessionId"], at_ms=at, by="trigger"
                )

    async def snapshot(self, digest: str) -> SessionSnapshot | None:
        stored = await self.store.get_snapshot(digest)
        return SessionSnapshot.of(json.loads(stored), digest) if stored else None
