"""``redis``: which Redis the gateway keeps its state in, and how the settings fit together
(``redis.mode`` standalone | sentinel | cluster; ``check`` reports what does not, one
``redis.<key>: reason`` line each, the URL never shown)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, PrivateAttr, SecretStr

from gateway.config.model import GatewayModel


def _host_port(value: str) -> str:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, not {value!r}")
    return value


class RedisSettings(GatewayModel):
    mode: Literal["standalone", "sentinel", "cluster"] = Field(
        "standalone",
        description="standalone: one server (url, or the embedded one); sentinel: the master "
        "the sentinels name; cluster: a Redis Cluster (url names any node)",
    )
    url: SecretStr | None = Field(
        None,
        description="redis:// or unix:// URL; leave out to run the embedded Redis. cluster: "
        "redis:// or rediss:// of any node. sentinel: optional, only the master's user, password, "
        "database and TLS (redis://:PASSWORD@/0, rediss://…)",
    )
    sentinels: list[Annotated[str, AfterValidator(_host_port)]] = Field(
        default_factory=list, description="mode sentinel: the sentinels, as host:port"
    )
    master_name: str | None = Field(
        None, description="mode sentinel: the name the sentinels monitor the master under"
    )
    key_prefix: str = Field("xgw", pattern=r"^[A-Za-z0-9_.-]{1,32}$")
    connect_timeout_seconds: float = Field(
        30, gt=0, description="How long start-up retries an unreachable Redis before failing"
    )

    # Where ``url`` came from when the file named none: "REDIS_URL" (config.file.redis_from_env).
    _url_from: str | None = PrivateAttr(None)

    @property
    def url_from(self) -> str | None:
        """The environment variable ``url`` was taken from, or None when the file set it."""
        return self._url_from

    @property
    def embedded(self) -> bool:
        """Whether the gateway runs its own Redis (standalone mode without a URL)."""
        return self.mode == "standalone" and self.url is None

    def problems(self) -> list[str]:
        """What does not fit together, as ``redis.<key>: reason`` lines (the URL never shown)."""
        out: list[str] = []
        url = urlsplit(self.url.get_secret_value()) if self.url else None
        if self.mode != "sentinel":
            for key, value in (("sentinels", self.sentinels), ("masterName", self.master_name)):
                if value:
                    out.append(f"redis.{key}: only used with mode sentinel (mode is {self.mode})")
        if self.mode == "sentinel":
            if not self.sentinels:
                out.append("redis.sentinels: mode sentinel needs the sentinels, as host:port")
            if not self.master_name:
                out.append(
                    "redis.masterName: mode sentinel needs the name the sentinels monitor "
                    "(the <name> of 'sentinel monitor <name> …')"
                )
            if url is not None and (url.scheme not in ("redis", "rediss") or url.hostname):
                out.append(
                    "redis.url: with mode sentinel the sentinels name the master, and the URL only "
                    "carries its password, database and TLS, without a host: "
                    "redis://:PASSWORD@/0 (or rediss://)"
                )
        if self.mode == "cluster":
            if url is None:
                out.append(
                    "redis.url: mode cluster needs the URL of a cluster node (redis:// or "
                    "rediss://, any node): the embedded Redis is a single server"
                )
            elif url.scheme not in ("redis", "rediss"):
                out.append(
                    f"redis.url: mode cluster is reached over TCP (redis:// or rediss://), "
                    f"not {url.scheme}://"
                )
            elif not url.hostname:
                out.append("redis.url: mode cluster needs a node's host (and port)")
            elif url.path.strip("/") not in ("", "0"):
                out.append(
                    f"redis.url: a cluster has only database 0 (the URL names "
                    f"{url.path.strip('/')!r})"
                )
        return out
