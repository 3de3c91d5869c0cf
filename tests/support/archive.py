"""The archive's tests' helpers: a config with the archive on, the rows of an archive table, an
outbox entry and a turn record as the gateway writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.config.archive import ArchiveSettings
from sessions import OutboxEntry
from tests.support.configs import base_config


def archive_config(prefix: str, url: str, **archive: Any) -> dict[str, Any]:
    config = base_config(prefix)
    config["archive"] = {"url": url, "leaseSeconds": 1, **archive}
    return config


async def rows(url: str, table: Any) -> list[dict[str, Any]]:
    db = ArchiveDatabase.open(ArchiveSettings(url=url).database_url(Path(".")))
    try:
        async with db.engine.connect() as conn:
            found = await conn.execute(select(table))
            return [dict(r._mapping) for r in found]
    finally:
        await db.close()


def outbox_entry(stream_id: str, kind: str, entry_id: str, body: str) -> OutboxEntry:
    return OutboxEntry(stream_id=stream_id, integration_id="c", kind=kind, id=entry_id, body=body)


def turn_record(record_id: str, end: int, answer: str) -> str:
    return json.dumps(
        {"id": record_id, "turnId": record_id[:2], "integrationId": "c", "platform": "console",
         "chatId": "g1", "chatType": "group", "conversation": "c:g1", "sessionId": "s1",
         "senderId": "alice", "trigger": {"kind": "message"}, "input": {"text": "hi"},
         "expert": {"id": "echo"}, "usage": None, "outcome": "done", "error": "",
         "answer": answer, "artifacts": [{"kind": "link", "url": "https://x.example/r",
                                          "name": ""}],
         "timings": {"receivedAt": end - 100, "finishedAt": end}, "replica": "r1"}
    )  # fmt: skip
