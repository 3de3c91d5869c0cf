"""Expert backends: one interface, ``run`` / ``resume`` yielding run events, ``cancel``; the kinds
are found by entry point (``xpert_gateway.experts``, see registry.py)."""

# Nothing is re-exported: importing any ``gateway.experts.*`` module runs this file first, and a
# re-export of the registry here made ``policy.bundles`` (which the registry imports) import
# itself half-built whenever it was imported before ``gateway.experts``.
