"""``archive``: the long-term archive of finished turns, sessions and group memory in a real
database (gateway/archive/): PostgreSQL for deployments, an embedded SQLite file under
``dataDir`` by default; and the outbox in Redis that feeds it (sessions/outbox.py)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr

from gateway.config.model import GatewayModel

SQLITE_FILE = "archive.sqlite3"
# What archive.url may start with, and the driver SQLAlchemy reaches it through.
SCHEMES = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}


class ArchiveSettings(GatewayModel):
    enabled: bool = Field(
        True,
        description="Keep every finished turn, session and change of group memory in the "
        "archive database, past Redis' retention",
    )
    url: SecretStr | None = Field(
        None,
        description="postgresql://user:password@host:5432/db (asyncpg), or sqlite:///path; "
        "leave out for the embedded SQLite file dataDir/archive.sqlite3",
    )
    outbox_max_length: int = Field(
        100_000,
        ge=100,
        le=100_000_000,
        description="Entries the Redis outbox holds per integration while the database is "
        "away; past it new records are not archived (xgw_archive_dropped_total)",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        le=36_600,
        description="Archived turns, sessions and memory changes older than this are purged "
        "(daily); unset: kept until erased",
    )
    batch_size: int = Field(200, ge=1, le=5000, description="Entries written per transaction")
    lease_seconds: float = Field(
        15,
        ge=1,
        description="One replica archives at a time; another takes over within this long "
        "after it died",
    )
    connect_timeout_seconds: float = Field(
        10, gt=0, description="How long a start-up waits for the database before failing"
    )

    def problems(self) -> list[str]:
        """What is wrong with ``url``, as ``archive.url: reason`` lines (the URL never shown)."""
        if self.url is None:
            return []
        parts = urlsplit(self.url.get_secret_value())
        if parts.scheme not in SCHEMES:
            known = ", ".join(f"{s}://" for s in ("postgresql", "sqlite"))
            shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
            return [f"archive.url: expected {known}, not {shown}"]
        try:
            parts.port  # noqa: B018 - raises on a port that is no number
        except ValueError:
            return ["archive.url: the port is not a number from 1 to 65535"]
        if SCHEMES[parts.scheme].startswith("postgresql") and not parts.hostname:
            return ["archive.url: a PostgreSQL URL needs a host (postgresql://user@host/db)"]
        if SCHEMES[parts.scheme].startswith("sqlite") and not parts.path.strip("/"):
            return ["archive.url: a SQLite URL needs a file (sqlite:///path/to/archive.sqlite3)"]
        return []

    def database_url(self, data_dir: Path) -> str:
        """The SQLAlchemy URL: the configured one with its async driver, or the embedded file."""
        if self.url is None:
            return f"sqlite+aiosqlite:///{(data_dir / SQLITE_FILE).resolve()}"
        raw = self.url.get_secret_value()
        scheme, _, rest = raw.partition("://")
        return f"{SCHEMES[scheme]}://{rest}"

    def describe(self, data_dir: Path) -> str:
        """Where the archive is, for ``check`` and the logs: never the password."""
        if not self.enabled:
            return "off"
        if self.url is None:
            return f"embedded SQLite at {data_dir / SQLITE_FILE}"
        parts = urlsplit(self.url.get_secret_value())
        if SCHEMES.get(parts.scheme, "").startswith("sqlite"):
            return f"SQLite at {parts.path}"
        port = f":{parts.port}" if parts.port else ""
        return f"PostgreSQL at {parts.hostname}{port}{parts.path or '/'}"
