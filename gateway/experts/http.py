"""HTTP helpers shared by the remote experts: one client session each, readable errors."""

from __future__ import annotations

from urllib.parse import urlsplit

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


def where(url: str) -> str:
    """``url`` as a message may show it: scheme, host, port and path, without a user, password
    or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def unreachable(backend: str, url: str, exc: BaseException) -> ExpertHttpError:
    """The error of a backend that could not be reached at ``url``, naming the URL tried and
    the connection's own error (``Connect call failed …``, a name that does not resolve)."""
    reason = str(exc).strip() or type(exc).__name__
    return ExpertHttpError(
        f"{backend} could not be reached at {where(url)} ({type(exc).__name__}: {reason})."
    )


def user_error(exc: BaseException, backend: str, url: str) -> str:
    """What the card says of a failed call: the error's own words, or that ``url`` could not be
    reached."""
    if isinstance(exc, ExpertHttpError):
        return str(exc)
    return str(unreachable(backend, url, exc))


async def probe_get(
    backend: str,
    url: str,
    headers: dict[str, str],
    timeout_s: float = 10,
    post: dict[str, object] | None = None,
) -> tuple[int, object]:
    """``GET url`` (``POST`` of the JSON ``post`` when given: a search that runs nothing) for a
    probe: its status and JSON body (None when not JSON); a connection that fails is
    :func:`unreachable`, a status of 400 or more :func:`error_for`."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(headers=headers, timeout=timeout) as http,
            http.get(url) if post is None else http.post(url, json=post) as resp,
        ):
            if resp.status >= 400:
                refused = await error_for(resp, backend)
                raise ExpertHttpError(f"{where(url)}: {refused}", status=resp.status)
            try:
                body: object = await resp.json(content_type=None)
            except ValueError:
                body = None
            return resp.status, body
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise unreachable(backend, url, exc) from exc
