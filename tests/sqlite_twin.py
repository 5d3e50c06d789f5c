"""An in-memory SQLite twin of the test database, for differential tests of the SQL-dialect branches.

`make run`'s embedded default is SQLite, so each branch's non-PostgreSQL path must give PostgreSQL's answers
on SQLite itself: some of that SQL (MAX(a, b) as a scalar) PostgreSQL rejects, and JSON lookups compile to
different SQL there. `on_sqlite()` reads every table's rows from PostgreSQL (a test's few), then swaps the
default connection for an in-memory SQLite database holding the same tables (created from the models, as
migrate would leave them) and the same rows, primary keys kept; code under test runs unchanged (`django.db.connection` and the ORM both follow
the default alias). On leaving, the PostgreSQL connection (still inside the test's transaction) comes back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.apps import apps
from django.db import connection, connections, models
from django.db.utils import load_backend


def _rows(model: type[models.Model]) -> list[dict[str, Any]]:
    names = [f.attname for f in model._meta.concrete_fields]
    return list(model._base_manager.order_by("pk").values(*names))


def _insert(cursor: Any, twin: Any, model: type[models.Model], rows: list[dict[str, Any]]) -> None:
    """The rows as they are: not through bulk_create, whose pre_save would stamp auto_now fields anew."""
    if not rows:
        return
    fields = model._meta.concrete_fields
    quote = twin.ops.quote_name
    cursor.executemany(
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})",
        [[f.get_db_prep_save(row[f.attname], twin) for f in fields] for row in rows],
    )


@contextmanager
def sqlite_default() -> Iterator[Any]:
    """Run the block with the default connection on a new, empty in-memory SQLite database (no tables);
    yields that connection. Everything that follows the default alias (the ORM, `django.db.connection`,
    RunPython migrations) runs on it."""
    original = connections["default"]
    settings = {**original.settings_dict, "ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    settings["OPTIONS"] = {}  # PostgreSQL's (a pool) mean nothing to sqlite3.connect
    twin = load_backend("django.db.backends.sqlite3").DatabaseWrapper(settings, "default")
    connections["default"] = twin
    try:
        assert connection.vendor == "sqlite"  # what the code under test will see
        yield twin
    finally:
        connections["default"] = original
        twin.close()


@contextmanager
def on_sqlite() -> Iterator[Any]:
    """Run the block with the default connection on an in-memory SQLite database holding the rows the test
    database holds now; yields that connection."""
    tables = [m for m in apps.get_models() if m._meta.managed and not m._meta.proxy]
    rows = {model: _rows(model) for model in tables}  # read while PostgreSQL is still the default
    with sqlite_default() as twin:
        with twin.schema_editor() as editor:  # switches foreign-key checks off while it runs
            for model in tables:
                editor.create_model(model)  # and its many-to-many tables
        with twin.constraint_checks_disabled(), twin.cursor() as cursor:  # table by table, in any order
            for model, found in rows.items():
                _insert(cursor, twin, model, found)
        yield twin
