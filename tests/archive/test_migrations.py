"""The archive's schema: migrated up on PostgreSQL and SQLite to exactly the tables of
``gateway/archive/schema.py``, once even when replicas start together; a database migrated by a
newer release is refused by ``migrate``, by a gateway's start and by the CLI."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import inspect, select

from gateway.archive import schema, schema_v1
from gateway.archive.database import ArchiveDatabase
from gateway.archive.migrations import LATEST, SchemaTooNew, migrate, versions
from gateway.archive.service import ArchiveRefused
from gateway.config.archive import ArchiveSettings
from tests.support.cli import cli
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway


def database(url: str) -> ArchiveDatabase:
    return ArchiveDatabase.open(ArchiveSettings(url=url).database_url(Path(".")))


def columns(sync: Any) -> dict[str, set[str]]:
    found = inspect(sync)
    return {t: {c["name"] for c in found.get_columns(t)} for t in found.get_table_names()}


async def test_migrations_make_exactly_the_tables_of_the_schema_once(archive_url: str) -> None:
    db = database(archive_url)
    try:
        # Three replicas starting at once: one applies every version, the others find it applied.
        done = await asyncio.gather(*(migrate(db) for _ in range(3)))
        assert sorted(len(d.applied) for d in done) == [0, 0, LATEST]
        assert {d.after for d in done} == {LATEST}
        async with db.engine.connect() as conn:
            tables = await conn.run_sync(columns)
            rows = (await conn.execute(select(versions.c.version))).scalars().all()
        assert rows == list(range(1, LATEST + 1))
        expected = {t.name: {c.name for c in t.columns} for t in schema.metadata.sorted_tables}
        assert tables == {**expected, "xgw_schema": {"version", "applied_at"}}
        again = await migrate(db)
        assert again.applied == [] and again.before == LATEST
    finally:
        await db.close()


async def newer(url: str) -> None:
    db = database(url)
    try:
        await migrate(db)
        async with db.engine.begin() as conn:
            await conn.execute(versions.insert().values(version=LATEST + 1, applied_at=0))
    finally:
        await db.close()


async def test_a_schema_newer_than_the_release_is_refused(archive_url: str, prefix: str) -> None:
    await newer(archive_url)
    db = database(archive_url)
    try:
        with pytest.raises(SchemaTooNew, match=f"version {LATEST + 1}"):
            await migrate(db)
        with pytest.raises(SchemaTooNew):
            await migrate(db, apply=False)
    finally:
        await db.close()
    # The gateway does not start on it.
    config = base_config(prefix)
    config["archive"] = {"url": archive_url}
    gw = InProcessGateway(config)
    try:
        with pytest.raises(ArchiveRefused, match="migrated by a newer xpert-gateway"):
            await gw.start()
    finally:
        await gw.client.close()


def test_the_migrate_command_refuses_a_newer_schema(
    archive_url: str, prefix: str, tmp_path: Path
) -> None:
    asyncio.run(newer(archive_url))
    config = base_config(prefix)
    config["archive"] = {"url": archive_url}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("migrate", "--config", str(path))
    assert result.returncode == 1
    assert f"schema is version {LATEST + 1}" in result.stderr
    assert result.stdout == ""


def test_the_migrate_command_applies_then_reports_up_to_date(
    archive_url: str, prefix: str, tmp_path: Path
) -> None:
    config = base_config(prefix)
    config["archive"] = {"url": archive_url}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    check = cli("migrate", "--config", str(path), "--check")
    assert check.returncode == 1, check.stderr  # behind: a failure, for scripts and CI
    assert f"schema version 0 (this release's: {LATEST}; run migrate)" in check.stdout
    assert tables(archive_url) == set()  # and it wrote nothing, not even a file
    first = cli("migrate", "--config", str(path))
    assert first.returncode == 0, first.stderr
    assert f"schema version 0 -> {LATEST}" in first.stdout
    second = cli("migrate", "--config", str(path))
    assert f"schema version {LATEST}, up to date" in second.stdout
    current = cli("migrate", "--config", str(path), "--check")
    assert current.returncode == 0, current.stderr
    assert f"schema version {LATEST}, up to date" in current.stdout


def test_migrate_check_of_a_schema_one_version_behind_fails_and_changes_nothing(
    archive_url: str, prefix: str, tmp_path: Path
) -> None:
    async def at_version_1() -> None:
        db = database(archive_url)
        try:
            async with db.engine.begin() as conn:
                await conn.run_sync(schema_v1.metadata.create_all)
                await conn.run_sync(lambda c: versions.create(c))
                await conn.execute(versions.insert().values(version=1, applied_at=1))
        finally:
            await db.close()

    asyncio.run(at_version_1())
    before = tables(archive_url)
    config = base_config(prefix)
    config["archive"] = {"url": archive_url}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    check = cli("migrate", "--config", str(path), "--check")
    assert check.returncode == 1, check.stderr
    assert f"schema version 1 (this release's: {LATEST}; run migrate)" in check.stdout
    assert tables(archive_url) == before


def tables(url: str) -> set[str]:
    """The archive's tables (none for a SQLite file that does not exist, left uncreated)."""
    if url.startswith("sqlite") and not Path(url.split(":///", 1)[1]).exists():
        return set()

    async def names() -> set[str]:
        db = database(url)
        try:
            async with db.engine.connect() as conn:
                return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
        finally:
            await db.close()

    return asyncio.run(names())


