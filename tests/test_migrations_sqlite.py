"""Every migration on SQLite, make run's embedded default: the suite's database is PostgreSQL, so nothing else
applies them there. Migrations hold a dialect branch (market 0005 sets the job table's fillfactor on
PostgreSQL only) and RunPython steps (0004, 0007): applied to an empty in-memory SQLite database they must
leave the tables and columns migrate leaves on PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.sqlite_twin import sqlite_default

pytestmark = pytest.mark.django_db


def _schema(db: Any) -> dict[str, set[str]]:
    with db.cursor() as cursor:
        return {
            table: {column.name for column in db.introspection.get_table_description(cursor, table)}
            for table in db.introspection.table_names(cursor)
        }


def test_every_migration_applies_on_sqlite_and_leaves_postgresqls_tables():
    on_postgres = _schema(connection)
    with sqlite_default() as twin:
        executor = MigrationExecutor(twin)
        leaves = executor.loader.graph.leaf_nodes()
        executor.migrate(leaves)
        assert MigrationExecutor(twin).migration_plan(leaves) == []  # read back: nothing left to apply
        on_sqlite = _schema(twin)
    assert on_sqlite == on_postgres
    assert {"market_job", "market_lease", "nodeagent_usagereport"} <= set(on_sqlite)


def test_the_job_tables_fillfactor_is_set_on_postgresql_only():
    """The one dialect branch of the migrations (market 0005): PostgreSQL's job table leaves room in each page
    for the rounds' HOT updates; SQLite has no such setting (the test above applies it there as a no-op)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'market_job'")
        assert cursor.fetchone() == (["fillfactor=70"],)
