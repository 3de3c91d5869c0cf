"""What every request meets before its route: a deadline on its body, and for the console and
the admin API (``/console``, ``/v1.0``) the checks that keep other web sites out (issue 25).

- **Body deadline** (every route): a body not received in full ``server.bodyTimeoutSeconds``
  after its head is a 408 and the connection is closed (a slow-loris body holds nothing longer).
  The head itself and an idle keep-alive connection are aiohttp's ``keepalive_timeout``
  (``server.keepAliveSeconds``): a connection with no complete head that long after it opened or
  after its last answer is closed.
- **Host** (console and admin): loopback names, ``server.publicUrl``'s host and
  ``server.allowedHosts``, else 421, so a page that rebinds its own name to 127.0.0.1 (DNS
  rebinding) reads nothing. Webhooks are exempt: platforms reach them through publicUrl and
  proxies that may pass any Host on, and a signature, not the Host, is what authenticates them.
- **Cross-site** (console and admin APIs): an ``Origin`` that is not the gateway's own, or
  ``Sec-Fetch-Site`` other than ``same-origin``/``none``, is a 403 (the page and its static
  files are not refused: a link from elsewhere may open them).
- **JSON writes** (console and admin APIs): a POST, PUT or PATCH, or any request with a body,
  must be ``Content-Type: application/json`` (415): a browser sends no such request to another
  origin without asking first (CORS preflight), which the gateway never grants.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.config.server import ServerSettings
from gateway.edge.body import BodyTimeout

log = structlog.get_logger("gateway.http")

_WRITES = frozenset({"POST", "PUT", "PATCH"})
_SAME_SITE = frozenset({"same-origin", "none"})  # Fetch Metadata: the page itself, or typed
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None]:
    """A Host header (or an Origin's netloc) as lower-case name without a trailing dot, and
    port; ("", None) for what is no host."""
    try:
        parts = urlsplit(f"//{value.strip()}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return "", None
    return (name or "").rstrip(".").lower(), port


def is_loopback(name: str) -> bool:
    """``localhost`` (and ``*.localhost``, which browsers resolve to loopback themselves, RFC
    6761), 127.0.0.0/8 and ::1."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def public_host(server: ServerSettings) -> str | None:
    return split_host(urlsplit(server.public_url).netloc)[0] or None if server.public_url else None


def host_allowed(name: str, server: ServerSettings) -> bool:
    if not name:
        return False
    if is_loopback(name) or name == public_host(server):
        return True
    for entry in server.allowed_hosts:
        allowed = entry.strip().rstrip(".").lower()
        if allowed == "*" or name == allowed:
            return True
        if allowed.startswith(".") and (name.endswith(allowed) or name == allowed[1:]):
            return True
    return False


def same_origin(origin: str, host: str, server: ServerSettings) -> bool:
    """Whether an ``Origin`` is the gateway's own: the request's Host (scheme aside: a proxy in
    front may end TLS), publicUrl's host, or an allowed host."""
    parts = urlsplit(origin)
    if parts.scheme not in _DEFAULT_PORTS:
        return False  # "null" (a sandboxed frame, a file), or no web origin at all
    name, port = split_host(parts.netloc)
    origin_port = port or _DEFAULT_PORTS[parts.scheme]
    host_name, host_port = split_host(host)
    if name == host_name and (
        origin_port == host_port or (host_port is None and origin_port in (80, 443))
    ):
        return True
    return name == public_host(server) or any(
        name == h.strip().rstrip(".").lower() for h in server.allowed_hosts if h.strip() != "*"
    )


def _guarded(path: str) -> tuple[bool, bool]:
    """(Host checked, API checks) for a path: the console and the admin API, not webhooks."""
    if path.startswith("/v1.0/") or path == "/v1.0":
        return True, True
    if path == "/console" or path.startswith("/console/"):
        return True, path.startswith("/console/api/")
    return False, False


def refusal(request: web.Request, status: int, code: str, reason: str) -> web.Response:
    """A short JSON refusal in the answer format of the route's API, and one log line."""
    log.info("request refused", status=status, reason=code, method=request.method,
             path=request.path)  # fmt: skip
    if request.path.startswith("/v1.0"):  # the admin API's envelope (gateway/ops/admin.py)
        return web.json_response({"success": False, "code": code, "msg": reason}, status=status)
    return web.json_response({"error": reason}, status=status)


def check(request: web.Request, server: ServerSettings) -> web.Response | None:
    """The console's and the admin API's refusal of this request, or None."""
    host_checked, api = _guarded(request.path)
    if not host_checked:
        return None
    host = request.headers.get("Host", "")
    if not host_allowed(split_host(host)[0], server):
        return refusal(
            request, 421, "host_not_allowed", "Host not allowed: see server.allowedHosts"
        )
    if not api:
        return None
    origin = request.headers.get("Origin")
    site = request.headers.get("Sec-Fetch-Site")
    if (origin is not None and not same_origin(origin, host, server)) or (
        site is not None and site.lower() not in _SAME_SITE
    ):
        return refusal(request, 403, "cross_site", "cross-site request refused")
    if (request.method in _WRITES or request.body_exists) and (
        request.content_type != "application/json"
    ):
        return refusal(
            request, 415, "unsupported_media_type", "Content-Type must be application/json"
        )
    return None


def _deadline(request: web.Request, seconds: float) -> asyncio.TimerHandle | None:
    """Fail the body's reads with :class:`BodyTimeout` if it is not all in by the deadline."""
    content = request.content
    if not request.body_exists or content.is_eof():
        return None

    def expire() -> None:
        if not content.is_eof():
            content.set_exception(BodyTimeout(f"body not received within {seconds:g} s"))

    return asyncio.get_running_loop().call_later(seconds, expire)


def guard(server: Callable[[], ServerSettings]) -> Middleware:
    """The middleware (``server`` read per request: allowedHosts apply at a reload)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        settings = server()
        refused = check(request, settings)
        if refused is not None:
            return refused
        timer = _deadline(request, settings.body_timeout_seconds)
        try:
            response = await handler(request)
        except BodyTimeout:
            response = refusal(request, 408, "body_timeout", "request body not received in time")
        finally:
            if timer is not None:
                timer.cancel()
        if isinstance(request.content.exception(), BodyTimeout):
            response.force_close()  # the rest of a body that came too slowly is not waited for
        return response

    return middleware
