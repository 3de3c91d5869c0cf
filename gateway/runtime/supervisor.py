"""``server.workers`` above 1: a supervisor process and N worker processes sharing one port.

Each worker is a full replica (``run`` with a hidden worker index) that binds the port itself with
``SO_REUSEPORT``; the kernel spreads new connections over the workers' sockets. The supervisor
serves nothing. It checks the port is free (then keeps it bound, not listening, so nothing else
takes it while a worker restarts), starts the embedded Redis once (the workers connect to it),
starts the workers and restarts one that dies, with backoff. It forwards SIGTERM and SIGINT (a
second one too: the grace period ends) and SIGHUP (reload), and stops the embedded Redis after the
last worker ended. Workers that keep dying (``MAX_CRASHES`` within ``CRASH_WINDOW_S``) make it
stop the others and exit 1; so does a worker that cannot start before any worker ever started
(where a single process would have exited 1 with the same error).

Workers run in their own sessions, so a Ctrl-C in the terminal reaches the supervisor only, and
it forwards it once. Each worker holds one end of a socket pair: it writes ``ready`` once it
listens, and when the supervisor dies it reads end-of-file and stops as on SIGTERM.
"""

from __future__ import annotations

import collections
import contextlib
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import structlog

from gateway.config.settings import Settings
from gateway.runtime.daemon import console_url, listen_sockets, read_link
from sessions.connection import EmbeddedRedis

log = structlog.get_logger("gateway.runtime.supervisor")

