"""The HTTP front: the plainest webhook POSTs answered without aiohttp's request machinery, and
everything else handed to aiohttp, unchanged (issue 15).

aiohttp costs about 0.1 ms of CPU per webhook here (a ``Request``, its URL and headers objects,
the router, ``StreamResponse.prepare`` and its writer): a third of what the daemon spends on a
Lark event. The front is the listening socket's protocol. On a new connection it reads the first
request itself; when it is a POST to a *lean route* (``gateway.webhook.add_lean_route``) in the
plainest form —

- the request line ``POST <path> HTTP/1.1`` or ``POST <prefix><id> HTTP/1.1``, the id as
  integration ids are spelled (``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``), no query;
- ASCII header lines ``Name: value``, no name twice, within 8 KB in all;
- one ``Content-Length`` within the app's ``client_max_size``; no ``Transfer-Encoding``,
  ``Content-Encoding``, ``Expect`` or ``Upgrade``; ``Connection`` absent, ``keep-alive`` or
  ``close``; ``Content-Type`` absent or ``application/json`` with at most ``charset=utf-8``

— it calls the route's handler (the same ``Webhook.handle`` aiohttp's router calls) with a
:class:`LeanRequest` and writes the answer, one request at a time, so pipelined answers keep
their order. The first request that is anything else (another path or method, a chunked or
compressed body, an oversized one, a header it does not take, bytes it does not parse) hands the
connection, with every byte not yet answered, to aiohttp's own ``RequestHandler``, which serves
it from then on as it serves every other connection: its parser, its refusals (400, 413, 404),
its routes. So the front answers only what aiohttp would answer the same way, and a request it
does not understand still gets aiohttp's answer.

The front is used only while the app has no middlewares and no ``on_response_prepare`` signal
(which it would skip). A lean connection idle for aiohttp's keep-alive timeout is closed, as
aiohttp closes its own; at shutdown idle connections close at once and busy ones after their
answer (within ``SHUTDOWN_S``).
"""

from __future__ import annotations

import asyncio
import re
import time
from email.utils import formatdate
from typing import Any, cast

import structlog
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy, MultiDict, MultiDictProxy

from gateway.webhook import LEAN_ROUTES, LeanHandler, Routes

log = structlog.get_logger("gateway.http")

_Parsed = tuple["LeanRequest", int, LeanHandler, bool]  # request, body size, handler, close after

MAX_HEAD = 8190  # the request line and headers together (aiohttp's per-line limit)
KEEPALIVE_S = 3630.0  # aiohttp's default keepalive_timeout
SHUTDOWN_S = 10.0  # how long shutdown waits for the answers being made
_ID = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NAME = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 token
_FIELDS = re.compile(rf"(?:{_NAME}:[ \t]*[\t\x20-\x7e]*\r\n)*")  # every line Name: ASCII
_JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8"})
_REFUSED = frozenset({"transfer-encoding", "content-encoding", "expect", "upgrade"})
_EMPTY_QUERY: MultiDictProxy[str] = MultiDictProxy(MultiDict())


class LeanRequest:
    """What a lean route's handler reads of its request (``gateway.webhook.HttpRequest``)."""

    __slots__ = ("body", "charset", "headers", "match_info", "path", "query")

    def __init__(
        self, path: str, match: dict[str, str], headers: CIMultiDict[str], ctype: str | None
    ) -> None:
        self.path = path
        self.match_info = match
        self.headers = CIMultiDictProxy(headers)
        # as aiohttp reads it: the parameter's value as sent (ctype is one of _JSON_TYPES)
        self.charset = ctype.rpartition("=")[2] if ctype and "=" in ctype else None
        self.query = _EMPTY_QUERY
        self.body = b""

    async def read(self) -> bytes:
        return self.body


