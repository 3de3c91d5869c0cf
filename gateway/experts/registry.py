"""Build an expert backend from its settings."""

from __future__ import annotations

from gateway.experts.base import Expert
from gateway.experts.echo import EchoExpert
from gateway.experts.openai import OpenAIExpert
from gateway.experts.xpert import XpertExpert
from gateway.settings import (
    AnyExpert,
    EchoExpertSettings,
    OpenAIExpertSettings,
    XpertExpertSettings,
)
from sessions import HistoryStore


def build_expert(settings: AnyExpert, *, history: HistoryStore | None = None) -> Expert:
    if isinstance(settings, EchoExpertSettings):
        return EchoExpert(settings=settings)
    if isinstance(settings, XpertExpertSettings):
        return XpertExpert(settings=settings)
    if isinstance(settings, OpenAIExpertSettings):
        if history is None:
            raise ValueError("the openai expert needs a history store")
        return OpenAIExpert(settings=settings, history=history)
    raise ValueError(f"unsupported expert kind {settings.kind!r}")  # pragma: no cover
