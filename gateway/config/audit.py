"""``audit``: how long the session audit trail keeps each turn's record, and how many per
integration (gateway/turns/audit.py writes them, sessions/audit.py stores and trims them)."""

from __future__ import annotations

from pydantic import Field

from gateway.config.model import GatewayModel
from sessions.audit import AuditLimits

DAY_MS = 86_400_000


class AuditSettings(GatewayModel):
    retention_days: float = Field(
        7,
        gt=0,
        le=3660,
        description="A turn's audit record (and its session in the Sessions listing) is kept "
        "this long after the turn ended",
    )
    max_records: int = Field(
        100_000,
        ge=100,
        le=10_000_000,
        description="Audit records kept per integration; the oldest go first when a new one is "
        "written",
    )

    def limits(self, *, outbox_max: int = 0) -> AuditLimits:
        """``outbox_max``: the archive outbox's bound (0: no archive)."""
        return AuditLimits(
            retention_ms=int(self.retention_days * DAY_MS),
            max_records=self.max_records,
            outbox_max=outbox_max,
        )
