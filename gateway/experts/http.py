"""HTTP helpers shared by the remote experts: one client session each, readable errors."""

from __future__ import annotations

import aiohttp

from gateway.errors import GatewayError

STATUS_TEXT = {
    400: "the request was refused as invalid",
    401: "the API key was rejected",
    403: "the API key may not use this agent",
    404: "the agent or model was not found",
    408: "the request timed out",
    413: "the request was too large",
    429: "it is rate limited",
}


class ExpertHttpError(GatewayError):
    """A failed call, with a message fit for the user's card."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float = 0,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status  # the HTTP status, when the backend answered with one


async def error_for(response: aiohttp.ClientResponse, backend: str) -> ExpertHttpError:
    status = response.status
    detail = STATUS_TEXT.get(status, "it failed" if status < 500 else "it had a server error")
    retry_after = 0.0
    try:
        retry_after = float(response.headers.get("Retry-After", "0"))
    except ValueError:
        retry_after = 0.0
    return ExpertHttpError(
        f"{backend} could not answer: {detail} (HTTP {status}).",
        retryable=status == 429 or status >= 500,
        retry_after=retry_after,
        status=status,
    )
