"""The long connection (docs/lark.md, "Long connection"): lark-oapi's WebSocket client in its own
thread.

The SDK runs on a module-level event loop and calls the event handler synchronously inside it.
So each connection gets a thread with its own loop (the SDK's ``loop`` global is pointed at
"whichever loop is running", which lets several integrations each have a thread), and the
handler hands each payload to the daemon's loop and waits for intake there: the SDK acks the
frame only when the handler returns, so an event is acked only once it is durable. A handler
that fails (storage down, shutting down) makes the SDK answer 500 and Lark re-pushes.
The SDK reconnects by itself with the interval and jitter the server configures.

One process of all (workers and replicas) holds the app's connection: the one holding its owner
lease (``gateway.edge.leases``); the others stand by and take over when the lease runs out.
Lark would accept several connections and push each event to one of them, but N workers times M
replicas would be N x M sockets for one bot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import warnings
from typing import Any, Literal, get_args

import structlog

from adapters.lark.inbound import EMPTY, LarkInbound
from adapters.lark.settings import LarkIntegration
from gateway.edge.body import json_object
from gateway.edge.context import AdapterContext
from gateway.edge.ingest import IngestOutcome, IngestUnavailable
from gateway.edge.leases import LeasedConnection, OwnerLease
from gateway.envelope import Envelope
from gateway.errors import Refused

log = structlog.get_logger("adapters.lark")

State = Literal["connecting", "connected", "retrying", "failed", "standby", "stopped"]
STATES: tuple[str, ...] = get_args(State)  # what readiness() reports as "connection"
HANDLER_TIMEOUT_S = 2.5  # Lark wants an answer within 3 s


class _RunningLoop:
    """Stands in for the SDK's module-level loop: tasks go to the loop running them."""

    def create_task(self, coro: Any) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)


def sdk_client() -> Any:
    """The SDK's ws client module, its module-level loop replaced (see the module doc)."""
    with warnings.catch_warnings():  # the SDK calls get_event_loop() at import time
        warnings.simplefilter("ignore", DeprecationWarning)
        import lark_oapi.ws.client as ws_client
    old = ws_client.loop
    ws_client.loop = _RunningLoop()
    # The loop the SDK made at import time is never run; close it rather than leak it.
    if isinstance(old, asyncio.AbstractEventLoop) and not old.is_running():
        old.close()
    return ws_client


