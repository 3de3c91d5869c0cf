"""The base of every platform API client: one pooled HTTP session, the access token cached
under a lock, each HTTP exchange counted (:class:`ApiCalls`, ``/metrics``), and the retry of
rate limits, server errors and a refused token - all in :meth:`PlatformApi.exchange`, the one
place a platform call is made. A platform's client says, through its hooks, how a token is fetched,
how its answers name an error and which errors are retried after how long; its errors subclass
``gateway.errors.PlatformApiError`` and say ``rate_limited`` / ``retry_after`` themselves.
Also: how a failure that came from a platform API is logged (one line, no traceback)."""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import aiohttp
import structlog

from gateway.edge.call_budget import CallBudget
from gateway.edge.downloads import RedirectRefused
from gateway.errors import PlatformApiError

__all__ = ["NO_ANSWER", "ApiCalls", "PlatformApi", "log_failure", "platform_refusal"]

NO_ANSWER = (aiohttp.ClientError, TimeoutError)  # the request got no answer at all
T = TypeVar("T")

log = structlog.get_logger("gateway.edge.platform_api")


class ApiCalls(Protocol):
    """Counts an adapter's platform API calls for ``/metrics``: one call per HTTP exchange, a
    retry included. ``endpoint``: a fixed short name per API method (``reply``, ``patch``, never
    a URL with ids in it); ``code``: ``ok``, or the platform's error code, or ``http_<status>``,
    or the exception's name when no answer came."""

    def __call__(self, endpoint: str, code: str, seconds: float) -> None: ...


Send = Callable[[str | None], Awaitable[T]]


class PlatformApi(abc.ABC):
    """One integration's client of one platform's API.

    ``exchange(endpoint, send)`` runs ``send(token)`` - one HTTP request and the reading of its
    answer, which returns the result or raises the platform's ``PlatformApiError`` - with the
    token, the counting, the app's platform budget (``budget``: each exchange waits for its
    turn; a throttle answer pauses it for every replica) and the retries around it.
    ``attempts``: exchanges per call at most (a token refreshed once does not count);
    ``retries``: how many were made (tests, metrics). ``chat_endpoints``: the APIs that send a
    message into a chat, held to the platform's per-chat limit.
    """

    platform: ClassVar[str]
    chat_endpoints: ClassVar[frozenset[str]] = frozenset()
    budget: CallBudget | None = None

    def __init__(
        self,
        *,
        base_url: str,
        observe: ApiCalls | None,
        timeout_s: float,
        attempts: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.base = base_url.rstrip("/")
        self.observe = observe
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.attempts = attempts
        self.clock = clock
        self.sleep = sleep
        self.retries = 0
        self._http: aiohttp.ClientSession | None = None
        self._token: tuple[str, float] | None = None  # (token, valid until on ``clock``)
        self._token_lock = asyncio.Lock()

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self.timeout)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    # --- hooks -----------------------------------------------------------------------------
    @abc.abstractmethod
    async def fetch_token(self) -> tuple[str, float]:
        """A new access token and the seconds it may be used from now (its expiry less a
        margin, so a token never expires in flight)."""

    @abc.abstractmethod
    def label(self, error: PlatformApiError) -> str:
        """The metrics' code of a refused exchange: the platform's code, else ``http_<n>``."""

    def token_refused(self, error: PlatformApiError) -> bool:
        """Whether ``error`` says the token was refused (fetched again once, then retried)."""
        return False

    def retryable(self, error: PlatformApiError) -> bool:
        """Whether the exchange is worth trying again: by default when rate limited."""
        return error.rate_limited

    def throttle_scope(self, error: PlatformApiError) -> Literal["api", "chat", "app"]:
        """What a rate-limit answer paused: the API (default), one chat, or the whole app."""
        return "api"

    @abc.abstractmethod
    def backoff(self, retry: int, error: PlatformApiError) -> float:
        """Seconds to wait before retry number ``retry`` (0 first), after ``error``."""

    # --- the token ---------------------------------------------------------------------------
    async def token(self, *, refresh: bool = False) -> str:
        """The cached token, or a new one when it ran out (or ``refresh``), fetched under a
        lock so concurrent calls fetch it once."""
        async with self._token_lock:
            if self._token and not refresh and self.clock() < self._token[1]:
                return self._token[0]
            token, valid_s = await self.fetch_token()
            self._token = (token, self.clock() + valid_s)
            return token

    # --- the one place a call is made ----------------------------------------------------------
    def count(self, endpoint: str, code: str, began: float) -> None:
        if self.observe is not None:
            self.observe(endpoint, code, time.perf_counter() - began)

    async def exchange(
        self,
        endpoint: str,
        send: Send[T],
        *,
        auth: bool = True,
        attempts: int | None = None,
        metered: bool = True,
    ) -> T:
        """``send(token)`` (``None`` without ``auth``) until it answers, is refused for
        good or ``attempts`` ran out; each exchange is counted under ``endpoint`` and, unless
        not ``metered`` (the token's own fetch), waits for its turn under the budget. A request
        that got no answer, or a redirect refused, is counted and raised: not retried."""
        tries = attempts or self.attempts
        refreshed = False
        retry = 0
        budget = self.budget if metered else None
        chat_send = endpoint in self.chat_endpoints
        while True:
            token = await self.token() if auth else None
            if budget is not None:
                await budget.take(endpoint, chat_send=chat_send)
            began = time.perf_counter()
            try:
                result = await send(token)
            except PlatformApiError as error:
                self.count(endpoint, self.label(error), began)
                paused = False
                if budget is not None:
                    await budget.refused()
                    if error.rate_limited:
                        paused = await budget.throttled(
                            endpoint,
                            error.retry_after,
                            self.throttle_scope(error),
                            chat_send=chat_send,
                        )
                if auth and not refreshed and self.token_refused(error):
                    refreshed = True
                    log.info("access token refused; fetching another", platform=self.platform)
                    await self.token(refresh=True)
                    continue
                if not self.retryable(error) or retry + 1 >= tries:
                    raise
                # Under a budget, a throttled call's wait is the pause it just set.
                wait = 0.0 if paused else self.backoff(retry, error)
                retry += 1
                self.retries += 1
                log.info(
                    "platform api retry",
                    platform=self.platform,
                    endpoint=endpoint,
                    wait_s=round(wait, 3),
                    **error.log_fields(),
                )
                if wait > 0:
                    await self.sleep(wait)
                continue
            except RedirectRefused:
                self.count(endpoint, "redirect_refused", began)
                raise
            except NO_ANSWER as exc:
                self.count(endpoint, type(exc).__name__, began)
                raise
            self.count(endpoint, "ok", began)
            return result


# --- failures as the core logs them ------------------------------------------------------------
def platform_refusal(exc: BaseException) -> dict[str, Any] | None:
    """The log fields of the platform API error that ``exc`` is or was raised from (its cause
    or context chain, a few links deep), else None."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        if isinstance(seen, PlatformApiError):
            return {"error": type(seen).__name__, **seen.log_fields()}
        seen = seen.__cause__ or seen.__context__
    return None


def log_failure(logger: Any, event: str, exc: BaseException, **ids: Any) -> None:
    """``exc`` logged under ``event``: one warning with the platform's code when a platform API
    refused or did not answer (``platform_refusal``), else with its traceback."""
    refusal = platform_refusal(exc)
    if refusal is None:
        logger.exception(event, **ids)
    else:
        logger.warning(f"{event}: a platform API call failed", **ids, **refusal)
