"""Turns: claiming a conversation's turn, binding it to its session, building its context,
driving the expert's run into the card, and the kinds of turn (message, Retry, Confirm /
Reject, giving up). ``Runner`` is the entry point."""

from gateway.turns.context import merge_input
from gateway.turns.drive import ActiveRun, Handback
from gateway.turns.runner import Runner

__all__ = ["ActiveRun", "Handback", "Runner", "merge_input"]
