"""Command line: ``xpert-gateway run|check|migrate|schema`` (also ``python -m gateway``).

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
    from gateway.config.settings import Settings
    from gateway.policy.limits import Limits


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

    return load_settings(Path(path), model=settings_model())


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

    from gateway.triggers.cron import iso
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
    from gateway.config.hints import config_warnings, redis_summary

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
    return 0


def _run(args: argparse.Namespace) -> int:
    import socket

    import structlog

    from gateway.archive.service import ArchiveRefused
    from gateway.config.hints import config_warnings
    from gateway.logging import configure_logging
    from gateway.runtime.daemon import StartupError, Worker, serve
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
    """Bring the archive's schema to this release's (``--check``: only say where it is)."""
    import asyncio

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

    async def run() -> str:
        db = ArchiveDatabase.open(
            a.database_url(settings.data_dir), connect_timeout_s=a.connect_timeout_seconds
        )
        try:
            done = await migrate(db, apply=not args.check)
        finally:
            await db.close()
        if args.check:
            behind = "" if done.before == LATEST else f" (this release's: {LATEST}; run migrate)"
            return f"schema version {done.before}{behind}"
        if not done.applied:
            return f"schema version {done.after}, up to date"
        return f"schema version {done.before} -> {done.after}"

    try:
        print(f"archive ({where}): {asyncio.run(run())}")
    except SchemaTooNew as exc:
        print(f"error: archive ({where}): {exc}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError) as exc:
        print(f"error: archive ({where}) not reachable: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the driver's own (refused login, no such database, ...)
        print(f"error: archive ({where}): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xpert-gateway", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the daemon")
    run.add_argument("--config", required=True, help="YAML config file")
    run.add_argument("--port", type=int, default=None, help="override server.port")
    run.add_argument(
        "--workers", type=_workers, default=None, help="override server.workers (N or auto)"
    )
    # Set by a supervisor for its workers, not by users.
    run.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-fd", type=int, default=None, help=argparse.SUPPRESS)
    run.add_argument("--embedded-redis-url", default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=_run)
    check = sub.add_parser("check", help="validate a config and print what it sets up")
    check.add_argument("--config", required=True)
    check.add_argument("-v", "--verbose", action="store_true", help="print the resolved config")
    check.set_defaults(func=_check)
    migrate = sub.add_parser("migrate", help="bring the archive database's schema up to date")
    migrate.add_argument("--config", required=True)
    migrate.add_argument("--check", action="store_true", help="only print the schema version")
    migrate.set_defaults(func=_migrate)
    schema = sub.add_parser("schema", help="print the config JSON Schema")
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
