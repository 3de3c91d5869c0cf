"""Bounded reading and parsing of what comes over HTTP (webhooks, the console API, long
connections' frames): the body within the app's size and time limits, UTF-8 only, JSON and XML
bounded in depth before any parser runs, forms bounded in fields. Each refusal is a
:class:`~gateway.errors.Refused` (a short 4xx), never a traceback."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, Protocol
from urllib.parse import parse_qsl

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from multidict import CIMultiDictProxy, MultiMapping

from gateway.errors import GatewayError, Refused

# The admin API's code for a body it cannot take, whatever the status (413, 408, 400, 415).
BAD_BODY = "bad_request"
MAX_DEPTH = 32  # nesting of any JSON or XML we parse; real payloads stay under ten
MAX_FIELDS = 100  # fields of a form body (application/x-www-form-urlencoded) we parse
_UTF8 = frozenset({"utf-8", "utf8"})
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH = {"[": 1, "{": 1, "]": -1, "}": -1}
_XML_SKIP = re.compile(r"<!\[CDATA\[.*?\]\]>|<!--.*?-->|<\?.*?\?>", re.DOTALL)
_XML_TAG = re.compile(r"<(/?)[^<>]*?(/?)>")


class BodyTimeout(GatewayError, TimeoutError):
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


def ascii_text(value: str | None, what: str, *, status: int = 401) -> str:
    """A header or query value an authentication check reads, "" when absent. aiohttp keeps a
    header's undecodable bytes as surrogates; a secret is ASCII, so anything else is refused
    before it reaches a compare or an ``encode()``."""
    if value is None:
        return ""
    if not value.isascii():
        raise Refused(status, f"{what}: not ASCII", code=BAD_BODY)
    return value


async def read_body(request: HttpRequest) -> bytes:
    """The whole body within the app's size limit, decoded by aiohttp (Content-Encoding)."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Refused(413, "body too large", code=BAD_BODY) from None
    except BodyTimeout:
        raise Refused(408, "body not received in time", code=BAD_BODY) from None
    except (HttpProcessingError, web.RequestPayloadError, ConnectionError) as exc:
        # e.g. "Content-Encoding: gzip" on a body that is not gzip
        raise Refused(400, f"body unreadable ({type(exc).__name__})", code=BAD_BODY) from None


def utf8(raw: bytes, what: str = "body") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, f"{what}: not UTF-8", code=BAD_BODY) from None


def utf8_charset(request: HttpRequest) -> None:
    """Every platform we serve sends UTF-8: a body declared in any other charset is refused."""
    charset = request.charset
    if charset is not None and charset.lower() not in _UTF8:
        raise Refused(400, "unsupported charset", code=BAD_BODY)


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
    """Parsed JSON, bounded in depth first; :class:`Refused` (400) for anything else.

    orjson parses (about 3x the stdlib on our payloads; issue 15) and is the stricter of the
    two: invalid UTF-8, lone surrogates (escaped or not), NaN/Infinity and a byte order mark are
    all refused, so no stored text can fail to encode later."""
    if not depth_ok(raw):
        if isinstance(raw, bytes):
            utf8(raw, what)  # "not UTF-8" says more than "nested too deeply" for such bytes
        raise Refused(400, f"{what}: nested too deeply", code=BAD_BODY)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if isinstance(raw, bytes):
            utf8(raw, what)
        if "surrogate" in str(exc):
            raise Refused(400, f"{what}: invalid unicode escape", code=BAD_BODY) from None
        raise Refused(400, f"{what}: not valid JSON", code=BAD_BODY) from None
    except RecursionError:  # orjson's own limit (1024) is far above MAX_DEPTH; kept for safety
        raise Refused(400, f"{what}: nested too deeply", code=BAD_BODY) from None


def json_object(raw: bytes | str, what: str = "body") -> dict[str, Any]:
    data = json_value(raw, what)
    if not isinstance(data, dict):
        raise Refused(400, f"{what}: expected a JSON object", code=BAD_BODY)
    return data


def xml_text(text: str, what: str = "body") -> str:
    """XML fit for a parser: no DTD (entities), nesting at most ``MAX_DEPTH``; else 400."""
    upper = text.upper()
    if "<!DOCTYPE" in upper or "<!ENTITY" in upper:
        raise Refused(400, f"{what}: XML with a DTD", code=BAD_BODY)
    tags = _XML_TAG.findall(_XML_SKIP.sub("", text))  # (closing "/", self-closing "/")
    steps = (0 if empty else -1 if end else 1 for end, empty in tags)
    if max(accumulate(steps), default=0) > MAX_DEPTH:
        raise Refused(400, f"{what}: nested too deeply", code=BAD_BODY)
    return text


def form_fields(raw: bytes, what: str = "body", max_fields: int = MAX_FIELDS) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body's fields, for a platform whose webhooks
    post forms (a JSON field inside goes through :func:`json_object` next). At most
    ``max_fields``, counted before parsing; each name once; UTF-8 before and after
    percent-decoding; else 400."""
    if raw.count(b"&") >= max_fields:
        raise Refused(400, f"{what}: too many form fields", code=BAD_BODY)
    text = utf8(raw, what)
    try:
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=max_fields)
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, f"{what}: not a valid form", code=BAD_BODY) from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise Refused(400, f"{what}: a form field given twice", code=BAD_BODY)
    return fields
