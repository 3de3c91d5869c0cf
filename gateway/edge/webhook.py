"""The one webhook skeleton every platform's HTTP intake runs through, with per-platform hooks.

Order, and why (DESIGN.md §1, §8.6; aiogram's ``BaseRequestHandler`` resolves the bot before it
feeds the update, Slack Bolt verifies the request before any listener sees it):
(1) the integration named in the path, else 404; (2) the platform's checks of what comes before
the body (headers, query), so a request signed in its headers is refused before its body is
read; (3) the body, read within ``server.maxBodyBytes`` (413) and decoded by aiohttp (a
``Content-Encoding`` that does not decode is a 400); (4) the platform verifies it (signature,
timestamp, decryption) and only then parses it, with JSON and XML bounded in depth before any
parser runs; (5) the payload becomes an Envelope, or an answer given without intake (URL checks,
stream refreshes), or nothing; (6) intake makes it durable: ``IngestUnavailable`` is a 503, so
the platform delivers it again; (7) the platform's answer.

A refusal is a short 4xx and one log line, never a traceback. Whatever a hook raises on input it
did not foresee (a signed payload of the wrong shape) is a 400 too, logged with its type: a
platform that resends on 5xx must never get the same poison message back forever. Only storage
trouble is a 5xx (503), at any step.
"""

from __future__ import annotations

import abc
import json
import logging
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy, MultiMapping

from gateway.edge.adapter import Adapter, IngestOutcome, StoreUnavailable
from gateway.envelope import Envelope

MAX_DEPTH = 32  # nesting of any JSON or XML we parse; real payloads stay under ten
_UTF8 = frozenset({"utf-8", "utf8"})
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH = {"[": 1, "{": 1, "]": -1, "}": -1}
_XML_SKIP = re.compile(r"<!\[CDATA\[.*?\]\]>|<!--.*?-->|<\?.*?\?>", re.DOTALL)
_XML_TAG = re.compile(r"<(/?)[^<>]*?(/?)>")

A = TypeVar("A", bound=Adapter)
P = TypeVar("P")


