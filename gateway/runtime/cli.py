"""Command line: ``xpert-gateway run|check|migrate|schema`` (also ``python -m gateway``); its
``--help`` is HELP and EPILOG, a user's text.

Its imports are lazy: ``--version`` and ``--help`` load argparse and nothing of the gateway
but its version; each command imports what it needs (settings models, adapters, the daemon)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from gateway import __version__

if TYPE_CHECKING:
    from gateway.config.limits import Limits
    from gateway.config.settings import Settings


HELP = """\
Connects chat bots on Lark/Feishu, DingTalk and WeCom (and a local web console) to AI agents:
each message becomes a turn of an agent, shown in the chat as a live card."""

EPILOG = """\
examples:
  xpert-gateway run --config config/gateway.yaml      the quick start: console + echo expert,
                                                      http://127.0.0.1:8080/console/
  xpert-gateway check --config prod.yaml --probe      validate a config, try each expert's URL
  xpert-gateway migrate --config prod.yaml --check    is the archive's schema current?

Each command's own options: xpert-gateway COMMAND --help. With no redis.url in the config,
$REDIS_URL is used when set, else an embedded Redis under dataDir. The configuration reference
and the rest: README.md and docs/ of the source."""


def settings_model() -> type[Settings]:
    from gateway.config.settings import build_settings_model
    from gateway.edge.factory import discover_adapters
    from gateway.experts.registry import discover_experts

    return build_settings_model(
        {p: f.settings_model for p, f in discover_adapters().items()}, discover_experts()
    )


def json_schema() -> dict[str, object]:
    schema = settings_model().model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "xpert-gateway configuration"
    return schema


def _load(path: str) -> Settings:
    from pathlib import Path

    from gateway.config.file import load_settings

    return load_settings(Path(path), model=settings_model(), redis_env=True)


def _load_or_report(path: str) -> Settings | None:
    """The settings, or None after printing every problem as ``key.path: reason``."""
    from gateway.config.errors import ConfigError, ConfigFileError

    try:
        return _load(path)
    except ConfigFileError as exc:  # missing, empty, not YAML: the problem names the file
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return None
    except ConfigError as exc:
        print(f"{path}: invalid configuration", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _print_schedules(settings: Settings) -> None:
    """The config's schedules with their next fire times, in each schedule's own time zone
    (runtime ones live in Redis)."""
    import time

    from gateway.config.cron import iso
    from gateway.triggers.schedule_book import entries_of

    entries = entries_of(settings, {})
    if entries:
        print("schedules:")
    now = int(time.time() * 1000)
    for entry in entries:
        s = entry.schedule
        fires: list[str] = []
        at: int | None = now
        while at is not None and len(fires) < 2:
            at = entry.next_fire(at)
            if at is not None and entry.cron is not None:
                fires.append(iso(at, entry.cron.tz))
        when = ", then ".join(fires) if fires else "never"
        print(f"  {s.id}: {s.cron!r} {entry.zone} in {s.integration_id}/{s.chat_id}, next {when}")


def _admin_summary(settings: Settings) -> str:
    """Whether the admin API is on, and where."""
    if settings.admin.token is None:
        return "off (set admin.token to turn it on)"
    server = settings.server
    base = (server.public_url or f"http://{server.host}:{server.port}").rstrip("/")
    return f"on at {base}/v1.0 (bearer admin.token)"


def _limits(limits: Limits) -> str:
    """A budget as ``check`` shows it: `` [limits: 10 turns/h per chat, …]`` or nothing."""
    parts = [
        f"{value} {unit}"
        for value, unit in (
            (limits.turns_per_hour_per_chat, "turns/h per chat"),
            (limits.turns_per_hour_per_sender, "turns/h per sender"),
            (limits.tokens_per_day_per_chat, "tokens/day per chat"),
        )
        if value is not None
    ]
    return f" [limits: {', '.join(parts)}]" if parts else ""


def _check(args: argparse.Namespace) -> int:
    from gateway.runtime.hints import config_warnings, redis_summary

    settings = _load_or_report(args.config)
    if settings is None:
        return 1
    print(f"{args.config}: OK")
    print(f"redis: {redis_summary(settings)}")
    print(f"archive: {settings.archive.describe(settings.data_dir)}")
    workers = settings.server.worker_count()
    processes = f" ({workers} worker processes)" if workers > 1 else ""
    print(f"server: http://{settings.server.host}:{settings.server.port}{processes}")
    print(f"admin API: {_admin_summary(settings)}")
    print(f"MCP: {settings.mcp.describe()}")
    print("experts:")
    for expert in settings.experts:
        print(f"  {expert.id} ({expert.kind})")
    print("integrations:")
    for integ in settings.integrations:
        state = "" if integ.enabled else " [disabled]"
        print(f"  {integ.id} ({integ.platform}){state} -> {integ.xpert_id}{_limits(integ.limits)}")
        for route in integ.routes:
            extra = [f"model {route.model}"] if route.model else []
            extra += [f"tools {', '.join(route.tools)}"] if route.tools is not None else []
            extra += [f"variables {', '.join(route.variables)}"] if route.variables else []
            shown = f" ({'; '.join(extra)})" if extra else ""
            limits = _limits(integ.limits.over(route.limits)) if route.limits else ""
            print(
                f"    route {route.describe()} -> {route.xpert_id or integ.xpert_id}{shown}{limits}"
            )
        for watch in integ.watches:
            print(f"    watch {watch.id}" + ("" if watch.enabled else " [disabled]"))
        for source in integ.events:
            print(f"    events {source.source} -> chat {source.chat_id}")
    _print_schedules(settings)
    if args.verbose:
        from gateway.config.masking import mask_urls

        shown = mask_urls(json.loads(settings.model_dump_json(by_alias=True)))
        print(json.dumps(shown, indent=2))  # secrets and URL credentials masked
    for warning in config_warnings(settings):
        print(f"warning: {warning}", file=sys.stderr)
    return _probe(settings) if args.probe else 0


def _probe(settings: Settings) -> int:
    """``check --probe``: one request to each enabled expert's backend with its key, running
    nothing; exit 1 when one could not be reached or refused the key."""
    import asyncio

    from gateway.config.paths import item_path
    from gateway.experts.http import ExpertHttpError
    from gateway.experts.registry import discover_experts

    kinds = discover_experts()

    async def one(expert: Any) -> tuple[bool, str]:
        try:
            said = await kinds[expert.kind].probe(expert)
        except ExpertHttpError as exc:
            return False, str(exc)
        return True, said or "not tried (this expert kind has no probe)"

    async def every() -> list[tuple[bool, str]]:
        return await asyncio.gather(*(one(e) for e in settings.experts))

    print("probe:")
    failed = 0
    for i, (ok, said) in enumerate(asyncio.run(every())):
        expert = settings.experts[i]
        print(f"  {item_path('experts', settings.experts, i)} ({expert.kind}): {said}")
        failed += not ok
    if failed:
        print(f"error: {failed} expert{'s' * (failed > 1)} failed the probe", file=sys.stderr)
    return 1 if failed else 0


def _run(args: argparse.Namespace) -> int:
    import socket

    import structlog

    from gateway.archive.service import ArchiveRefused
    from gateway.logging import configure_logging
    from gateway.runtime.daemon import StartupError, Worker, serve
    from gateway.runtime.hints import config_warnings, redis_summary
    from sessions.connection import RedisStartupError

    settings = _load_or_report(args.config)
    if settings is None:
        return 1
    configure_logging(settings.logging.level, settings.logging.format)
    log = structlog.get_logger("gateway.runtime.cli")

    worker: Worker | None = None
    if args.worker_index is not None:  # started by a supervisor (hidden options)
        structlog.contextvars.bind_contextvars(worker=args.worker_index)
        link = socket.socket(fileno=args.supervisor_fd) if args.supervisor_fd is not None else None
        worker = Worker(
            index=args.worker_index, link=link, embedded_redis_url=args.embedded_redis_url
        )
    else:
        log.info("redis", using=redis_summary(settings))  # which one: embedded, or $REDIS_URL's
        for warning in config_warnings(settings):
            log.warning(warning)
    try:
        workers = settings.server.worker_count() if args.workers is None else args.workers
        if worker is None and workers > 1:
            from gateway.runtime.supervisor import Supervisor

            return Supervisor(settings, config=args.config, workers=workers, port=args.port).run()

        _event_loop_runner()(
            serve(settings, port=args.port, reload=lambda: _load(args.config), worker=worker)
        )
    except (StartupError, RedisStartupError, ArchiveRefused, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _workers(value: str) -> int:
    """``--workers``: a number, or ``auto`` for one per core."""
    from gateway.config.server import cpu_count

    if value == "auto":
        return cpu_count()
    if value.isdigit() and 1 <= int(value) <= 256:
        return int(value)
    raise argparse.ArgumentTypeError("a number of processes from 1 to 256, or auto")


def _event_loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop where installed (a large share of the per-message CPU is the event loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        import asyncio

        return asyncio.run
    return uvloop.run


def _migrate(args: argparse.Namespace) -> int:
    """Bring the archive's schema to this release's (``--check``: only say where it is, write
    nothing, and exit 1 when it is behind)."""
    import asyncio
    from pathlib import Path

    from sqlalchemy import make_url

    from gateway.archive.database import ArchiveDatabase
    from gateway.archive.migrations import LATEST, SchemaTooNew, migrate

    settings = _load_or_report(args.config)
    if settings is None:
        return 1
    a = settings.archive
    where = a.describe(settings.data_dir)
    if not a.enabled:
        print("archive: off (archive.enabled is false): nothing to migrate")
        return 0

    url = make_url(a.database_url(settings.data_dir))
    if args.check and url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        # Opening it would create the file (the start creates it, with the schema).
        behind = f"schema version 0 (this release's: {LATEST}; run migrate)"
        print(f"archive ({where}): no file yet, {behind}")
        return 1

    async def run() -> str:
        db = ArchiveDatabase.open(
            url.render_as_string(hide_password=False), connect_timeout_s=a.connect_timeout_seconds
        )
        try:
            done = await migrate(db, apply=not args.check)
        finally:
            await db.close()
        if args.check:
            behind = "" if done.before == LATEST else f" (this release's: {LATEST}; run migrate)"
            return f"schema version {done.before}{behind or ', up to date'}"
        if not done.applied:
            return f"schema version {done.after}, up to date"
        return f"schema version {done.before} -> {done.after}"

    try:
        said = asyncio.run(run())
        print(f"archive ({where}): {said}")
    except SchemaTooNew as exc:
        print(f"error: archive ({where}): {exc}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as exc:
        print(f"error: archive ({where}) not reachable: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the driver's own (refused login, no such database, ...)
        print(f"error: archive ({where}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 1 if args.check and "run migrate" in said else 0  # --check: behind is a failure


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="xpert-gateway",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run the gateway until Ctrl-C or SIGTERM (SIGHUP reloads the config)",
        description="Run the gateway until Ctrl-C or SIGTERM; SIGHUP reloads the config. A "
        "second Ctrl-C hands running turns back at once.",
    )
    run.add_argument("--config", required=True, help="the YAML config file")
    run.add_argument("--port", type=int, default=None, help="listen on this port (server.port)")
    run.add_argument(
        "--workers",
        type=_workers,
        default=None,
        help="N worker processes on one port, or auto: one per core (server.workers)",
    )
    # Set by a supervisor for its workers, not by users.
    run.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--embedded-redis-url", default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=_run)
    check = sub.add_parser(
        "check",
        help="validate a config and print what it sets up",
        description="Validate a config and print what it sets up; exit 1 with one line per "
        "problem, naming the key and its line.",
    )
    check.add_argument("--config", required=True, help="the YAML config file")
    check.add_argument("-v", "--verbose", action="store_true", help="print the resolved config")
    check.add_argument(
        "--probe",
        action="store_true",
        help="also try each expert's URL and key with one request that runs nothing",
    )
    check.set_defaults(func=_check)
    migrate = sub.add_parser(
        "migrate",
        help="bring the archive database's schema up to date (run also does it at start)",
    )
    migrate.add_argument("--config", required=True, help="the YAML config file")
    migrate.add_argument(
        "--check",
        action="store_true",
        help="only print the schema version (writes nothing; exit 1 when behind)",
    )
    migrate.set_defaults(func=_migrate)
    schema = sub.add_parser("schema", help="print the config's JSON Schema (for editors)")
    schema.set_defaults(func=_schema)
    try:
        args = parser.parse_args(argv)
        result: int = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader gone (`| head`) is handled below
    except BrokenPipeError:
        # The reader of our output left before the end, as `head` does: end quietly, with the
        # status of a command ended by SIGPIPE (128 + 13, what `cat` gives in its place).
        from gateway.logging import silence

        silence(sys.stdout)
        return 141
    return result