class Front:
    """The lean routes of one app and the connections the front still serves itself."""

    def __init__(self, server: web.Server, routes: Routes, max_body: int):
        self.server = server
        self.routes = routes
        self.max_body = max_body
        self.connections: set[FrontProtocol] = set()
        self.closing = False
        self._date = (0, b"")
        self.keepalive = KEEPALIVE_S  # an idle lean connection is closed after this long
        self.heads: dict[tuple[int, tuple[tuple[str, str], ...]], bytes] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    def __call__(self) -> asyncio.Protocol:  # the protocol factory for loop.create_server
        return FrontProtocol(self)

    def head(self, status: int, reason: str, fields: tuple[tuple[str, str], ...]) -> bytes:
        """An answer's status line and headers up to ``Content-Length: `` (kept for the next
        answer of the same status and headers: the usual answers are a handful)."""
        lines = [b"HTTP/1.1 %d %s" % (status, reason.encode("latin-1"))]
        lines += [f"{k}: {v}".encode("latin-1") for k, v in fields if k.lower() != "content-length"]
        head = b"\r\n".join([*lines, b"Content-Length: "])
        if len(self.heads) < 64:
            self.heads[(status, fields)] = head
        return head

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._date[0]:
            self._date = (now, formatdate(now, usegmt=True).encode())
        return self._date[1]

    def opened(self, conn: FrontProtocol) -> None:
        self.connections.add(conn)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._every(), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        idle_since = asyncio.get_running_loop().time() - self.keepalive
        for conn in list(self.connections):
            if conn.task is None and conn.seen < idle_since:
                conn.close()
        if self.connections:
            self._sweeper = asyncio.get_running_loop().call_later(self._every(), self._sweep)

    def _every(self) -> float:
        return min(60.0, self.keepalive / 2)

    async def close(self, within: float) -> None:
        """Shutdown: idle connections close now, busy ones once answered (within ``within`` s)."""
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        busy = [c.task for c in self.connections if c.task is not None]
        for conn in list(self.connections):
            if conn.task is None:
                conn.close()
        if busy:
            await asyncio.wait(busy, timeout=within)
        for conn in list(self.connections):
            conn.close()


