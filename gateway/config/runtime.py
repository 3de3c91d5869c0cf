"""The process-wide sections of the settings: ``runtime`` (leases, shards, bounds), ``logging``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.model import GatewayModel


class LoggingSettings(GatewayModel):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "console", "json"] = Field(
        "auto", description="auto: console format in a terminal, JSON otherwise"
    )


class RuntimeSettings(GatewayModel):
    lease_seconds: float = Field(
        15, ge=1, description="Run lease; a crashed replica's turn is resumed after it expires"
    )
    dedup_ttl_hours: float = Field(24, ge=8, description="How long an event id is remembered")
    shutdown_grace_seconds: float = Field(
        20, ge=0, description="On SIGTERM, runs get this long to finish before being handed back"
    )
    max_turn_attempts: int = Field(3, ge=1, description="A turn that crashed this often fails")
    max_concurrent_runs: int = Field(200, ge=1, description="Runs one replica executes at once")
    due_shards: int = Field(
        16,
        ge=1,
        le=1024,
        description="Conversations are spread over this many due shards (hash slots on a Redis "
        "Cluster); every replica on a keyPrefix must use the same number",
    )
    poll_interval_ms: int = Field(
        200, ge=10, le=5000, description="How often the flusher looks for work of other replicas"
    )
    connection_lease_seconds: float = Field(
        15,
        ge=1,
        description="Long connections (an adapter's WebSocket or stream to its platform) are "
        "held by one process of all; another takes over within this long after it died",
    )
    spool_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Bound of the local spool (dataDir/spool) that keeps long-connection events "
        "while Redis is unreachable; 0 turns it off",
    )
