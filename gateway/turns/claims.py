"""This replica's claims of turns: what one claim sends and what claim.lua's reply means, the
turns this replica runs (``active``), and the claim that rides along with a message's intake.

One ``Claims``, shared by the runner (its claims and follow-up claims), the flusher (its room)
and intake, through ``RidingClaims``: a local message due at once (window 0) has its turn
claimed by its own intake call when there is room here - one round trip from the webhook to the
turn (issue 15) - and the runner starts the turn, or the flusher reads the shard.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.turns.drive import ActiveRun
from gateway.turns.prefetch import ContextPrefetch, Prefetched
from sessions import Claim, ClaimRequest, SessionRecords, SessionStore


def acts_as_sender(settings: Settings, integ: IntegrationBase | None) -> bool:
    """Whether a group turn of this integration acts as its sender (an expert it uses runs each
    sender as their own backend user, ``Expert.acts_as_sender``): then a turn takes one sender's
    messages, and a steer goes only into the same sender's run (issue 36)."""
    if integ is None:
        return False
    for expert_id in {integ.xpert_id, *(r.xpert_id or integ.xpert_id for r in integ.routes)}:
        expert = settings.expert(expert_id)
        kind = settings.expert_kinds.get(expert.kind) if expert is not None else None
        if expert is not None and kind is not None and kind.acts_as_sender(expert):
            return True
    return False


class Claims:
    def __init__(
        self,
        *,
        store: SessionStore,
        settings: Callable[[], Settings],
        replica_id: str,
        records: SessionRecords,
        max_runs: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self._settings = settings  # read at each use: a reload replaces what it answers
        self.replica_id = replica_id
        self.max_runs = max_runs
        self.clock = clock
        self.prefetch = ContextPrefetch(records)  # context reads sent with the claim
        self.active: dict[str, ActiveRun] = {}  # the turns this replica runs now
        self.riding: dict[str, ClaimRequest] = {}  # claims sent with an intake, not yet answered
        self.made = 0  # claims that started a turn here (the flusher's and those that rode)
        self.closed = False  # shutting down (the flusher stopped, or the runner hands back)

    # --- one claim ---------------------------------------------------------------------------
    def request(self, conversation: str) -> tuple[ClaimRequest, Prefetched | None]:
        """What a claim of ``conversation`` sends, and its context reads when they can go along
        (started now: call it in the tick that sends the claim, just before it)."""
        # The conversation's integration (its id leads the conversation id) gives the session's
        # idle timeout, so the claim can continue the session in the same call.
        settings = self._settings()
        integ_id, _, scope = conversation.partition("|")
        integ = settings.integration(integ_id)
        token = os.urandom(22).hex()  # as random as two uuid4s, at a fifth of their cost
        request = ClaimRequest(
            owner=f"{self.replica_id}:{token[:12]}",
            turn_id=token[12:],
            now_ms=self.clock(),
            lease_ms=int(settings.runtime.lease_seconds * 1000),
            session_timeout_ms=integ.session_timeout_seconds * 1000 if integ else 0,
            split_by_sender=scope[:6] == "group:" and acts_as_sender(settings, integ),
        )
        # Its context reads go along when its last turn ran here (not where the turn also reads
        # the group's recent messages): the claim is queued first, the reads right after it.
        grouped = integ is not None and integ.history_context_limit and scope[:6] == "group:"
        return request, None if grouped else self.prefetch.start(conversation)

    def read(
        self,
        conversation: str,
        request: ClaimRequest,
        prefetched: Prefetched | None,
        reply: list[Any],
    ) -> Claim | None:
        """The claim ``reply`` (claim.lua's) to ``request``: the turn now owned, or None."""
        claim = Claim.of_reply(conversation, request.owner, reply)
        if claim is not None and prefetched is not None:
            self.prefetch.hold(claim.turn_id, prefetched)
        return claim

    async def claim(self, conversation: str) -> Claim | None:
        """Take the conversation's due turn (or a crashed replica's): one claim round trip."""
        request, prefetched = self.request(conversation)
        reply = await self.store.claim_reply(conversation, request)
        return self.read(conversation, request, prefetched, reply)

    # --- room --------------------------------------------------------------------------------
    def room(self) -> int:
        """How many more turns may start here (those running and those on their way count)."""
        return self.max_runs - len(self.active) - len(self.riding)

    def close(self) -> None:
        """No claim rides with an intake any more (shutdown)."""
        self.closed = True


class Ride:
    """One intake's riding claim, a context around the intake call: ``request`` goes with the
    call (None: no claim rides), ``reply`` is claim.lua's answer the call brought back (None:
    the message was not due at once, or the call failed). On leaving, the answer is acted on;
    ``tried`` then says whether the claim was tried (its turn started here, or its shard left to
    the flusher's next look) - when not, the caller wakes the flusher as usual."""

    __slots__ = ("_owner", "conversation", "prefetched", "reply", "request", "tried")

    def __init__(
        self,
        owner: RidingClaims | None,
        conversation: str,
        request: ClaimRequest | None = None,
        prefetched: Prefetched | None = None,
    ) -> None:
        self._owner = owner
        self.conversation = conversation
        self.request = request
        self.prefetched = prefetched
        self.reply: list[Any] | None = None
        self.tried = False

    def __enter__(self) -> Ride:
        return self

    def __exit__(self, *_: object) -> None:
        if self._owner is not None:
            self._owner.answered(self)


class RidingClaims:
    """The claim that rides along with a message's intake, and who acts on its answer: built by
    the runtime once the runner and the flusher are (``start``: the runner starts a claimed
    turn; ``missed``: the claim was tried and took nothing - another's lease, nothing left - so
    the flusher reads the conversation's shard instead)."""

    def __init__(
        self, claims: Claims, *, start: Callable[[Claim], object], missed: Callable[[str], None]
    ) -> None:
        self.claims = claims
        self._start = start
        self._missed = missed

    def rides(self, conversation: str) -> bool:
        """Whether a claim would ride with an intake of ``conversation`` now: not when there is
        no room here, the conversation's turn runs here (or is being claimed), or this replica
        is shutting down."""
        claims = self.claims
        return (
            not claims.closed
            and conversation not in claims.active
            and conversation not in claims.riding
            and claims.room() > 0
        )

    def ride(self, conversation: str) -> Ride:
        """A claim of ``conversation`` to send with its intake when there is room (else a ride
        without one): ``with rides.ride(conv) as ride: ride.reply = (await intake(ride.request))
        .claimed``."""
        if not self.rides(conversation):
            return Ride(None, conversation)
        request, prefetched = self.claims.request(conversation)
        self.claims.riding[conversation] = request
        return Ride(self, conversation, request, prefetched)

    def answered(self, ride: Ride) -> None:
        """Act on the answer the intake brought back: start the claimed turn, or have the
        conversation's shard read."""
        claims, conversation, request = self.claims, ride.conversation, ride.request
        if request is not None and claims.riding.get(conversation) is request:
            del claims.riding[conversation]
        if request is None or ride.reply is None:
            return
        ride.tried = True
        claim = claims.read(conversation, request, ride.prefetched, ride.reply)
        if claim is None:  # another's lease, or nothing left: its shard is read instead
            self._missed(conversation)
        else:
            self._start(claim)
            claims.made += 1
