"""Intake: the entry point every adapter hands its Envelopes to (docs/architecture.md), over the
chain of handlers (``gateway.intake.router``) the runtime builds in ONE order
(``gateway.runtime.intake``). The order, and why: (1) drop what is not for us (bots,
unmentioned group chatter) without touching Redis, unless a group watch takes the chatter
(gateway/triggers/watch_intake.py); (2) commands and Stop/New clicks act at once, since they
must not wait behind the running turn; (3) everything else is deduplicated and appended to its
conversation's burst in ONE Redis round trip, so that when ``ingest`` returns the adapter may
ack: the message is durable.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.conversation import ConversationId
from gateway.edge.ingest import IngestOutcome, IngestUnavailable, ShuttingDown
from gateway.envelope import Envelope
from gateway.intake.router import Incoming, Router
from gateway.logging import LOG_IDS
from sessions import STORE_FAILED

log = structlog.get_logger("gateway.intake")


class Pipeline:
    """Intake's entry point, over the chain the runtime built (``gateway.runtime.intake`` lists
    its handlers, in their order)."""

    def __init__(self, *, settings: Callable[[], Settings], router: Router) -> None:
        self._settings = settings  # read at each use: a reload replaces what it answers
        self.router = router
        self.accepting = True

    @property
    def settings(self) -> Settings:
        return self._settings()

    def conversation(self, integ: IntegrationBase, envelope: Envelope) -> str:
        return ConversationId.text_of(integ, envelope)

    async def ingest(self, envelope: Envelope) -> IngestOutcome:
        if not self.accepting:
            raise ShuttingDown("shutting down")
        # The event's ids on every line logged below (gateway.logging.LOG_IDS).
        ids = (("integration_id", envelope.integration_id), ("event_id", envelope.event_id))
        token = LOG_IDS.set(ids)
        try:
            outcome = await self._ingest(envelope)
            log.debug("ingested", status=outcome.status, reason=outcome.reason)
        except IngestUnavailable:
            raise
        except STORE_FAILED as exc:  # one exception for them all
            raise IngestUnavailable(str(exc)) from exc
        finally:
            LOG_IDS.reset(token)
        return outcome

    async def _ingest(self, env: Envelope) -> IngestOutcome:
        integ = self.settings.integration(env.integration_id)
        if integ is None or not integ.enabled:
            return IngestOutcome("ignored", "unknown or disabled integration")
        return await self.router.route(Incoming(env, integ, self._conversation_of(integ, env)))

    def _conversation_of(self, integ: IntegrationBase, env: Envelope) -> str:
        # A click belongs to the conversation of the card it was on (which may differ from the
        # clicker's own under chat_sender scope); the card put it in the button value.
        if env.kind == "action" and env.action is not None:
            card = ConversationId.parse(str(env.action.value.get("conversation") or ""))
            if card is not None and card.integration_id == integ.id and card.chat_id == env.chat.id:
                return str(card)
        return self.conversation(integ, env)