MAX_CRASHES = 5  # unexpected worker exits within the window before the supervisor gives up
CRASH_WINDOW_S = 60.0
FIRST_BACKOFF_S = 0.5  # the restart delay doubles with each exit in the window
MAX_BACKOFF_S = 10.0
STOP_MARGIN_S = 30.0  # past the grace period, workers still running are killed
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass
class WorkerProcess:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    link: socket.socket | None = None  # the supervisor's end of the worker's socket pair
    ready: bool = False
    restart_at: float | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    def __init__(
        self, settings: Settings, *, config: str, workers: int, port: int | None = None
    ) -> None:
        self.settings = settings
        self.config = config
        self.port = settings.server.port if port is None else port
        self.workers = [WorkerProcess(i) for i in range(workers)]
        self.embedded: EmbeddedRedis | None = None
        self.redis_url: str | None = None
        self.stopping = False
        self.failed = False
        self.ever_ready = False  # a worker started once: later exits are crashes
        self.all_ready = False
        self.crashes: collections.deque[float] = collections.deque()
        self.kill_at: float | None = None
        self.selector = selectors.DefaultSelector()

    def run(self) -> int:
        """Start everything, supervise until stopped; the exit status (0, or 1 on giving up).
        Raises ``StartupError`` (port in use) or ``RedisStartupError`` before any worker."""
        host = self.settings.server.host
        # Free for us (a plain bind fails on any other listener, SO_REUSEPORT or not), then held
        # in the workers' SO_REUSEPORT group without listening: it takes no connection.
        probe = listen_sockets(host, self.port)
        self.port = probe[0].getsockname()[1]  # port 0: the one the kernel chose
        for sock in probe:
            sock.close()
        reserved = listen_sockets(host, self.port, reuse_port=True)
        wake_r, wake_w = socket.socketpair()
        old_handlers = {}
        try:
            # Signals only wake the loop (their numbers come through the socket pair); one that
            # arrives while the embedded Redis starts is handled before any worker is started.
            wake_r.setblocking(False)
            wake_w.setblocking(False)
            signal.set_wakeup_fd(wake_w.fileno())
            for sig in (*FORWARDED, signal.SIGCHLD):
                old_handlers[sig] = signal.signal(sig, lambda *_: None)
            self.selector.register(wake_r, selectors.EVENT_READ, None)
            if self.settings.redis.embedded:
                self.embedded = EmbeddedRedis(data_dir=self.settings.data_dir)
                self.redis_url = self.embedded.start()
            log.info("supervisor started", workers=len(self.workers), port=self.port)
            for worker in self.workers:
                worker.restart_at = time.monotonic()  # due: the loop starts it
            self._loop(wake_r)
        finally:
            for worker in self.workers:
                self._kill(worker)  # only ever something left by an exception
                self._unlink(worker)
            signal.set_wakeup_fd(-1)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            wake_r.close()
            wake_w.close()
            self.selector.close()
            if self.embedded is not None:
                self.embedded.stop()
            for sock in reserved:
                sock.close()
        log.info("supervisor stopped", failed=self.failed)
        return 1 if self.failed else 0

    # --- the loop ----------------------------------------------------------------------------
    def _loop(self, wake_r: socket.socket) -> None:
        while self.stopping is False or any(w.running for w in self.workers):
            for key, _ in self.selector.select(self._timeout()):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        for signum in wake_r.recv(64):
                            self._on_signal(signal.Signals(signum))
                else:
                    self._on_link(key.data)
            self._reap()
            now = time.monotonic()
            for worker in self.workers:
                if worker.restart_at is not None and worker.restart_at <= now:
                    self._spawn(worker)
            if self.kill_at is not None and now >= self.kill_at:
                for worker in self.workers:
                    if worker.running:
                        log.warning("worker did not stop in time; killing it", worker=worker.index)
                        self._kill(worker)
                self.kill_at = None

    def _timeout(self) -> float | None:
        times = [w.restart_at for w in self.workers if w.restart_at is not None]
        if self.kill_at is not None:
            times.append(self.kill_at)
        # Children are also polled every second: a SIGCHLD is only a hint (they coalesce).
        return max(0.0, min([*times, time.monotonic() + 1.0]) - time.monotonic())

    def _on_signal(self, sig: signal.Signals) -> None:
        if sig == signal.SIGCHLD:
            return  # reaped right after
        if sig == signal.SIGHUP:
            if not self.stopping:
                log.info("reload signal: forwarding to the workers")
                self._forward(sig)
            return
        first = not self.stopping
        if first:
            self._stop_all()
        self._forward(sig)  # before the log line: stopping never depends on writing it
        if first:
            log.info("stop signal received; stopping the workers", signal=sig.name)
        else:
            log.info("second stop signal: forwarding", signal=sig.name)

    def _stop_all(self) -> None:
        self.stopping = True
        for worker in self.workers:
            worker.restart_at = None
        grace = self.settings.runtime.shutdown_grace_seconds
        self.kill_at = time.monotonic() + grace + STOP_MARGIN_S

    def _forward(self, sig: signal.Signals) -> None:
        for worker in self.workers:
            if worker.running and worker.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(sig)

    def _on_link(self, worker: WorkerProcess) -> None:
        link = worker.link
        if link is None:
            return
        data = read_link(link)
        if data is None:
            return
        if not data:  # the worker is exiting; it is reaped below
            self._unlink(worker)
            return
        if b"ready" in data and not worker.ready:
            worker.ready = self.ever_ready = True
            log.info("worker ready", worker=worker.index, pid=worker.proc.pid if worker.proc else 0)
            if not self.all_ready and all(w.ready for w in self.workers):
                self.all_ready = True
                log.info("listening", workers=len(self.workers), port=self.port)
                url = console_url(self.settings, self.port)
                if url is not None:
                    log.info("open the console", url=url)

    # --- workers -----------------------------------------------------------------------------
    def _spawn(self, worker: WorkerProcess) -> None:
        worker.restart_at = None
        worker.ready = False
        mine, theirs = socket.socketpair()
        command = [
            *(sys.executable, "-m", "gateway", "run", "--config", self.config),
            *("--port", str(self.port), "--worker-index", str(worker.index)),
            *("--supervisor-fd", str(theirs.fileno())),
        ]
        if self.redis_url is not None:
            command += ["--embedded-redis-url", self.redis_url]
        try:
            worker.proc = subprocess.Popen(
                command,
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            theirs.close()
        mine.setblocking(False)
        worker.link = mine
        self.selector.register(mine, selectors.EVENT_READ, worker)
        log.info("worker started", worker=worker.index, pid=worker.proc.pid)

    def _reap(self) -> None:
        for worker in self.workers:
            if worker.proc is None or worker.proc.returncode is not None:
                continue
            code = worker.proc.poll()
            if code is None:
                continue
            self._unlink(worker)
            how = _exit_text(code)
            if self.stopping:
                log.info("worker stopped", worker=worker.index, exit=how)
                continue
            if not worker.ready and not self.ever_ready:
                log.error("worker could not start; stopping", worker=worker.index, exit=how)
                self._give_up()
                continue
            now = time.monotonic()
            while self.crashes and self.crashes[0] < now - CRASH_WINDOW_S:
                self.crashes.popleft()
            self.crashes.append(now)
            if len(self.crashes) >= MAX_CRASHES:
                log.error(
                    "workers keep exiting; stopping",
                    exits=len(self.crashes),
                    window_s=CRASH_WINDOW_S,
                    worker=worker.index,
                    exit=how,
                )
                self._give_up()
                continue
            delay = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (len(self.crashes) - 1))
            log.warning("worker exited; restarting", worker=worker.index, exit=how, delay_s=delay)
            worker.restart_at = now + delay

    def _give_up(self) -> None:
        self.failed = True
        if not self.stopping:
            self._stop_all()
            self._forward(signal.SIGTERM)

    def _unlink(self, worker: WorkerProcess) -> None:
        if worker.link is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(worker.link)
            worker.link.close()
            worker.link = None

    def _kill(self, worker: WorkerProcess) -> None:
        if worker.running and worker.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(5)


def _exit_text(code: int) -> str:
    """``code 1`` or ``signal SIGKILL``, as the log says how a worker ended."""
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"
