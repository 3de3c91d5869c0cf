"""Who may answer a turn's Confirm / Reject (or a routine's Confirm / Cancel), for adapters that
hand such buttons to each person privately."""

from __future__ import annotations

from gateway.config.bases import IntegrationBase
from gateway.config.route import route_of
from gateway.envelope import Envelope, asker_of

__all__ = ["answerers", "approvers_for"]


def approvers_for(integ: IntegrationBase, asked: Envelope) -> list[str]:
    """The approvers of the chat a question was asked in: those of the first route that holds
    for the interrupted turn's message (when it sets them), else the integration's."""
    matched = route_of(integ.routes, asked)
    if matched is not None and matched[1].approvers is not None:
        return matched[1].approvers
    return integ.approvers


def answerers(integ: IntegrationBase, asked: Envelope, *, routine: bool = False) -> list[str]:
    """Who may answer the Confirm / Reject of the turn ``asked`` started: its asker
    (``asker_of``), then the chat's approvers (gateway/turns/approval.py); with ``routine``, a
    routine's Confirm / Cancel: its asker, then the schedule admins (triggers/routines.py).
    Adapters that hand such buttons to each person privately (DingTalk's group links) send
    them to these."""
    asker = asked.sender.id if routine else asker_of(asked)
    others = integ.schedule_admins if routine else approvers_for(integ, asked)
    return list(dict.fromkeys([*([asker] if asker is not None else []), *others]))
