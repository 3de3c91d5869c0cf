"""The edge: what an adapter may import - the adapter contract, the stores and leases lent to it,
the webhook skeleton with bounded body parsing, and checked downloads."""
