"""Support for the hostile-input tests (test_hostile.py, test_fuzz.py): one gateway serving
every HTTP endpoint (console, Lark, DingTalk, WeCom app and AI bot, external events, admin), run
on a thread of its own so that synchronous tests (hypothesis drives those) talk to it over a real
socket; a Redis of its own, so "nothing stored" is a cheap, exact check of its whole key set;
and the log, all of it (structlog and stdlib), kept to assert that nothing logged a traceback or
an error.

Turns never run here (the flusher is stopped) and replies are never sent (intake's replies are
dropped): an event a fuzzer happens to make valid is stored, and that is all.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
import structlog
from structlog.testing import LogCapture
from wechatpy.crypto import PrpCrypto, _get_signature

from adapters.dingtalk.crypto import robot_sign
from gateway.runtime.app import Gateway
from sessions.connection import EmbeddedRedis
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway, free_port
from tests.support.lark import sealed
from tests.support.redis_server import RedisServer
from tests.support.wecom import AES_KEY, CORP_ID, TOKEN, encrypt_xml

T = TypeVar("T")
LARK_TOKEN = "v_token_test"
DINGTALK_SECRET = "dt-app-secret"
ADMIN_TOKEN = "admin-token-12345"
EVENT_SECRETS = {"github": "gh-secret", "gitlab": "gl-token", "generic": "gen-secret"}


def config(redis_url: str) -> dict[str, Any]:
    dead = f"http://127.0.0.1:{free_port()}"  # no platform API answers: nothing is sent anyway
    cfg = base_config("hostile")
    cfg["redis"]["url"] = redis_url
    cfg["admin"] = {"token": ADMIN_TOKEN}
    common = {"xpertId": "echo", "summaryWindowSeconds": 0, "maxWindowSeconds": 5}
    cfg["integrations"] = [
        {
            "id": "console",
            "platform": "console",
            "events": [
                {"source": source, "secret": secret, "chatId": "team"}
                for source, secret in EVENT_SECRETS.items()
            ],
            **common,
        },
        {
            "id": "lk",
            "platform": "lark",
            "appId": "cli_x",
            "appSecret": "s",
            "verificationToken": LARK_TOKEN,
            "encryptKey": "test key",
            "apiBase": dead,
            **common,
        },
        {
            "id": "dt",
            "platform": "dingtalk",
            "clientId": "dingappkey",
            "clientSecret": DINGTALK_SECRET,
            "connectionMode": "http",
            "apiBase": dead,
            **common,
        },
        {
            "id": "wa",
            "platform": "wecom",
            "connectionMode": "app",
            "token": TOKEN,
            "encodingAesKey": AES_KEY,
            "corpId": CORP_ID,
            "agentId": 218,
            "corpSecret": "s",
            "apiBase": dead,
            **common,
        },
        {
            "id": "wb",
            "platform": "wecom",
            "connectionMode": "aibot",
            "token": TOKEN,
            "encodingAesKey": AES_KEY,
            **common,
        },
    ]
    cfg["server"] = {"publicUrl": "http://127.0.0.1:1"}
    return cfg


class LogWatch(logging.Handler):
    """Every stdlib record at warning or above (aiohttp's own logger included)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Hostile:
    """The running gateway, its Redis and its log."""

    port: int
    redis: redis.Redis
    gateway: InProcessGateway
    loop: asyncio.AbstractEventLoop
    capture: LogCapture
    stdlib: LogWatch
    keys: set[str] = field(default_factory=set)
    written: int = 0

    def writes(self) -> int:
        """Changes to the data since the Redis started (``rdb_changes_since_last_save``; it
        never saves): one counter that any write moves."""
        return int(self.redis.info("persistence")["rdb_changes_since_last_save"])

    def run(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    def snapshot(self) -> set[str]:
        return {k.decode() for k in self.redis.keys("*")}

    def problems(self) -> list[str]:
        """Log entries that are errors or carry a traceback, since the last call."""
        found = [
            f"{e.get('log_level')}: {e.get('event')}"
            for e in self.capture.entries
            if e.get("exc_info") or e.get("log_level") in ("error", "critical", "exception")
        ]
        found += [f"{r.levelname} {r.name}: {r.getMessage()}" for r in self.stdlib.records]
        found += [f"traceback in {r.name}" for r in self.stdlib.records if r.exc_info or r.exc_text]
        self.capture.entries.clear()
        self.stdlib.records.clear()
        return found


def hostile_gateway() -> Iterator[Hostile]:
    """A generator for a module-scoped fixture."""
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp), executable=EmbeddedRedis.executable()).start()
        port = server.port
        client = redis.Redis(port=port)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="hostile-gateway", daemon=True)
        thread.start()
        capture = LogCapture()
        structlog.configure(processors=[capture])
        stdlib = LogWatch()
        logging.getLogger().addHandler(stdlib)
        cfg = config(f"redis://127.0.0.1:{port}/0")
        gw = asyncio.run_coroutine_threadsafe(_make(cfg), loop).result(30)
        hostile = Hostile(gw.port, client, gw, loop, capture, stdlib)
        try:
            hostile.run(gw.start())
            hostile.run(_no_heartbeat(gw.gateway))
            gw.gateway.flusher.stop()  # no turns: stored events stay stored
            # No replies (command answers, busy and flood notices): a reply sent in the
            # background would write to Redis after its request's check, during the next one's.
            gw.gateway.intake.replies.spawn = _drop
            gw.gateway.intake.refusals.spawn = _drop
            hostile.keys, hostile.written = hostile.snapshot(), hostile.writes()
            yield hostile
        finally:
            hostile.run(gw.stop())
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            logging.getLogger().removeHandler(stdlib)
            structlog.reset_defaults()
            client.close()
            server.stop()


