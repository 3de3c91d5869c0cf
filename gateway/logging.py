"""structlog set-up: a readable console format in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

import structlog

# The ids of what the code running now is about - the event being ingested (gateway.pipeline),
# the turn being run (gateway.turns.runner) - merged into every line it logs: one context
# variable set per message or turn, where structlog's ``bind_contextvars`` sets one per key and
# builds a token map (issue 15). Tasks started meanwhile inherit it, as they inherit
# structlog's; a key bound by structlog, or passed to the log call, wins. An inner ``set``
# replaces the pairs, so it names every id it wants on its lines.
LOG_IDS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("xgw_log_ids", default=())


def merge_log_ids(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in LOG_IDS.get():
        event_dict.setdefault(key, value)
    return event_dict


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format="%(message)s")
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
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        # Configured once per process (reload does not touch logging): a cached logger saves a
        # bind per log call, debug calls on the hot path included.
        cache_logger_on_first_use=True,
    )
