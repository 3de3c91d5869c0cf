"""aiohttp's server log, quieted for the requests aiohttp refuses itself: one line each, with
no traceback and none of the request's own bytes."""

from __future__ import annotations

import logging
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["ServerLog"]


class ServerLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger (``web.Application(handler_args={"logger": ...})``): a request
    aiohttp refuses itself (bad bytes in the URL, a duplicate Content-Type, an over-long header, a
    body whose Content-Encoding does not decode) is one line without a traceback; anything else
    is logged as aiohttp would."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.refusals = structlog.get_logger("gateway.http")

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError | web.RequestPayloadError):
            # The first words only: the rest may quote the request's own bytes.
            reason = str(getattr(exc, "message", exc)).split(":")[0].strip()[:80]
            if isinstance(exc, web.RequestPayloadError):  # a body the handler already refused
                self.refusals.debug("request body unreadable", reason=reason)
            else:
                self.refusals.info("bad HTTP request refused", status=400, reason=reason)
            return
        super().exception(msg, *args, **kwargs)