class _Bridge:
    """What the SDK calls an event handler: payload bytes in, callback answer out.

    The SDK's ws client calls ``do_without_validation`` up to 1.5.x and
    ``_do_without_validation`` from 1.6.0 on (lark_oapi/ws/client.py ``_handle_data_frame`` in
    the 1.4.0-1.5.5 and 1.6.0-1.7.5 wheels); the bridge answers to both names.
    """

    def __init__(self, conn: LongConnection) -> None:
        self.conn = conn

    def do_without_validation(self, payload: bytes) -> dict[str, Any] | None:
        return self._do_without_validation(payload)

    def _do_without_validation(self, payload: bytes) -> dict[str, Any] | None:
        try:
            data = json_object(payload, "event")
        except Refused as exc:
            log.info("lark event rejected", reason=exc.reason)  # re-pushing would not help
            return None
        future = asyncio.run_coroutine_threadsafe(self.conn.dispatch(data), self.conn.daemon_loop)
        try:
            answer = future.result(timeout=HANDLER_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
        except Refused as exc:
            if exc.status >= 500:
                raise
            log.info("lark event rejected", reason=exc.reason)  # re-pushing would not help
            return None
        self.conn.acked += 1
        return answer or None


def _imported(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("lark SDK import failed", error=str(done.exception()))


class LongConnection:
    def __init__(
        self,
        *,
        settings: LarkIntegration,
        inbound: LarkInbound,
        loop: asyncio.AbstractEventLoop,
        context: AdapterContext,
    ) -> None:
        self.settings = settings
        self.inbound = inbound
        self.context = context
        self.daemon_loop = loop
        self.state: State = "connecting"
        self.acked = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._looping = threading.Event()  # the thread's loop and stop event exist
        self._sdk: asyncio.Future[Any] | None = None
        lease = OwnerLease.for_connection(
            context.records,
            platform="lark",
            account=settings.app_id,
            ttl_ms=context.connection_lease_ms,
        )
        self.lease = LeasedConnection(
            lease, connect=self._open, disconnect=self._close, integration_id=settings.id
        )

    async def dispatch(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One event, on the daemon's loop: the webhook's ``envelope`` and ``answer``
        (``Inbound.take``), ingested in between. Raises :class:`Refused`: a 503 when the event
        was not stored (Lark pushes it again), a 400 for one that cannot be read."""
        taken = await self.inbound.take(payload, self._ingest)
        return EMPTY if taken is None else taken.answer

    async def _ingest(self, envelope: Envelope) -> IngestOutcome:
        try:
            return await self.context.ingest(envelope)
        except IngestUnavailable as exc:
            log.warning(
                "lark event not stored",
                integration_id=self.settings.id,
                event_id=envelope.event_id,
                error=str(exc),
            )
            raise Refused(503, "storage unavailable; retry") from None

    def start(self) -> None:
        """Connect once this process holds the app's lease (at once when no one else does).
        The SDK is imported meanwhile (seconds of work): a standby taking over connects at once."""
        self._sdk = asyncio.ensure_future(asyncio.to_thread(sdk_client))
        self._sdk.add_done_callback(_imported)
        self.lease.start()

    async def stop(self) -> None:
        await self.lease.stop()
        if self._sdk is not None:  # a thread still importing is not left running on its own
            await asyncio.wait([self._sdk], timeout=10)
        self.state = "stopped"

    def readiness(self) -> dict[str, object]:
        """``connection``: the socket's state, or ``standby`` where another process holds it."""
        role = self.lease.role
        state = {"owner": self.state, "standby": "standby", "stopped": "stopped"}.get(
            role, "connecting"
        )
        return {"connection": state, **self.lease.readiness()}

    async def _open(self) -> None:
        # Not waiting for the SDK import here (the thread does, on the import lock): the lease
        # loop must get back to its renewals at once.
        self.state = "connecting"
        self._loop, self._stop = None, None
        self._looping.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"lark-ws:{self.settings.id}", daemon=True
        )
        self._thread.start()

    async def _close(self) -> None:
        await asyncio.to_thread(self._end_thread)
        self.state = "standby"

    def _end_thread(self) -> None:
        """Close the socket and end the thread (in a worker thread: it joins)."""
        thread = self._thread
        deadline = time.monotonic() + 5
        # A thread just started may not have made its loop yet: wait for it (or its end).
        while thread is not None and thread.is_alive() and time.monotonic() < deadline:
            if self._looping.wait(0.05):
                break
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:
            log.exception("lark long connection thread failed", integration_id=self.settings.id)
            self.state = "failed"

    def _set(self, state: State) -> None:
        if state != self.state:
            log.info("lark long connection", integration_id=self.settings.id, state=state)
        self.state = state

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._looping.set()
        sdk = sdk_client()
        client = sdk.Client(
            self.settings.app_id,
            self.settings.app_secret.get_secret_value(),
            event_handler=_Bridge(self),
            domain=self.settings.api_base,
            auto_reconnect=True,
        )
        client.on_reconnecting = lambda: self._set("retrying")
        client.on_reconnected = lambda: self._set("connected")
        connect = asyncio.create_task(self._connect(client, sdk))
        await self._stop.wait()
        client._auto_reconnect = False
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        await client._disconnect()
        connect.cancel()

    async def _connect(self, client: Any, sdk: Any) -> None:
        try:
            await client._connect()
        except sdk.ClientException as exc:  # bad credentials, too many connections: fatal
            log.error("lark long connection refused", error=str(exc))
            self._set("failed")
            return
        except Exception as exc:
            log.warning("lark long connection failed; retrying", error=str(exc))
            self._set("retrying")
            await client._reconnect()
        self._set("connected")
        asyncio.get_running_loop().create_task(client._ping_loop())
