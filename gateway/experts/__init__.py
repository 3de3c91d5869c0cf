"""Expert backends: one interface, ``run`` / ``resume`` yielding run events, ``cancel``."""

from gateway.experts.base import Decision, Expert, TurnInput
from gateway.experts.registry import build_expert

__all__ = ["Decision", "Expert", "TurnInput", "build_expert"]
