"""A session nobody ended - left idle past ``sessionTimeoutSeconds``, its Redis binding simply
expiring - gets an end in the archive: last activity + the timeout it opened with, by
"timeout" (PostgreSQL and SQLite); a later turn that reaches the archive after that clears it,
and the end follows the new last activity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.ends import end_idle
from gateway.archive.migrations import migrate
from gateway.archive.schema import sessions
from gateway.archive.writer import batch_of, write
from gateway.config.archive import ArchiveSettings
from tests.support.archive import archive_config, outbox_entry, rows, turn_record
from tests.support.configs import base_config
from tests.support.helpers import Gateways
from tests.support.waits import eventually


async def test_a_session_left_idle_ends_at_its_last_activity_plus_its_timeout(
    archive_url: str, prefix: str, gateways: Gateways
) -> None:
    config = archive_config(prefix, archive_url)
    config["integrations"] = base_config(prefix, sessionTimeoutSeconds=1)["integrations"]
    gw = await gateways(config)
    await gw.client.send("then nothing for a while")
    await gw.client.wait_cards()

    async def ended() -> dict[str, Any] | None:
        found = await rows(archive_url, sessions)
        return found[0] if found and found[0]["ended_at"] is not None else None

    session = await eventually(ended, timeout=20)
    assert session["timeout_ms"] == 1000 and session["turns"] == 1
    assert session["ended_by"] == "timeout"
    assert session["ended_at"] == session["last_active_at"] + 1000


def _opened(session_id: str, timeout_ms: int | None) -> str:
    body: dict[str, Any] = {
        "sessionId": session_id, "integrationId": "c", "chatId": "g1", "openedAt": 500,
    }  # fmt: skip
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    return json.dumps(body)


async def test_a_later_turn_moves_an_idle_end_and_an_explicit_end_is_kept(
    archive_url: str,
) -> None:
    db = ArchiveDatabase.open(ArchiveSettings(url=archive_url).database_url(Path(".")))

    async def ends() -> dict[str, tuple[Any, Any]]:
        async with db.engine.connect() as conn:
            found = await conn.execute(
                select(sessions.c.id, sessions.c.ended_at, sessions.c.ended_by)
            )
            return {r.id: (r.ended_at, r.ended_by) for r in found}

    try:
        await migrate(db)
        first = [
            outbox_entry("1-0", "session", "s1", _opened("s1", 1000)),
            outbox_entry("2-0", "turn", "t1-a", turn_record("t1-a", 1_000, "first")),
            outbox_entry("3-0", "session", "s2", _opened("s2", None)),  # no timeout known: no end
        ]
        await write(db, batch_of(first, now_ms=1_100), now_ms=1_100)
        assert await end_idle(db, 1_999) == 0  # idle 999 ms of its 1000
        assert await end_idle(db, 2_001) == 1
        assert await ends() == {"s1": (2_000, "timeout"), "s2": (None, None)}
        assert await end_idle(db, 9_000) == 0  # once

        # A turn that finished at 1 800 reaches the archive late (it was in the outbox).
        late = [outbox_entry("4-0", "turn", "t2-a", turn_record("t2-a", 1_800, "second"))]
        await write(db, batch_of(late, now_ms=3_000), now_ms=3_000)
        assert (await ends())["s1"] == (None, None)
        assert await end_idle(db, 2_700) == 0
        assert await end_idle(db, 3_000) == 1
        assert (await ends())["s1"] == (2_800, "timeout")

        # An end someone gave (/new, End, the admin API) is theirs: no pass or turn moves it.
        end = '{"sessionId":"s1","integrationId":"c","endedAt":2500,"by":"user"}'
        ended = [outbox_entry("5-0", "session_end", "s1", end)]
        await write(db, batch_of(ended, now_ms=1), now_ms=1)
        later = [outbox_entry("6-0", "turn", "t3-a", turn_record("t3-a", 2_400, "third"))]
        await write(db, batch_of(later, now_ms=3_100), now_ms=3_100)
        assert await end_idle(db, 99_000) == 0
        assert (await ends())["s1"] == (2_500, "user")
    finally:
        await db.close()