class FrontProtocol(asyncio.Protocol):
    """One connection: lean until its first request the front does not take, then aiohttp's."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.inner: asyncio.Protocol | None = None  # aiohttp's RequestHandler, once handed over
        self.buf = b""
        self.task: asyncio.Task[None] | None = None  # the request being answered
        self.seen = 0.0  # loop time of the last bytes received (idle connections are closed)
        self.eof = False
        self.paused = False

    # --- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.seen = asyncio.get_running_loop().time()
        self.front.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
            return
        self.buf = self.buf + data if self.buf else data
        if self.task is None:
            self.seen = asyncio.get_running_loop().time()
            self._next()
        elif len(self.buf) > MAX_HEAD + self.front.max_body and not self.paused:
            assert self.transport is not None
            self.transport.pause_reading()  # pipelined far ahead: wait for the answer first
            self.paused = True

    def eof_received(self) -> bool | None:
        if self.inner is not None:
            return self.inner.eof_received()
        self.eof = True
        return True if self.task is not None else None  # keep the socket to answer first

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.inner.connection_lost(exc)
            return
        self.front.connections.discard(self)
        self.transport = None  # a request being answered finishes; its answer is dropped

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def close(self) -> None:
        self.front.connections.discard(self)
        if self.transport is not None:
            self.transport.close()

    # --- requests ------------------------------------------------------------------------------
    def _next(self) -> None:
        """Start answering the next buffered request, or hand the connection over."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n", 0, MAX_HEAD)
        if end < 0:
            # Not (yet) a whole head: what cannot become a lean request goes to aiohttp at once
            # (it answers bytes that are no request, an over-long head, another route its way).
            if len(buf) >= MAX_HEAD or not self._may_be_lean(buf):
                self._hand_over()
            elif self.eof and self.transport is not None:
                self.close()  # the peer sent half a request and left
            return
        parsed = self._parse(buf, end)
        if parsed is None:
            self._hand_over()
            return
        request, size, handler, close = parsed
        start = end + 4
        if len(buf) < start + size:
            return  # the rest of the body is on its way
        self.buf = buf[start + size :]
        request.body = buf[start : start + size]
        self.task = asyncio.get_running_loop().create_task(self._answer(handler, request, close))

    def _may_be_lean(self, buf: bytes) -> bool:
        if not buf.startswith(b"POST /"[: len(buf)]):
            return False
        line = buf.find(b"\r\n")
        if line < 0:
            return True
        return self._route(buf[5:line].rpartition(b" ")[0]) is not None

    def _route(self, target: bytes) -> tuple[str | None, LeanHandler, int] | None:
        """The lean route ``target`` is for: its parameter, handler and where the parameter's
        value starts in ``target``; None when it is none of them."""
        route = self.front.routes.get(target)  # an exact path
        if route is not None and route[0] is None:
            return None, route[1], len(target)
        cut = target.rfind(b"/") + 1  # else the prefix of <prefix>{param}
        route = self.front.routes.get(target[:cut])
        if route is None or route[0] is None or _ID.fullmatch(target, cut) is None:
            return None
        return route[0], route[1], cut

    def _parse(self, buf: bytes, end: int) -> _Parsed | None:
        """The request's parts when the front takes it as it is; None to hand it over."""
        line = buf.find(b"\r\n")
        method, _, rest = buf[:line].partition(b" ")
        target, _, version = rest.partition(b" ")
        if method != b"POST" or version != b"HTTP/1.1":
            return None
        route = self._route(target)
        if route is None:
            return None
        try:  # the header lines, checked by one regular expression (C, not a loop per line)
            block = buf[line + 2 : end + 2].decode("ascii")
        except UnicodeDecodeError:
            return None
        if _FIELDS.fullmatch(block) is None:
            return None
        # Each line is "token:value" now, so the first colon splits it.
        lines = (line.partition(":") for line in block[:-2].split("\r\n"))
        pairs = [(name, value.strip(" \t")) for name, _, value in lines]
        fields = {name.lower(): value for name, value in pairs}
        if len(fields) != len(pairs) or not _REFUSED.isdisjoint(fields):
            return None  # a name twice, or a framing or encoding the front leaves to aiohttp
        length = fields.get("content-length", "")
        ctype = fields.get("content-type")
        connection = fields.get("connection", "keep-alive").lower()
        if (
            not (length.isdigit() and len(length) <= 12 and int(length) <= self.front.max_body)
            or (ctype is not None and ctype.lower() not in _JSON_TYPES)
            or connection not in ("keep-alive", "close")
        ):
            return None
        param, handler, cut = route
        path = target.decode("ascii")
        match = {} if param is None else {param: path[cut:]}
        request = LeanRequest(path, match, CIMultiDict(pairs), ctype)
        return request, int(length), handler, connection == "close"

    async def _answer(self, handler: LeanHandler, request: LeanRequest, close: bool) -> None:
        try:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = exc
            except Exception:  # as aiohttp: a 500 and the traceback in the log
                log.exception("error handling request", path=request.path)
                response = web.Response(status=500, text="500 Internal Server Error")
            close = close or self.front.closing
            self._write(response, close)
        except Exception:  # an answer that cannot be written: the connection goes
            log.exception("lean answer not written", path=request.path)
            close = True
            self.close()
        finally:
            self.task = None
        if self.transport is None or close:  # close: asked for, closing, or a failed write
            return
        self.seen = asyncio.get_running_loop().time()
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        if self.buf:
            self._next()
        elif self.eof:
            self.close()

    def _write(self, response: web.StreamResponse, close: bool) -> None:
        if self.transport is None:
            return
        body = response.body if isinstance(response, web.Response) else None
        if not isinstance(body, bytes):  # a streamed answer: not what a lean route gives
            log.error("lean route answered without a body", type=type(response).__name__)
            response, body = web.Response(status=500), b"500 Internal Server Error"
        fields = tuple(response.headers.items())
        head = self.front.heads.get((response.status, fields))
        if head is None:
            head = self.front.head(response.status, response.reason, fields)
        end = b"\r\nConnection: close\r\n\r\n" if close else b"\r\n\r\n"
        self.transport.write(
            b"%s%d\r\nDate: %s%s%s" % (head, len(body), self.front.date(), end, body)
        )
        if close:
            self.close()

    def _hand_over(self) -> None:
        """From now on aiohttp serves this connection, starting with the bytes not answered."""
        if self.task is not None or self.transport is None:
            return  # after the answer being made (``_answer`` calls ``_next`` again)
        self.front.connections.discard(self)
        inner = self.inner = self.front.server()
        inner.connection_made(self.transport)
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        buf, self.buf = self.buf, b""
        if buf:
            inner.data_received(buf)
        if self.eof:
            inner.eof_received()


def lean_routes(app: web.Application) -> Routes:
    """The app's lean routes, or none when something would run that the front skips."""
    routes: Routes = app.get(LEAN_ROUTES, {})
    if app.middlewares or len(app.on_response_prepare) or not routes:
        return {}
    return routes


class FrontSite(web.SockSite):
    """``web.SockSite`` with the front as the protocol (a plain SockSite without lean routes)."""

    __slots__ = ("front",)

    def __init__(self, runner: web.AppRunner, sock: Any) -> None:
        super().__init__(runner, sock)
        assert runner.server is not None
        routes = lean_routes(runner.app)
        size = runner.app._client_max_size
        self.front = Front(runner.server, routes, size) if routes else None

    async def start(self) -> None:
        if self.front is None:
            await super().start()
            return
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self.front, sock=self._sock, backlog=self._backlog)

    async def stop(self) -> None:
        await super().stop()
        if self.front is not None:
            await self.front.close(within=SHUTDOWN_S)
