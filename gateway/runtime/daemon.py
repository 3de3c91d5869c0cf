"""The process around a replica: its listening sockets (taken before anything starts, so a port
in use fails at once), the console URL in the start-up log, and signals: SIGTERM/SIGINT stop,
a second one ends the grace period, SIGHUP reloads the config. A worker of a supervisor
(``gateway.runtime.supervisor``) binds its own socket with ``SO_REUSEPORT``, tells the
supervisor when it listens, and stops as on SIGTERM when the supervisor is gone."""

from __future__ import annotations

import asyncio
import errno
import gc
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from gateway.config.errors import ConfigError
from gateway.config.settings import Settings
from gateway.errors import GatewayError
from gateway.runtime.app import Gateway

log = structlog.get_logger("gateway.runtime.daemon")


class StartupError(GatewayError):
    """The daemon cannot start (e.g. its port is in use); the message says why, for the user."""


def _listen_error(exc: OSError, address: Any, port: Any) -> StartupError:
    if exc.errno == errno.EADDRINUSE:
        return StartupError(
            f"port {port} is in use (on {address}): stop what listens there, "
            "or choose another port with --port"
        )
    return StartupError(f"cannot listen on {address} port {port}: {exc.strerror}")


def listen_sockets(host: str, port: int, *, reuse_port: bool = False) -> list[socket.socket]:
    """The server's sockets, bound before anything else starts: a port another process listens
    on is an error at once, with nothing (embedded Redis, adapters) to stop. One socket per
    address of ``host``, bound as ``loop.create_server`` binds them; they listen once the
    gateway is up (until then a connection is refused rather than left waiting).
    ``reuse_port``: the workers of one supervisor each bind the port (``SO_REUSEPORT``), and
    the kernel spreads new connections over the sockets that listen."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host!r}: {exc.strerror}") from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # e.g. no IPv6 in this container: as create_server, skip it
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise _listen_error(exc, address[0], port) from exc
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise StartupError(f"cannot listen on {host!r}: no usable address")
    return sockets


def console_url(settings: Settings, port: int) -> str | None:
    """Where to open the console (when one is configured), for the start-up log."""
    if not any(i.enabled and i.platform == "console" for i in settings.integrations):
        return None
    host = settings.server.host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/console/"


@dataclass(frozen=True)
class Worker:
    """This process as a supervisor's worker: its index, its end of the supervisor's link, and
    the embedded Redis the supervisor runs (when the config has no ``redis.url``)."""

    index: int
    link: socket.socket | None = None
    embedded_redis_url: str | None = None


def dump_tasks() -> None:
    """SIGUSR1: one log line per asyncio task with where it waits, innermost call last (what an
    operator sends a replica that seems stuck; code locations only, no message content)."""
    for task in asyncio.all_tasks():
        where: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(where) < 24:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:  # a future, or a finished coroutine
                where.append(type(awaited).__name__)
                break
            name = frame.f_code.co_filename.rsplit("/", 2)[-2:]
            where.append(f"{'/'.join(name)}:{frame.f_lineno} {frame.f_code.co_name}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        log.warning("task dump", task=task.get_name(), where=" -> ".join(where))


async def serve(
    settings: Settings,
    *,
    port: int | None = None,
    reload: Callable[[], Settings] | None = None,
    worker: Worker | None = None,
) -> None:
    """Run a replica until SIGTERM / SIGINT (a second one ends the grace period at once);
    SIGHUP re-reads the config through ``reload``. Whatever fails, what was started is stopped."""
    sockets = listen_sockets(
        settings.server.host,
        settings.server.port if port is None else port,
        reuse_port=worker is not None,
    )
    gateway = Gateway(
        settings=settings,
        worker=None if worker is None else worker.index,
        embedded_redis_url=None if worker is None else worker.embedded_redis_url,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    listening = asyncio.Event()
    starting = asyncio.create_task(gateway.start(), name="start")

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            gateway.force_stop()
            return
        stop.set()  # before the log line: stopping never depends on writing it
        starting.cancel()  # no effect once started; during start-up it closes what was opened
        log.info("stop signal received", signal=sig.name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    async def reread() -> None:
        await listening.wait()  # a SIGHUP during start-up reloads once started
        assert reload is not None
        try:
            new = await asyncio.to_thread(reload)
        except ConfigError as exc:
            log.error("configuration not reloaded: invalid", problems=exc.problems)
            return
        await gateway.reload(new)

    if reload is not None:
        loop.add_signal_handler(signal.SIGHUP, lambda: gateway.spawn(reread()))
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    link = worker.link if worker is not None else None
    if link is not None:
        _watch_supervisor(loop, link, lambda: on_signal(signal.SIGTERM))
    runner: web.AppRunner | None = None
    try:
        try:
            await starting
        except asyncio.CancelledError:
            if starting.cancelled() and stop.is_set():
                log.info("start-up interrupted; stopped")
                return
            raise
        runner = web.AppRunner(gateway.web_app(), handle_signals=False, access_log=None)
        await runner.setup()
        sites = [web.SockSite(runner, sock) for sock in sockets]
        for site, sock in zip(sites, sockets, strict=True):
            try:
                await site.start()
            except OSError as exc:  # another process took the port while we started
                raise _listen_error(exc, *sock.getsockname()[:2]) from exc
        # What start-up built (modules, settings, SDK classes) lives as long as the process:
        # moved out of the collector's reach, a full collection no longer walks it (a pause of
        # ~10 ms per 100k objects, otherwise paid every few thousand events).
        gc.collect()
        gc.freeze()
        log.info("listening", address=", ".join(site.name for site in sites))
        listening.set()
        url = console_url(settings, sockets[0].getsockname()[1])
        if url is not None and worker is None:  # a supervisor logs it once for its workers
            log.info("open the console", url=url)
        if link is not None:
            try:
                link.send(b"ready")
            except OSError:  # the supervisor is gone: the watch stops us
                pass
        await stop.wait()
    finally:
        if starting.done() and not starting.cancelled() and starting.exception() is None:
            await gateway.shutdown()
        if runner is not None:
            await runner.cleanup()
        for sock in sockets:
            sock.close()
        if link is not None:
            loop.remove_reader(link.fileno())
            link.close()


def read_link(link: socket.socket) -> bytes | None:
    """What the other end of a supervisor-worker link sent: None while nothing is there yet,
    b"" once it is gone (end of file or a broken link)."""
    try:
        return link.recv(64)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _watch_supervisor(
    loop: asyncio.AbstractEventLoop, link: socket.socket, stop: Callable[[], None]
) -> None:
    """The supervisor never writes to the link: when it is readable, the supervisor has gone
    (end of file), and a worker left alone stops rather than serve on unsupervised."""
    link.setblocking(False)

    def readable() -> None:
        data = read_link(link)
        if data is None or data:
            return
        loop.remove_reader(link.fileno())
        stop()
        log.warning("supervisor gone; stopping")

    loop.add_reader(link.fileno(), readable)
