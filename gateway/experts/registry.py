"""Build an expert backend from its settings."""

from __future__ import annotations

from gateway.experts.base import Expert
from gateway.experts.echo import EchoExpert
from gateway.settings import EchoExpertSettings, ExpertSettings


def build_expert(settings: ExpertSettings) -> Expert:
    if isinstance(settings, EchoExpertSettings):
        return EchoExpert(settings=settings)
    raise ValueError(f"unsupported expert kind {settings.kind!r}")  # pragma: no cover
