"""``server`` and ``admin``: where the gateway listens, how long it waits for a request, which host
names its console and admin API answer to, and the admin API's token (docs/security.md)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.model import GatewayModel


def cpu_count() -> int:
    """The cores this process may run on (its CPU affinity, which a container's cpuset limits)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class ServerSettings(GatewayModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        1,
        description="Worker processes sharing the port (SO_REUSEPORT), each a full replica; "
        "auto: one per core. Above 1 a supervisor process starts and restarts them",
    )
    public_url: str | None = Field(None, description="Base URL the platforms reach us at")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="Request bodies above are 413")
    keep_alive_seconds: float = Field(
        15,
        gt=0,
        le=3600,
        description="A connection with no complete request head this long after it opened or "
        "after its last answer (idle keep-alive, or a head sent too slowly) is closed",
    )
    body_timeout_seconds: float = Field(
        10,
        gt=0,
        le=600,
        description="A request body not received in full this long after its head is a 408, "
        "and the connection is closed",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names (or IPs) besides loopback and publicUrl's host that the console "
        "and the admin API answer to; '.example.com' also takes its subdomains, '*' any host",
    )

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        """One message for a bad value, rather than one per member of the union."""
        if value == "auto":
            return value
        if isinstance(value, int | str) and not isinstance(value, bool):
            with contextlib.suppress(ValueError):
                if 1 <= int(value) <= 256:
                    return int(value)
        raise ValueError("a number of processes from 1 to 256, or auto")

    @field_validator("allowed_hosts")
    @classmethod
    def _bare_hosts(cls, value: list[str]) -> list[str]:
        """Host names compared without port or scheme: an entry with either would never match."""
        for entry in value:
            host = entry.strip().strip("[]")
            bare = host and not any(c in host for c in "/ @?#") and ":" not in host
            if not bare and not _is_ip(host):
                raise ValueError(
                    f"{entry!r}: a host name or IP without scheme or port "
                    "(e.g. gw.example.com, .example.com, 10.0.0.5, or * for any)"
                )
        return value

    def worker_count(self) -> int:
        return cpu_count() if self.workers == "auto" else self.workers


ADMIN_TOKEN_MIN = 16  # characters: a guessable or empty bearer token opens the admin API


class AdminSettings(GatewayModel):
    token: SecretStr | None = Field(
        None,
        description=f"Bearer token of the /v1.0 admin API (at least {ADMIN_TOKEN_MIN} "
        "characters); absent: the admin API is off",
    )

    def problems(self) -> list[str]:
        """A token that is empty, short or not sendable in a header (a model check, so the
        other keys' problems are reported with it)."""
        if self.token is None:
            return []
        text = self.token.get_secret_value()
        if not text.isascii() or not text.isprintable() or " " in text:
            return ["admin.token: printable ASCII without spaces, as it is sent in a header"]
        if len(text) < ADMIN_TOKEN_MIN:
            what = "empty" if not text else f"too short ({len(text)} characters)"
            return [
                f"admin.token: {what}: the admin token must be at least {ADMIN_TOKEN_MIN} "
                "characters (e.g. openssl rand -hex 24), or leave admin.token out to turn the "
                "admin API off"
            ]
        return []
