"""structlog set-up: a readable console format in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
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
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        # Configured once per process (reload does not touch logging): a cached logger saves a
        # bind per log call, debug calls on the hot path included.
        cache_logger_on_first_use=True,
    )
