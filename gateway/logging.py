"""structlog set-up: a readable console format in a terminal, JSON lines otherwise; a log line
that cannot be written is dropped, never an error (``LogStream``)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import IO, Any, TextIO, cast

import structlog

# The ids of what the code running now is about - the event being ingested
# (gateway.intake.pipeline), the turn being run (gateway.turns.runner) - merged into every line it
# logs: one context variable set per message or turn, where structlog's ``bind_contextvars`` sets
# one per key and builds a token map (issue 15). Tasks started meanwhile inherit it, as they inherit
# structlog's; a key bound by structlog, or passed to the log call, wins. An inner ``set``
# replaces the pairs, so it names every id it wants on its lines.
LOG_IDS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("xgw_log_ids", default=())


def merge_log_ids(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in LOG_IDS.get():
        event_dict.setdefault(key, value)
    return event_dict


def silence(file: IO[Any]) -> None:
    """Point ``file``'s descriptor at /dev/null: what is still buffered, and whatever is written
    to it later, goes nowhere instead of failing again (the interpreter flushes stdout and
    stderr at exit, and would report a broken pipe there)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, file.fileno())
        finally:
            os.close(devnull)


# Errors after which the stream never takes a line again: the reader of the pipe is gone
# (`run 2>&1 | tee log`, the tee ended by the Ctrl-C that also stops us), the terminal closed.
_GONE = frozenset({errno.EPIPE, errno.EBADF, errno.EIO, errno.ENXIO})


class LogStream:
    """Where log lines go (stderr), for structlog and the standard library's logging. A write
    that fails drops its line instead of raising into the code that logged - a signal handler,
    the shutdown: a log line never keeps the daemon running, nor stops it. Once the other end
    is gone for good, the descriptor is pointed at /dev/null and later lines are discarded."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._file.write(text)
            except (OSError, ValueError) as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except (OSError, ValueError) as exc:
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        # ValueError: the file object was closed. Others (a full disk, EAGAIN on a
        # non-blocking pipe) lose this line only.
        if isinstance(exc, ValueError) or (isinstance(exc, OSError) and exc.errno in _GONE):
            self.gone = True
            silence(self._file)


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    stream = LogStream(sys.stderr)
    logging.basicConfig(level=level.upper(), stream=stream, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            merge_log_ids,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # One write per line (PrintLogger writes the line and its newline apart, so with
        # PYTHONUNBUFFERED the workers of a supervisor, sharing stderr, could merge lines).
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, stream)),
        # Configured once per process (reload does not touch logging): a cached logger saves a
        # bind per log call, debug calls on the hot path included.
        cache_logger_on_first_use=True,
    )
