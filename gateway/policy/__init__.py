"""Policy: what a chat may do - its route (which expert), its access bundle (model, tools,
variables) and its budgets - and what the platform lets an app call (``platformLimits``)."""