def test_an_unreachable_database_is_reported_by_migrate(prefix: str, tmp_path: Path) -> None:
    config = base_config(prefix)
    config["archive"] = {
        "url": "postgresql://postgres@127.0.0.1:1/nowhere",
        "connectTimeoutSeconds": 2,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("migrate", "--config", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith("error: archive (PostgreSQL at 127.0.0.1:1/nowhere)")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql://db/x", "archive.url: expected postgresql://, sqlite://, not mysql://"),
        ("postgresql:///x", "archive.url: a PostgreSQL URL needs a host"),
        ("sqlite://", "archive.url: a SQLite URL needs a file"),
        ("postgresql://h:port/x", "archive.url: the port is not a number"),
    ],
)
def test_a_wrong_archive_url_is_a_config_error(
    url: str, problem: str, prefix: str, tmp_path: Path
) -> None:
    config = base_config(prefix)
    config["archive"] = {"url": url}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert problem in result.stderr


def test_check_says_where_the_archive_is_without_its_password(prefix: str, tmp_path: Path) -> None:
    config = base_config(prefix)
    config["archive"] = {"url": "postgresql://xgw:s3cret-pw@db.example:5433/xgw"}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("check", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "archive: PostgreSQL at db.example:5433/xgw\n" in result.stdout
    assert "s3cret" not in result.stdout + result.stderr
    del config["archive"]
    config["dataDir"] = str(tmp_path / "data")
    path.write_text(yaml.safe_dump(config))
    shown = cli("check", "--config", str(path)).stdout
    assert f"archive: embedded SQLite at {tmp_path / 'data' / 'archive.sqlite3'}\n" in shown


async def test_a_version_1_archive_is_migrated_with_its_rows_kept(archive_url: str) -> None:
    """As a database the first release made: version 2 adds the sessions' idle timeout."""
    db = database(archive_url)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(schema_v1.metadata.create_all)
            await conn.run_sync(versions.metadata.create_all)
            await conn.execute(versions.insert().values(version=1, applied_at=0))
            await conn.execute(
                schema_v1.sessions.insert().values(
                    id="s1",
                    integration_id="c",
                    chat_id="g",
                    turns=0,
                    artifacts=[],
                    archived_at=1,
                    last_active_at=5,
                )
            )
        done = await migrate(db)
        assert (done.before, done.applied) == (1, list(range(2, LATEST + 1)))
        async with db.engine.connect() as conn:
            tables = await conn.run_sync(columns)
            [row] = (await conn.execute(select(schema.sessions))).all()
        assert "timeout_ms" in tables["sessions"]
        assert row.id == "s1" and row.last_active_at == 5 and row.timeout_ms is None
    finally:
        await db.close()
