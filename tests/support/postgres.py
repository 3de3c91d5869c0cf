"""PostgreSQL for the archive's tests: ``$DATABASE_URL`` (default: the machine's server at
127.0.0.1:5432, user postgres, trust auth; ``./dev.sh test`` starts one in a temporary
directory when none answers). Each test gets a database of its own, dropped afterwards; and a
TCP proxy in front of the server, which a test closes and opens again to make the database
unreachable and reachable while the gateway runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def server_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_URL


def with_database(url: str, name: str, *, port: int | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if port is not None:
        netloc = netloc.rsplit(":", 1)[0] if ":" in netloc.rsplit("@", 1)[-1] else netloc
        netloc = f"{netloc}:{port}"
    return urlunsplit((parts.scheme, netloc, f"/{name}", "", ""))


@contextlib.asynccontextmanager
async def own_database() -> AsyncIterator[str]:
    """A new, empty database on the test server: its URL; dropped at the end."""
    admin = server_url()
    name = f"xgw_test_{uuid.uuid4().hex[:12]}"
    try:
        conn = await asyncpg.connect(admin, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        raise RuntimeError(
            f"no PostgreSQL at $DATABASE_URL ({urlsplit(admin).hostname}:"
            f"{urlsplit(admin).port}): {exc}; ./dev.sh test starts one"
        ) from exc
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield with_database(admin, name)
    finally:
        conn = await asyncpg.connect(admin, timeout=10)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to the server; :meth:`close` refuses new connections and cuts
    the open ones (the database as a client sees a stopped server), :meth:`open` serves again
    on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted = 0

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # no new connections
        # Cut the open ones before waiting: from Python 3.12 ``wait_closed`` waits for every
        # connection the server accepted to end (CPython gh-79033).
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)  # cut by close() from now on
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            self._writers.discard(writer)
            return
        if self._server is None or writer.transport.is_closing():  # closed meanwhile
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers.add(up_writer)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._writers -= {writer, up_writer}
