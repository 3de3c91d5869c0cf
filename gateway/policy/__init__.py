"""Policy: what a chat may do - its route (expert), its access bundle and its budgets."""