async def _no_heartbeat(gateway: Gateway) -> None:
    """No heartbeat: then every write to this Redis is one a request made (and the replica key
    of the beats made while starting, gone, will not expire while the tests run)."""
    gateway.heartbeat.stop()
    await asyncio.wait([t for t in gateway._loops if t.get_name() == "heartbeat"])
    await gateway.store.redis.delete(gateway.store.keys.replica(gateway.replica_id))


async def _make(cfg: dict[str, Any]) -> InProcessGateway:
    return InProcessGateway(cfg)  # on the gateway's loop: it opens an HTTP client there


def _drop(coro: Awaitable[Any]) -> None:
    close = getattr(coro, "close", None)
    if close is not None:
        close()


# --- requests ----------------------------------------------------------------------------------
Header = tuple[str | bytes, str | bytes]


def _b(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def raw_request(port: int, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` as it is; the status and body of the answer (0 when there was none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (e.g. 413) before the whole body was read
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
    answer = b"".join(chunks)
    if not answer.startswith(b"HTTP/1."):
        return 0, answer
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def request(
    port: int,
    method: str,
    target: str | bytes,
    *,
    headers: list[Header] | dict[str, str] | None = None,
    body: bytes = b"",
) -> tuple[int, bytes]:
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    lines = [_b(method) + b" " + _b(target) + b" HTTP/1.1", b"Host: 127.0.0.1"]
    lines += [b"Connection: close", b"Content-Length: " + str(len(body)).encode()]
    lines += [_b(k) + b": " + _b(v) for k, v in items]
    return raw_request(port, b"\r\n".join(lines) + b"\r\n\r\n" + body)


# --- signed the way each platform signs --------------------------------------------------------
def lark_signed(plain: bytes) -> tuple[bytes, dict[str, str]]:
    """An encrypted, signed Lark body around ``plain`` (any bytes)."""
    return sealed(plain)


def dingtalk_headers(ts_ms: int | None = None) -> dict[str, str]:
    ts = str(ts_ms if ts_ms is not None else int(time.time() * 1000))
    return {"timestamp": ts, "sign": robot_sign(DINGTALK_SECRET, ts)}


def wecom_app_signed(plain_xml: str) -> tuple[str, bytes]:
    """(query string, body) of an app callback carrying ``plain_xml``."""
    query, body = encrypt_xml(plain_xml)
    return _query(query), body.encode()


def wecom_aibot_signed(plain: str) -> tuple[str, bytes]:
    """(query string, body) of an AI-bot callback carrying ``plain`` (any text)."""
    key = base64.b64decode(AES_KEY + "=")
    encrypt = PrpCrypto(key).encrypt(plain, "").decode()
    ts, nonce = str(int(time.time())), "n1"
    query = {"msg_signature": _get_signature(TOKEN, ts, nonce, encrypt), "timestamp": ts}
    query["nonce"] = nonce
    return _query(query), json.dumps({"encrypt": encrypt}).encode()


def _query(params: dict[str, str]) -> str:
    from urllib.parse import urlencode

    return urlencode(params)


def event_signed(
    source: str, body: bytes, event: str = "pull_request"
) -> tuple[str, dict[str, str]]:
    """(target, headers) of an external event carrying ``body``, signed as ``source`` signs."""
    secret = EVENT_SECRETS[source]
    mac = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "github": {"X-GitHub-Event": event, "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": mac},
        "gitlab": {"X-Gitlab-Event": "Merge Request Hook", "X-Gitlab-Token": secret},
        "generic": {"X-Signature-256": mac},
    }[source]
    return f"/api/events/console/{source}", headers
