"""Helpers for testing a model move between apps (tests/test_migrations_inventory.py, test_migrations_usage.py):
a scratch PostgreSQL database, migrating it to given targets, reading every row and content type, and the
check that a move's migration runs no SQL on the tables it moves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from typing import Any

from django.apps.registry import Apps
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor


@contextmanager
def scratch_postgres() -> Iterator[Any]:
    """The block runs with the default connection on a new, empty PostgreSQL database, dropped afterwards."""
    original = connections["default"]
    name = f"{original.settings_dict['NAME']}_model_move"
    with original._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    settings = {**original.settings_dict, "NAME": name, "CONN_MAX_AGE": 0}
    # A pool would keep connections open and DROP DATABASE would refuse.
    settings["OPTIONS"] = {k: v for k, v in settings.get("OPTIONS", {}).items() if k != "pool"}
    scratch = original.__class__(settings, "default")
    connections["default"] = scratch
    ContentType.objects.clear_cache()
    try:
        yield scratch
    finally:
        connections["default"] = original
        scratch.close()
        ContentType.objects.clear_cache()
        with original._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')


def migrate_to(db: Any, targets: list[tuple[str, str | None]]) -> Apps:
    executor = MigrationExecutor(db)
    executor.migrate(targets)
    # (app, None) means "none of this app" to migrate(); project_state wants migrations only.
    return MigrationExecutor(db).loader.project_state([(a, m) for a, m in targets if m is not None]).apps


def _tables(db: Any, cursor: Any) -> list[str]:
    return sorted(set(db.introspection.table_names(cursor)) - {"django_migrations", "django_content_type"})


def table_columns(db: Any) -> dict[str, list[str]]:
    """Each table's columns now, to read the same columns later with all_rows(columns=...)."""
    with db.cursor() as cursor:
        return {
            t: [c.name for c in db.introspection.get_table_description(cursor, t)]
            for t in _tables(db, cursor)
        }


def all_rows(db: Any, columns: dict[str, list[str]] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the migration records and the content types (checked on their own).
    `columns` (from table_columns before a migration): only those columns of the tables named there, so a
    column a later migration adds (with its default) does not read as a changed row."""
    with db.cursor() as cursor:
        rows = {}
        for table in _tables(db, cursor):
            names = (columns or {}).get(table)
            select = ", ".join(f'"{c}"' for c in names) if names else "*"
            cursor.execute(f'SELECT {select} FROM "{table}" ORDER BY 1')
            rows[table] = cursor.fetchall()
    return rows


def content_types(db: Any) -> dict[int, tuple[str, str]]:
    with db.cursor() as cursor:
        cursor.execute("SELECT id, app_label, model FROM django_content_type")
        return {pk: (app, model) for pk, app, model in cursor.fetchall()}


def sql_statements(app: str, name: str, *, backwards: bool) -> list[str]:
    """What `manage.py sqlmigrate` would run for one migration, comments left out: for a state-only move, at
    most BEGIN and COMMIT (a content-type rename is Python and shows nothing)."""
    out = StringIO()
    call_command("sqlmigrate", app, name, backwards=backwards, stdout=out)
    return [line for line in out.getvalue().splitlines() if line and not line.startswith("--")]
