"""Turns: claiming a conversation's turn, binding it to its session, building its context,
driving the expert's run into the card, and the kinds of turn (message, Retry, Confirm /
Reject, giving up). ``Runner`` is the entry point."""

# The package re-exports nothing (``Runner`` is gateway.turns.runner's): importing one of its
# modules - the turn records, the audit record, as gateway/policy/budgets.py does for a refused
# turn - must not load the runner, which imports the budgets.
