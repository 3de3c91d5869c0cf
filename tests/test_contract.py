"""The adapter contract (docs/architecture.md): adapters import only ``gateway.edge.adapter``, the
webhook skeleton and the public core types; every adapter package has the same module map; no module
is
over 400 lines; intake raises one exception for every storage failure; a WeCom integration's
mode picks its outbound strategy once."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError

from gateway.config.file import load_settings
from gateway.edge.adapter import Adapter
from gateway.edge.factory import Factory
from gateway.edge.ingest import IngestUnavailable, ShuttingDown
from gateway.edge.stores import StoreUnavailable
from gateway.envelope import Chat, Envelope, Sender
from gateway.errors import GatewayError
from gateway.runtime.cli import settings_model
from gateway.runtime.intake import build_intake
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
    "gateway.config.bases",
    "gateway.config.model",
    "gateway.conversation",
}
PACKAGES = sorted(p.parent.name for p in ADAPTERS.glob("*/__init__.py"))
# Every platform's package has these modules (a module may be a package of its own); the
# console, which talks to no platform, has no API client, connection or crypto.
MODULES = (
    "__init__", "api", "cards", "connection", "crypto", "events", "inbound", "outbound", "settings"
)  # fmt: skip
CONSOLE_MODULES = ("__init__", "cards", "events", "inbound", "outbound", "settings")
EXTRA = {"dingtalk": {"links"}}  # DingTalk's action links: a webhook of their own


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
    """Those of ``adapters/`` and of each test-only platform (``tests/platforms/*/adapter``)."""
    offending = {}
    test_only = (ROOT / "tests" / "platforms").glob("*/adapter/**/*.py")
    for path in sorted([*ADAPTERS.rglob("*.py"), *test_only]):
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
    """``sessions/`` stores what it is given (docs/architecture.md); what the gateway wants to know
    of it
    (the script pipe's latency for /metrics) it learns through hooks such as ``on_exchange``."""
    for path in sorted((ROOT / "sessions").rglob("*.py")):
        found = {n for n in imported(path) if n.split(".")[0] in ("gateway", "adapters")}
        assert found == set(), path


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for folder in ("gateway", "adapters", "sessions")
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
    modules = MODULES if package != "console" else CONSOLE_MODULES
    for module in modules:
        found = (folder / f"{module}.py").exists() or (folder / module / "__init__.py").exists()
        assert found, f"adapters/{package}/{module}"
    extra = {
        p.stem for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    } - set(modules)
    assert extra <= EXTRA.get(package, set()), f"adapters/{package}: {sorted(extra)}"
    pkg = importlib.import_module(f"adapters.{package}")
    own = [
        v
        for v in vars(pkg).values()
        if isinstance(v, type) and issubclass(v, Adapter) and v.__module__ == pkg.__name__
    ]
    assert len(own) == 1, "the Adapter class lives in __init__.py"
    # One factory class for all: each package's ``factory`` (its entry point) is a Factory of
    # its own Adapter class.
    factory = vars(pkg)["factory"]
    assert isinstance(factory, Factory) and factory.adapter is own[0]
    assert factory.platform == package
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

    async def intake(self, *_: Any) -> Any:
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
    pipeline = build_intake(
        store=DownStore(error),  # type: ignore[arg-type]
        records=None,  # type: ignore[arg-type]
        settings=lambda: settings,
        adapters={},
        wake=lambda _due: None,
        spawn=lambda _coro: None,
    ).pipeline
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
        ("aibot", "adapters.wecom.outbound.stream.StreamOutbound", "AibotCallbacks"),
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
    parts["platform_budget"] = lambda *_: None
    context: Any = type("Context", (), parts)()
    adapter = WeComAdapter(settings=WeComIntegration.model_validate(fields), context=context)
    module, _, name = strategy.rpartition(".")
    assert type(adapter.outbound) is getattr(importlib.import_module(module), name)
    assert type(adapter.callbacks).__name__ == (callbacks or "NoneType")


# --- the house (issue 26): one error tree, few flat modules, no import cycle --------------------
PRODUCT = ("gateway", "adapters", "sessions")
# Every exception class of these folders derives from GatewayError (gateway/errors.py).
ERROR_TREE = ("gateway", "adapters")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_exception_class_derives_from_gateway_error() -> None:

    outside = []
    for folder in ERROR_TREE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name == "__main__.py":
                continue
            names = [
                n.name
                for n in ast.walk(ast.parse(path.read_text("utf-8")))
                if isinstance(n, ast.ClassDef)
            ]
            if not names:
                continue
            module = importlib.import_module(_module_name(path))
            for name in names:
                cls = getattr(module, name, None)
                if (
                    isinstance(cls, type)
                    and cls.__module__ == module.__name__
                    and issubclass(cls, BaseException)
                    and not issubclass(cls, GatewayError)
                ):
                    bases = ", ".join(b.__name__ for b in cls.__bases__)
                    outside.append(f"{rel}: {name}({bases})")
    assert outside == [], "exception classes outside the error tree:\n" + "\n".join(outside)


def test_gateway_has_at_most_12_flat_modules() -> None:
    flat = sorted(p.name for p in (ROOT / "gateway").glob("*.py"))
    assert len(flat) <= 12, flat


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_imports(path: Path, modules: set[str], *, deep: bool = False) -> set[str]:
    """The product modules ``path`` imports when it is imported: its module-level imports
    (under ``if``/``try``/``with`` too), not those inside functions or under ``TYPE_CHECKING``;
    with ``deep``, those too (each a sign of a class in the wrong module).
    ``from P import x`` is an import of the module ``P.x`` when there is one, else of ``P``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(m for a in node.names if (m := known(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in modules else known(base)
                    if target:
                        found.add(target)
            elif isinstance(node, ast.If):
                if deep or not _is_type_checking(node):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, (ast.With, ast.ClassDef)):
                visit(node.body)
            elif deep and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    found.discard(name)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle
    through it (a path that starts and ends at its first module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        start = min(component)
        # Breadth-first from start back to start, inside the component: the shortest cycle.
        paths = {start: [start]}
        queue = [start]
        cycle: list[str] = []
        while queue and not cycle:
            v = queue.pop(0)
            for w in sorted(graph[v] & component):
                if w == start:
                    cycle = [*paths[v], start]
                    break
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    queue.append(w)
        cycles.append(cycle)
    return sorted(cycles)


def product_graph(*, deep: bool = False) -> dict[str, set[str]]:
    """Who imports whom. Importing ``a.b.c`` runs the ``__init__`` of ``a`` and ``a.b`` first,
    so an import of a module is also one of its packages (not of the importer's own packages,
    which are being imported already): ``policy.bundles`` importing ``experts.base`` runs
    ``gateway/experts/__init__.py``, and whatever that imports."""
    paths = {_module_name(p): p for top in PRODUCT for p in (ROOT / top).rglob("*.py")}
    modules = set(paths)
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = module_imports(path, modules, deep=deep) & modules
        for target in list(found):
            parts = target.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if package in modules and not (name == package or name.startswith(package + ".")):
                    found.add(package)
        graph[name] = found
    return graph


def test_no_import_cycle_among_product_modules() -> None:
    cycles = import_cycles(product_graph())
    assert cycles == [], "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_cycle_even_through_deferred_imports() -> None:
    """Counting the imports inside functions and under ``TYPE_CHECKING`` as well: a cycle there
    is hidden, not gone."""
    cycles = import_cycles(product_graph(deep=True))
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]


def test_only_the_cli_imports_a_module_of_ours_inside_a_function_or_for_type_hints() -> None:
    """An import that only works inside a function, or only for a type hint, is a sign of a
    class in the wrong module; the CLI is the exception on purpose (lazy, so ``--version`` and
    ``check`` load only what they use)."""
    deep, shallow = product_graph(deep=True), product_graph()
    deferred = {m: sorted(deep[m] - shallow[m]) for m in deep if deep[m] - shallow[m]}
    deferred.pop("gateway.runtime.cli", None)
    assert deferred == {}


# Where the repository's own text may not point: notes that are not in it. A citation names a
# page of docs/ or a public source (an SDK file, a server's source path, an official doc page).
OUTSIDE = re.compile(
    r"\bDESIGN\b|(?<![\w-])platforms\.md|(?<![\w-])limits\.md|pitfalls\.md|STYLE\.md|\bSTYLE:"
    r"|\.\./shared|shared/reference|/work/shared|reference/xpertai\.md|§"
)
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".lua", ".toml", ".js", ".html", ".css", ".json",
                 ".sh", ".txt", ".ini", ".cfg", ".conf", ".service", ".j2"}  # fmt: skip
TOP_FILES = ("README.md", "pyproject.toml", "Dockerfile", "docker-compose.yml", "dev.sh")
TEXT_FOLDERS = ("gateway", "adapters", "sessions", "tests", "bench", "docs", "config", "deploy")


def repo_text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for folder in TEXT_FOLDERS:
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == "Dockerfile")
        ]
    return sorted(files)


def test_nothing_cites_a_page_outside_the_repo() -> None:
    """Code, tests, docs, README and config cite ``docs/`` or a public source; a reader of the
    repository can follow every citation (issue 39)."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
        for path in repo_text_files()
        if path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_the_outside_citation_rule_catches_each_form() -> None:
    cited = [
        "DESIGN.md §6", "(DESIGN: owned)", "(platforms.md §1.3)", "limits.md, secondary",
        "pitfalls.md #4", "STYLE.md", "(STYLE: verify before parsing)",
        "../shared/reference/limits.md", "/work/shared/x", "reference/xpertai.md",
    ]  # fmt: skip
    assert [c for c in cited if not OUTSIDE.search(c)] == []
    fine = ["docs/platform-limits.md", "[platform-limits.md](platform-limits.md)", "STYLES = {}"]
    assert [c for c in fine if OUTSIDE.search(c)] == []


TEST_SUPPORT = ("tests.support", "tests.fakes")
# A platform that lives only in the tests keeps its adapter, fake and harness in its own folder
# (tests/platforms/<name>/, docs/extending.md): those are shared code too, its test modules not.
TEST_PLATFORMS = "tests.platforms."


def shared_test_code(name: str) -> bool:
    """Whether module ``name`` of ``tests`` is one that test modules may import."""
    if name.startswith(TEST_SUPPORT):
        return True
    return name.startswith(TEST_PLATFORMS) and not name.rpartition(".")[2].startswith("test_")


def test_no_test_module_imports_another_test_module() -> None:
    """Tests share code through ``tests/support``, ``tests/fakes`` and a test-only platform's
    folder only: a test module that imports another runs its fixtures and collection twice and
    ties the two together."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: relative import")
                continue
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom)
                else []
            )  # fmt: skip
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
                for name in names
                if (name == "tests" or name.startswith("tests.")) and not shared_test_code(name)
            ]
    assert found == []


def test_one_way_starts_a_gateway_subprocess() -> None:
    """Every ``python -m gateway`` a test starts goes through ``tests/support/spawn.py``."""
    spawn = ROOT / "tests" / "support" / "spawn.py"
    pattern = re.compile(r"""["']-m["'],\s*["']gateway["']""")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != spawn and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []
