"""Log lines carry the ids of what they are about (docs/architecture.md, "The edge": structlog with
the session, integration and event ids bound to each line): a line logged while a message is
ingested -
by intake itself, and by a task it starts - names the message's integration and event, and a
line of its turn names the turn, conversation and session too, as the daemon writes them
(``gateway.logging.configure_logging``, JSON lines on stderr)."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from gateway.logging import LOG_IDS, configure_logging
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The daemon's logging set-up writing to a buffer; structlog's set-up restored after."""
    saved = structlog.get_config()
    buffer = io.StringIO()
    monkeypatch.setattr("sys.stderr", buffer)
    configure_logging("debug", "json")
    # No logger may keep this set-up (and the buffer) once the test is over.
    structlog.configure(cache_logger_on_first_use=False)
    try:
        yield buffer
    finally:
        structlog.configure(**saved)


def lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.startswith("{")]


async def test_lines_logged_during_intake_name_the_event(
    log_lines: io.StringIO, console: ConsoleClient
) -> None:
    event_id = await console.send("/help", event_id="evt-log-1")
    assert event_id == "evt-log-1"
    found = [line for line in lines(log_lines) if line.get("event") in ("command", "ingested")]
    assert {line["event"] for line in found} == {"command", "ingested"}
    for line in found:
        assert line["integration_id"] == console.integration_id
        assert line["event_id"] == "evt-log-1"


async def test_a_turns_lines_name_its_turn_conversation_and_session(
    log_lines: io.StringIO, console: ConsoleClient
) -> None:
    await console.send("hello", event_id="evt-log-2")
    await console.wait_cards()
    finished = await eventually(
        lambda: [line for line in lines(log_lines) if line.get("event") == "turn finished"]
    )
    (line,) = finished
    assert line["event_id"] == "evt-log-2"
    assert line["integration_id"] == console.integration_id
    assert line["conversation"] == f"{console.integration_id}|p2p:dm-alice"
    assert line["turn_id"] and line["session_id"]


async def test_the_ids_reach_tasks_and_yield_to_keys_given_explicitly(
    log_lines: io.StringIO,
) -> None:
    log = structlog.get_logger("tests.logging")

    async def later() -> None:
        log.info("from a task")

    token = LOG_IDS.set((("integration_id", "integ-a"), ("event_id", "evt-a")))
    try:
        task = asyncio.get_running_loop().create_task(later())
        log.info("explicit", event_id="evt-explicit")
        with structlog.contextvars.bound_contextvars(integration_id="integ-bound"):
            log.info("bound")
    finally:
        LOG_IDS.reset(token)
    await task
    log.info("after")
    by_event = {line["event"]: line for line in lines(log_lines)}
    assert by_event["from a task"]["event_id"] == "evt-a"
    assert by_event["from a task"]["integration_id"] == "integ-a"
    assert by_event["explicit"]["event_id"] == "evt-explicit"
    assert by_event["bound"]["integration_id"] == "integ-bound"
    assert "event_id" not in by_event["after"]


class _Failing(io.StringIO):
    """A stderr whose writes fail with ``error`` while ``failing`` is set."""

    def __init__(self, error: int) -> None:
        super().__init__()
        self.error = error
        self.failing = True

    def write(self, text: str) -> int:
        if self.failing:
            raise OSError(self.error, os.strerror(self.error))
        return super().write(text)


def test_a_line_that_cannot_be_written_is_dropped_and_only_a_gone_reader_ends_the_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A full disk loses the line it failed on, not the lines after; EPIPE (the reader is gone)
    # ends the stream. Neither reaches the code that logged.
    saved = structlog.get_config()
    try:
        for error, later in ((errno.ENOSPC, True), (errno.EPIPE, False)):
            stream = _Failing(error)
            monkeypatch.setattr("sys.stderr", stream)
            configure_logging("info", "json")  # a StringIO has no descriptor to silence
            structlog.configure(cache_logger_on_first_use=False)
            log = structlog.get_logger("test")
            log.info("lost")
            stream.failing = False
            log.info("after")
            assert ("after" in stream.getvalue()) is later
            assert "lost" not in stream.getvalue()
    finally:
        structlog.configure(**saved)
