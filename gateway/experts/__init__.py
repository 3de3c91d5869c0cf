"""Expert backends: one interface, ``run`` / ``resume`` yielding run events, ``cancel``; the kinds
are found by entry point (``xpert_gateway.experts``, see registry.py)."""

from gateway.experts.base import Expert, ExpertContext, TurnInput
from gateway.experts.registry import build_expert, discover_experts

__all__ = ["Expert", "ExpertContext", "TurnInput", "build_expert", "discover_experts"]
