"""structlog set-up: a readable console format in a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

import structlog

# The ids of the event being ingested (``gateway.pipeline``), merged into every line logged while
# it is: one context variable set per message where structlog's ``bind_contextvars`` sets one per
# key and builds a token map (issue 15). Tasks started meanwhile inherit it, as they inherit
# structlog's; a key bound by structlog, or passed to the log call, wins.
EVENT_IDS: ContextVar[tuple[str, str] | None] = ContextVar("xgw_event_ids", default=None)


def merge_event_ids(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    ids = EVENT_IDS.get()
    if ids is not None:
        event_dict.setdefault("integration_id", ids[0])
        event_dict.setdefault("event_id", ids[1])
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
            merge_event_ids,
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
