"""A file server an agent's answer may link to (an expert's own origin, or a ``mediaHosts``
host): it serves what the test put there, redirects where the test says, and records every
request, so a test can tell what the gateway fetched and what it never asked for. Plain HTTP
semantics only (RFC 9110 redirects, Content-Type, Content-Disposition); nothing platform-made."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.helpers import serve


def png(width: int = 2, height: int = 2) -> bytes:
    """A real (tiny, grey) PNG: signature, IHDR, IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


PNG = png()
PDF = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


@dataclass
class FakeMediaHost:
    """``files``: path -> (body, Content-Type); ``redirects``: path -> Location (302);
    ``stall``: paths that never answer (until the test ends); ``hits``: paths asked for."""

    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)
    stall: set[str] = field(default_factory=set)
    hits: list[str] = field(default_factory=list)
    url: str = ""
    _never: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.get)
        return app

    async def get(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(request.path)
        if request.path in self.stall:
            await self._never.wait()
        if request.path in self.redirects:
            raise web.HTTPFound(self.redirects[request.path])
        if request.path not in self.files:
            raise web.HTTPNotFound()
        body, mime = self.files[request.path]
        return web.Response(body=body, headers={"Content-Type": mime})

    async def run(self) -> AsyncIterator[FakeMediaHost]:
        async for url in serve(self.app()):
            self.url = url
            try:
                yield self
            finally:
                self._never.set()  # a stalled request ends before the server does
