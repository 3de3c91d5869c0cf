"""The one error tree of the gateway: every exception class of ``gateway/`` and ``adapters/``
derives from :class:`GatewayError` (``sessions/`` keeps its own small errors, as it imports
nothing of ours; where the core re-raises one of them it is as an error of this tree).

    GatewayError
    ├── Refused            an HTTP request answered with a 4xx (or 503) and nothing done
    ├── PlatformApiError   a platform API refused a call or gave no answer (one per platform)
    ├── ConfigError        the configuration cannot be used (``check`` prints it)
    └── …                  the rest, each next to the code that raises it

A class that must also be a builtin (``ValueError`` for pydantic validators, ``TimeoutError``
for aiohttp) takes both bases."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

__all__ = [
    "GatewayError",
    "PlatformApiError",
    "Refused",
    "each_problem",
    "first_problem",
    "unwatched",
]


def unwatched(future: asyncio.Future[Any]) -> None:
    """A done callback for a future nobody waits for any more (a read or a look-up left to
    finish): its error is retrieved, so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


class GatewayError(Exception):
    """The root of every error the gateway raises on purpose."""


class Refused(GatewayError):
    """A request answered with ``status`` (a 4xx, or 503) and nothing done or stored.

    ``reason`` is for the log and for people; ``public`` is the answer's text where it must say
    less than the log (a webhook tells a caller no more than it needs); ``code`` is the admin
    API's machine-readable ``code`` (``bad_request``, ``not_found`` …)."""

    def __init__(
        self, status: int, reason: str, *, public: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.public = reason if public is None else public
        self.code = code or _CODES.get(status, "refused")


_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
    503: "unavailable",
}


class PlatformApiError(GatewayError):
    """A platform API that refused a call or gave no answer (each adapter's API client raises a
    subclass). It is the platform's answer, not a bug in the gateway: the core logs it as one
    line with ``log_fields()`` (status, the platform's code), never with a traceback.

    ``rate_limited``: the platform said to slow down (Lark 99991400, DingTalk 403 QpsLimit /
    HTTP 429, WeCom 45009 / 45033 …); ``retry_after``: the seconds it asked for, when it said."""

    @property
    def rate_limited(self) -> bool:
        return False

    @property
    def retry_after(self) -> float | None:
        return None

    def log_fields(self) -> dict[str, Any]:
        return {}


def each_problem(
    exc: ValidationError, *, unknown: str = "unknown key", nowhere: str = ""
) -> list[str]:
    """Each problem of a pydantic ``ValidationError`` in one line: ``where: what``, with
    ``unknown`` (``unknown key``; the schedule and console APIs say ``unknown field``) for a key
    the model does not take, and ``nowhere`` as the ``where`` of a problem of the whole input
    (``""``: the problem alone)."""
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or nowhere
        msg = unknown if err["type"] == "extra_forbidden" else str(err["msg"])
        msg = msg.removeprefix("Value error, ")
        out.append(f"{where}: {msg}" if where else msg)
    return out


def first_problem(exc: ValidationError, *, unknown: str = "unknown key", nowhere: str = "") -> str:
    """The first of :func:`each_problem` (what an API answers a bad body with)."""
    return each_problem(exc, unknown=unknown, nowhere=nowhere)[0]
