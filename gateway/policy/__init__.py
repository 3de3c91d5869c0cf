"""Policy: what a chat may do - its route (which expert), its access bundle (model, tools,
variables) and its budgets (their models are ``config``'s)."""
