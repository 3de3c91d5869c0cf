"""The adapter contract (DESIGN.md §2): adapters import only ``gateway.edge.adapter``, the webhook
skeleton and the public core types; every adapter package has the same module map; no module is
over 400 lines; intake raises one exception for every storage failure; a WeCom integration's
mode picks its outbound strategy once."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from gateway.config.file import load_settings
from gateway.edge.adapter import Adapter, IngestUnavailable, ShuttingDown, StoreUnavailable
from gateway.envelope import Chat, Envelope, Sender
from gateway.intake.pipeline import Pipeline
from gateway.runtime.cli import settings_model
from sessions import KeyBuilder, SessionStore
from tests.support.configs import base_config

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ROOT / "adapters"
# What an adapter may import of ours (docs/architecture.md): the edge package (the contract, the
# webhook skeleton, leases, downloads) and the public core types.
EDGE = "gateway.edge"
ALLOWED = {
    "gateway.envelope",
    "gateway.errors",
    "gateway.progress",
    "gateway.config.settings",
    "gateway.conversation",
}
PACKAGES = sorted(p.parent.name for p in ADAPTERS.glob("*/__init__.py"))


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_adapters_import_only_the_contract_and_the_public_core_types() -> None:
    offending = {}
    for path in sorted(ADAPTERS.rglob("*.py")):
        ours = {n for n in imported(path) if n.split(".")[0] in ("gateway", "sessions")}
        # "from gateway.edge.adapter import X" records both the module and gateway.edge.adapter.X
        bad = {
            n
            for n in ours
            if n not in ALLOWED
            and n.rpartition(".")[0] not in ALLOWED
            and n != EDGE
            and not n.startswith(EDGE + ".")
        }
        if bad:
            offending[str(path.relative_to(ROOT))] = sorted(bad)
    assert offending == {}


def test_the_core_never_imports_an_adapter_or_a_platform_sdk() -> None:
    sdks = ("adapters", "lark_oapi", "dingtalk_stream", "wechatpy")
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        found = {n for n in imported(path) if n.split(".")[0] in sdks}
        assert found == set(), path


def test_sessions_import_nothing_of_ours() -> None:
    """``sessions/`` stores what it is given (DESIGN.md §2); what the gateway wants to know of it
    (the script pipe's latency for /metrics) it learns through hooks such as ``on_exchange``."""
    for path in sorted((ROOT / "sessions").rglob("*.py")):
        found = {n for n in imported(path) if n.split(".")[0] in ("gateway", "adapters")}
        assert found == set(), path


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for folder in ("gateway", "adapters")
        for p in (ROOT / folder).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def test_no_bare_asyncio_wait_for() -> None:
    """On Python 3.11, ``asyncio.wait_for`` swallows a cancel that arrives as its awaitable
    completes (CPython gh-86296, fixed in 3.12): a lease keeper cancelled that way renewed a
    finished turn's lease forever, and a Stop could be lost the same way. ``asyncio.timeout``
    keeps the cancel; ``wait_for(asyncio.shield(...))`` waits for a task we do not cancel."""
    found = []
    for folder in ("gateway", "sessions", "adapters"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Call)
                    and ast.unparse(node.func) == "asyncio.wait_for"
                    and not ast.unparse(node.args[0]).startswith("asyncio.shield(")
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_adapter_package_has_the_same_module_map(package: str) -> None:
    folder = ADAPTERS / package
    for module in ("__init__", "events", "inbound", "outbound", "cards"):
        assert (folder / f"{module}.py").exists(), f"adapters/{package}/{module}.py"
    pkg = importlib.import_module(f"adapters.{package}")
    own = [
        v
        for v in vars(pkg).values()
        if isinstance(v, type) and issubclass(v, Adapter) and v.__module__ == pkg.__name__
    ]
    assert len(own) == 1, "the Adapter class lives in __init__.py"
    factory = next(v for k, v in vars(pkg).items() if k.endswith("AdapterFactory"))
    assert factory.__module__ == pkg.__name__
    # The payload -> Envelope functions live in events.py, the only module that builds one
    # from a platform payload (inbound.py and connection.py hand payloads to it).
    events = (folder / "events.py").read_text(encoding="utf-8")
    assert "Envelope(" in events or "Envelope.model_validate(" in events


# --- intake: one exception for every storage failure -------------------------------------------
class DownStore:
    """A session store whose Redis refuses everything, the way redis-py says it (a message's
    intake runs the budgets' script through its auto-pipeline: ``redis``, ``pipe``)."""

    keys = KeyBuilder(prefix="x")
    dedup_ttl_ms = 60_000

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.redis = self.pipe = self

    def register_script(self, text: str) -> str:
        return text

    # The real store's key and argument builders (they only read ``keys`` and ``dedup_ttl_ms``).
    intake_keys = SessionStore.intake_keys
    intake_args = SessionStore.intake_args

    async def evalsha(self, *_: Any) -> Any:
        raise self.error

    async def intake(self, **_: Any) -> Any:
        raise self.error

    async def mark_seen(self, *_: Any) -> bool:
        raise self.error


def envelope(text: str = "hello") -> Envelope:
    return Envelope(
        integration_id="console",
        platform="console",
        event_id="e1",
        chat=Chat(id="dm-alice", type="p2p"),
        sender=Sender(id="alice"),
        text=text,
        bot_mentioned=True,
    )


@pytest.mark.parametrize(
    "error",
    [
        RedisConnectionError("Connection refused"),
        OutOfMemoryError("OOM command not allowed"),
        StoreUnavailable("READONLY"),
        ConnectionResetError("reset by peer"),
        TimeoutError(),
    ],
)
@pytest.mark.parametrize("text", ["hello", "/stop"])
async def test_intake_raises_ingest_unavailable_for_any_storage_failure(
    error: Exception, text: str
) -> None:
    settings = load_settings(base_config("x"), model=settings_model())
    pipeline = Pipeline(
        store=DownStore(error),  # type: ignore[arg-type]
        records=None,  # type: ignore[arg-type]
        settings=lambda: settings,
        adapters={},
        wake=lambda _due: None,
        spawn=lambda _coro: None,
    )
    with pytest.raises(IngestUnavailable) as raised:
        await pipeline.ingest(envelope(text))
    assert raised.value.__cause__ is error
    pipeline.accepting = False
    with pytest.raises(ShuttingDown):
        await pipeline.ingest(envelope(text))
    assert issubclass(ShuttingDown, IngestUnavailable)  # adapters catch one exception


# --- WeCom: three modes, three outbound strategies ----------------------------------------------
@pytest.mark.parametrize(
    ("mode", "strategy", "callbacks"),
    [
        ("app", "adapters.wecom.outbound.AppOutbound", "AppCallbacks"),
        ("aibot", "adapters.wecom.aibot.StreamOutbound", "AibotCallbacks"),
        ("aibot_ws", "adapters.wecom.connection.AibotConnection", None),
    ],
)
def test_a_wecom_mode_picks_its_outbound_strategy_once(
    mode: str, strategy: str, callbacks: str | None
) -> None:
    from adapters.wecom import WeComAdapter, WeComIntegration
    from tests.support.wecom import AES_KEY, CORP_ID, TOKEN

    fields: dict[str, Any] = {"id": "wc", "platform": "wecom", "xpertId": "echo"}
    fields |= {"connectionMode": mode, "token": TOKEN, "encodingAesKey": AES_KEY}
    fields |= {"corpId": CORP_ID, "agentId": 1, "corpSecret": "s"} if mode == "app" else {}
    fields |= {"botId": "b", "botSecret": "s"} if mode == "aibot_ws" else {}
    parts = {"records": None, "connection_lease_ms": 15_000, "api_calls": lambda *_: None}
    context: Any = type("Context", (), parts)()
    adapter = WeComAdapter(settings=WeComIntegration.model_validate(fields), context=context)
    module, _, name = strategy.rpartition(".")
    assert type(adapter.outbound) is getattr(importlib.import_module(module), name)
    assert type(adapter.callbacks).__name__ == (callbacks or "NoneType")
