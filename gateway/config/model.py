"""The base of every settings model: camelCase keys, unknown keys refused, frozen
(docs/architecture.md, "Configuration"), with the id pattern and the URL check several models share.
It imports nothing of ours, so that
every part of the settings can live in a module of its own."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from yarl import URL

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")  # a local fake's URL may be plain http

# An integration's, an expert's or a schedule's id: what paths, keys and URLs name it by.
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class GatewayModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def http_url(value: str) -> str:
    """A validator for base URLs: http(s) only, without the trailing slash."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


def media_host(entry: str) -> tuple[str | None, str, int]:
    """A ``mediaHosts`` entry (or an expert's own origin) as (scheme or None, host, port):
    ``files.example.com``, ``files.example.com:8443``, ``https://files.example.com``, or a
    local ``http://127.0.0.1:9000``. ValueError for anything else (a path, a query, plain http
    to a host that is not local)."""
    scheme = entry.split("://", 1)[0].lower() if "://" in entry else None
    try:
        url = URL(entry if scheme else f"https://{entry}")
    except ValueError:
        raise ValueError(f"not a host: {entry!r}") from None
    if url.scheme not in ("http", "https") or not url.host or url.path not in ("", "/"):
        raise ValueError(f"not a host or origin: {entry!r}")
    if url.query_string or url.fragment or url.user:
        raise ValueError(f"not a host or origin: {entry!r}")
    if url.scheme == "http" and url.host not in LOCAL_HOSTS:
        raise ValueError(f"plain http only to a local host: {entry!r}")
    return scheme, url.host.lower(), url.port or 443