class Rejected(Exception):
    """A request answered with a short 4xx (or a 503) and nothing stored. ``reason`` goes to the
    log; ``public`` is the answer's text (the reason unless it says more than a caller needs)."""

    def __init__(self, status: int, reason: str, *, public: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.public = reason if public is None else public


class BodyTimeout(TimeoutError):
    """A request body that did not arrive in full within ``server.bodyTimeoutSeconds`` (raised
    by its reads; gateway/runtime/http_guard.py). A TimeoutError, as aiohttp takes it when it drains
    what is left of the body after the answer: the connection is then closed, quietly."""


class HttpRequest(Protocol):
    """What a webhook's hooks read of a request (``web.Request`` has it): the hooks need no
    more, so a test or a bench can hand them a request of its own."""

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def query(self) -> MultiMapping[str]: ...

    @property
    def match_info(self) -> Mapping[str, str]: ...

    @property
    def charset(self) -> str | None: ...

    async def read(self) -> bytes: ...


# --- bounded reading and parsing (also for the console API and long connections) -------------
def ascii_text(value: str | None, what: str, *, status: int = 401) -> str:
    """A header or query value an authentication check reads, "" when absent. aiohttp keeps a
    header's undecodable bytes as surrogates; a secret is ASCII, so anything else is refused
    before it reaches a compare or an ``encode()``."""
    if value is None:
        return ""
    if not value.isascii():
        raise Rejected(status, f"{what}: not ASCII")
    return value


async def read_body(request: HttpRequest) -> bytes:
    """The whole body within the app's size limit, decoded by aiohttp (Content-Encoding)."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Rejected(413, "body too large") from None
    except BodyTimeout:
        raise Rejected(408, "body not received in time") from None
    except (HttpProcessingError, web.RequestPayloadError, ConnectionError) as exc:
        # e.g. "Content-Encoding: gzip" on a body that is not gzip
        raise Rejected(400, f"body unreadable ({type(exc).__name__})") from None


def utf8(raw: bytes, what: str = "body") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected(400, f"{what}: not UTF-8") from None


def utf8_charset(request: HttpRequest) -> None:
    """Every platform we serve sends UTF-8: a body declared in any other charset is refused."""
    charset = request.charset
    if charset is not None and charset.lower() not in _UTF8:
        raise Rejected(400, "unsupported charset")


def body_text(request: HttpRequest, body: bytes) -> str:
    """The body as text (UTF-8, declared so or not at all)."""
    utf8_charset(request)
    return utf8(body)


def depth_ok(text: str | bytes, max_depth: int = MAX_DEPTH) -> bool:
    """Whether JSON ``text`` nests at most ``max_depth`` deep, without parsing it: strings are
    cut out, the brackets left are summed in C (itertools), so a hostile body costs one pass."""
    if isinstance(text, bytes):  # most payloads: no scan needed, and no decode either
        if text.count(b"[") + text.count(b"{") <= max_depth:
            return True
        text = text.decode("utf-8", "surrogateescape")
    if text.count("[") + text.count("{") <= max_depth:
        return True
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH.__getitem__, brackets)), default=0) <= max_depth


def utf8_safe(data: Any) -> bool:
    """Whether parsed JSON holds no lone surrogate (``"\\ud800"`` parses with the stdlib, but
    can never be stored or sent on)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_value(raw: bytes | str, what: str = "body") -> Any:
    """Parsed JSON, bounded in depth first; :class:`Rejected` (400) for anything else.

    orjson parses (about 3x the stdlib on our payloads; issue 15) and is the stricter of the
    two: invalid UTF-8, lone surrogates (escaped or not), NaN/Infinity and a byte order mark are
    all refused, so no stored text can fail to encode later."""
    if not depth_ok(raw):
        if isinstance(raw, bytes):
            utf8(raw, what)  # "not UTF-8" says more than "nested too deeply" for such bytes
        raise Rejected(400, f"{what}: nested too deeply")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if isinstance(raw, bytes):
            utf8(raw, what)
        if "surrogate" in str(exc):
            raise Rejected(400, f"{what}: invalid unicode escape") from None
        raise Rejected(400, f"{what}: not valid JSON") from None
    except RecursionError:  # orjson's own limit (1024) is far above MAX_DEPTH; kept for safety
        raise Rejected(400, f"{what}: nested too deeply") from None


def json_object(raw: bytes | str, what: str = "body") -> dict[str, Any]:
    data = json_value(raw, what)
    if not isinstance(data, dict):
        raise Rejected(400, f"{what}: expected a JSON object")
    return data


def xml_text(text: str, what: str = "body") -> str:
    """XML fit for a parser: no DTD (entities), nesting at most ``MAX_DEPTH``; else 400."""
    upper = text.upper()
    if "<!DOCTYPE" in upper or "<!ENTITY" in upper:
        raise Rejected(400, f"{what}: XML with a DTD")
    tags = _XML_TAG.findall(_XML_SKIP.sub("", text))  # (closing "/", self-closing "/")
    steps = (0 if empty else -1 if end else 1 for end, empty in tags)
    if max(accumulate(steps), default=0) > MAX_DEPTH:
        raise Rejected(400, f"{what}: nested too deeply")
    return text


# --- the skeleton ------------------------------------------------------------------------------
class Webhook(abc.ABC, Generic[A, P]):
    """One platform's webhook route; a subclass supplies the hooks, this class the order."""

    platform: ClassVar[str]

    def __init__(self, adapters: Mapping[str, A]) -> None:
        self.adapters = adapters  # a live view (LiveAdapters): reloads are served at once
        self.log = structlog.get_logger(f"adapters.{self.platform}")

    # --- hooks ---------------------------------------------------------------------------------
    def serves(self, adapter: A) -> bool:
        """Whether this route is one the integration uses (e.g. its connection mode)."""
        return True

    def check(self, adapter: A, request: HttpRequest) -> None:
        """Checks before the body is read (headers, query); raises :class:`Rejected`."""

    @abc.abstractmethod
    def verify(self, adapter: A, request: HttpRequest, body: bytes) -> P:
        """The verified, parsed payload (signature and decryption first); raises Rejected."""

    @abc.abstractmethod
    async def parse(self, adapter: A, payload: P) -> Envelope | web.StreamResponse | None:
        """The payload's Envelope; an answer given without intake; or None (nothing to do)."""

    async def answer(
        self, adapter: A, payload: P, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        """The platform's answer once intake stored (or skipped) the event."""
        return web.json_response({"status": outcome.status})

    def ignored(self, adapter: A, payload: P) -> web.StreamResponse:
        return web.Response(status=200, text="")

    def refusal(self, rejected: Rejected) -> web.StreamResponse:
        return web.json_response({"error": rejected.public}, status=rejected.status)

    # --- the order -----------------------------------------------------------------------------
    async def handle(self, request: HttpRequest) -> web.StreamResponse:
        integration_id = request.match_info.get("integrationId", "")
        adapter = self.adapters.get(integration_id)
        if adapter is None or not self.serves(adapter):
            return self._refuse(integration_id, Rejected(404, "unknown integration"))
        try:
            self.check(adapter, request)
            payload = self.verify(adapter, request, await read_body(request))
            parsed = await self.parse(adapter, payload)
            if parsed is None:
                return self.ignored(adapter, payload)
            if not isinstance(parsed, Envelope):
                return parsed
        except Rejected as exc:
            return self._refuse(integration_id, exc)
        except StoreUnavailable as exc:
            return self._refuse(integration_id, _unavailable(exc))
        except web.HTTPException:
            raise
        except Exception as exc:  # hostile input no hook foresaw: a 400, never a 500
            reason = f"unreadable request ({type(exc).__name__})"
            return self._refuse(integration_id, Rejected(400, reason, public="bad request"))
        try:
            outcome = await adapter.context.ingest(parsed)
            return await self.answer(adapter, payload, parsed, outcome)
        except StoreUnavailable as exc:  # IngestUnavailable and ShuttingDown included
            return self._refuse(integration_id, _unavailable(exc), event_id=parsed.event_id)

    def _refuse(self, integration_id: str, exc: Rejected, **ids: str) -> web.StreamResponse:
        level = self.log.warning if exc.status >= 500 else self.log.info
        level(
            f"{self.platform} request refused",
            integration_id=integration_id,
            status=exc.status,
            reason=exc.reason,
            **ids,
        )
        return self.refusal(exc)


def _unavailable(exc: StoreUnavailable) -> Rejected:
    return Rejected(503, f"not stored: {exc}", public="storage unavailable; retry")


# --- aiohttp's own refusals --------------------------------------------------------------------
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
