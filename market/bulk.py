"""Bulk writes for the round commit: one statement per table whatever the row count.

On PostgreSQL rows go in through COPY (psycopg 3's `cursor.copy`), written as COPY's text format built with
`str.join` per column and per row: no model instances, no per-value adaptation, and none of the array parsing
an `INSERT ... SELECT unnest(...)` pays. Ids a caller needs back (a lease's, for its GPUs and commands) are
taken from the table's sequence first, in one `nextval` query, and sent with the rows. Updates of many rows
join the table to the new values sent as arrays (`UPDATE ... FROM ROWS FROM (unnest(...))`). Elsewhere
(SQLite for the local demo) the same calls fall back to Django's bulk_create and grouped updates; both paths
write the same rows (tests/market/test_bulk.py runs both on one database). Either way ids come back in row
order, as Django's own bulk_create gives them.
"""

from __future__ import annotations

import json
import typing
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from django.db import connection, models
from django.db.models.expressions import RawSQL
from django.db.models.options import Options

_PG_TYPES = {
    "AutoField": "integer",
    "BigAutoField": "bigint",
    "BigIntegerField": "bigint",
    "IntegerField": "integer",
    "PositiveIntegerField": "integer",
    "PositiveSmallIntegerField": "smallint",
    "BooleanField": "boolean",
    "CharField": "text",
    "TextField": "text",
    "DateTimeField": "timestamptz",
    "JSONField": "jsonb",
    "FloatField": "double precision",
}

# One encoder for every JSON value: json.dumps with options builds a new one per call (a third of its cost
# for a round's 70,000 command payloads).
_JSON = json.JSONEncoder(separators=(",", ":"))
# Rows per COPY message batch: bounds the text held at once (a few megabytes) without a call per row.
_COPY_ROWS = 20_000
# What COPY's text format gives a meaning to inside a value, and how to write it literally.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def insert(model: type[models.Model], columns: Mapping[str, Sequence[Any]], *, ids: bool = True) -> list[int]:
    """Insert rows given as columns ({field attname: values}); returns the new primary keys in row order, or
    with ids=False nothing ([]): 20,000 bid outcomes need no ids sent back."""
    n = _length(columns)
    if n == 0:
        return []
    if connection.vendor != "postgresql":
        names = list(columns)
        rows = [
            model(**dict(zip(names, values, strict=True))) for values in zip(*columns.values(), strict=True)
        ]
        made = model._default_manager.bulk_create(rows, batch_size=2000)
        return [obj.pk for obj in made] if ids else []
    meta = model._meta
    fields = [_field(meta, name) for name in columns]  # get_field knows attnames ("round_id") too
    texts = [_copy_texts(values, _cast(f)) for values, f in zip(columns.values(), fields, strict=True)]
    names = [_column(f) for f in fields]
    connection.ensure_connection()
    # psycopg's own cursor: Django's wrapper has no COPY.
    with psycopg.Cursor(connection.connection) as cursor:
        new_ids: list[int] = []
        if ids:
            new_ids = _reserve_ids(cursor, meta.db_table, meta.pk.column, n)
            texts.insert(0, list(map(str, new_ids)))
            names.insert(0, meta.pk.column)
        cols = ", ".join(connection.ops.quote_name(name) for name in names)
        with cursor.copy(f"COPY {connection.ops.quote_name(meta.db_table)} ({cols}) FROM STDIN") as copy:
            for start in range(0, n, _COPY_ROWS):
                chunk = [column[start : start + _COPY_ROWS] for column in texts]
                copy.write("\n".join(map("\t".join, zip(*chunk, strict=True))) + "\n")
    return new_ids


def upsert(
    model: type[models.Model],
    columns: Mapping[str, Sequence[Any]],
    *,
    unique: Sequence[str],
    update: Sequence[str] = (),
) -> None:
    """Insert rows given as columns; a row whose `unique` columns match an existing row's updates that row's
    `update` fields instead (none: the existing row stays). On PostgreSQL one `INSERT ... SELECT` of arrays
    `ON CONFLICT`; elsewhere bulk_create with update_conflicts or ignore_conflicts."""
    n = _length(columns)
    if n == 0:
        return
    if connection.vendor != "postgresql":
        names = list(columns)
        rows = [
            model(**dict(zip(names, values, strict=True))) for values in zip(*columns.values(), strict=True)
        ]
        unique_fields = [model._meta.get_field(name).name for name in unique]
        model._default_manager.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=bool(update),
            ignore_conflicts=not update,
            unique_fields=unique_fields if update else None,
            update_fields=[model._meta.get_field(name).name for name in update] if update else None,
        )
        return
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [_field(meta, name) for name in columns]
    casts = [_cast(f) for f in fields]
    params = [_literal(values, cast) for values, cast in zip(columns.values(), casts, strict=True)]
    sources = ", ".join(f"unnest(%s::{cast}[])" for cast in casts)
    conflict = ", ".join(quote(_column(_field(meta, name))) for name in unique)
    action = (
        "DO UPDATE SET "
        + ", ".join(
            f"{quote(c)} = EXCLUDED.{quote(c)}" for c in (_column(_field(meta, name)) for name in update)
        )
        if update
        else "DO NOTHING"
    )
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(_column(f)) for f in fields)}) "
        f"SELECT * FROM ROWS FROM ({sources}) ON CONFLICT ({conflict}) {action}"
    )
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params)


def update(model: type[models.Model], pks: Sequence[int], columns: Mapping[str, Sequence[Any]]) -> int:
    """Set each row's fields (columns: {field attname: values}, one value per primary key in `pks`);
    returns the rows updated. On PostgreSQL one `UPDATE ... FROM` joining the rows to the values sent as
    arrays; elsewhere one ORM update per distinct set of values (a round's job rows all get the same)."""
    if _length({"pk": pks, **columns}) == 0:
        return 0
    if connection.vendor != "postgresql":
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for pk, *values in zip(pks, *columns.values(), strict=True):
            groups[tuple(values)].append(pk)
        manager = model._default_manager
        return sum(
            manager.filter(pk__in=group).update(**dict(zip(columns, values, strict=True)))
            for values, group in groups.items()
        )
    meta = model._meta
    quote = connection.ops.quote_name
    fields = [_field(meta, name) for name in columns]
    casts = [_cast(meta.pk), *(_cast(f) for f in fields)]
    params = [_literal(values, cast) for values, cast in zip([pks, *columns.values()], casts, strict=True)]
    sources = ", ".join(f"unnest(%s::{cast}[])" for cast in casts)
    names = ["pk", *(f"v{i}" for i in range(len(fields)))]
    sets = ", ".join(f"{quote(_column(f))} = v.v{i}" for i, f in enumerate(fields))
    table = quote(meta.db_table)
    sql = (
        f"UPDATE {table} SET {sets} FROM ROWS FROM ({sources}) AS v({', '.join(names)}) "
        f"WHERE {table}.{quote(meta.pk.column)} = v.pk"
    )
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _length(columns: Mapping[str, Sequence[Any]]) -> int:
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns of unequal length: { {k: len(v) for k, v in columns.items()} }")
    return lengths.pop()


def _field(meta: Options[Any], name: str) -> models.Field[Any, Any]:
    """The model's field by name or attname. Only concrete fields are columns to write: a reverse relation or
    generic key named here is a caller's mistake."""
    field = meta.get_field(name)
    if not isinstance(field, models.Field):
        raise ValueError(f"{meta.db_table} has no column for {name!r}")
    return field


def _column(field: models.Field[Any, Any]) -> str:
    if not field.column:  # a field with no column of its own
        raise ValueError(f"{field.name} has no column")
    return str(field.column)


def _cast(field: Any) -> str:
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    return _PG_TYPES[target.get_internal_type()]


def _reserve_ids(cursor: psycopg.Cursor[Any], table: str, column: str, n: int) -> list[int]:
    """`n` new ids from the table's own sequence, ascending: what the rows would have drawn inserted one by
    one, so concurrent writers of the table never collide with them."""
    cursor.execute("SELECT pg_get_serial_sequence(%s, %s)", [table, column])
    sequence = cursor.fetchone()
    # The sequence named once (a function of the table's name would be looked up for every row), and one
    # text back, not a row per id: 70,000 rows cost psycopg more than the sequence does.
    cursor.execute(
        "SELECT string_agg(nextval(%s::regclass)::text, ',') FROM generate_series(1, %s)",
        [sequence[0] if sequence else None, n],
    )
    ids = cursor.fetchone()
    assert ids is not None
    return sorted(map(int, ids[0].split(",")))


def _copy_texts(values: Sequence[Any], cast: str) -> list[str]:
    """Each value as COPY's text format writes it: NULL as \\N, the format's special characters escaped."""
    if cast in ("bigint", "integer", "smallint") and None not in values:
        return list(map(str, values))  # at C speed: ints need no escaping
    if cast == "boolean":
        return ["\\N" if v is None else ("t" if v else "f") for v in values]
    texts = _texts(values, cast)
    plain = [t for t in texts if t is not None]
    joined = "".join(plain)
    if not any(c in joined for c in "\\\t\n\r"):  # usually nothing to escape: no per-value work
        return ["\\N" if t is None else t for t in texts] if len(plain) < len(texts) else plain
    return ["\\N" if t is None else t.translate(_COPY_ESCAPES) for t in texts]


def any_of(values: Sequence[int] | Sequence[str], cast: str = "bigint") -> Sequence[Any] | RawSQL:
    """For `filter(pk__in=any_of(ids))` with thousands of values: on PostgreSQL one array parameter
    (`IN (SELECT unnest(%s::bigint[]))`) instead of a placeholder per value, which Django compiles and
    psycopg adapts one by one (a tenth of a second per 10,000); elsewhere the plain list."""
    if connection.vendor != "postgresql":
        return values
    # The array goes as one text literal joined in C, not a list psycopg would adapt value by value.
    return RawSQL(f"SELECT unnest(%s::{cast}[])", [_literal(values, cast)])


def _literal(values: Sequence[Any], cast: str) -> str:
    """A PostgreSQL array literal of `values` (None is NULL)."""
    if cast in ("bigint", "integer", "smallint"):
        if None not in values:  # the common case, at C speed (values are ints already)
            return "{" + ",".join(map(str, values)) + "}"
        return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"
    if cast == "boolean":
        return "{" + ",".join("NULL" if v is None else ("t" if v else "f") for v in values) + "}"
    texts = _texts(values, cast)
    if None not in texts:
        plain = typing.cast(list[str], texts)  # no None in texts: checked just above
        joined = "".join(plain)
        if '"' not in joined and "\\" not in joined:  # nothing to escape: quote them all in one join
            return '{"' + '","'.join(plain) + '"}'
    return "{" + ",".join("NULL" if v is None else _quote(v) for v in texts) + "}"


def _texts(values: Sequence[Any], cast: str) -> list[str | None]:
    """Each value as text; a column often repeats one value (the round's timestamp), converted once."""
    if cast == "jsonb":
        return [None if v is None else _text(v, cast) for v in values]
    if cast == "text" and all(type(v) is str for v in values):
        return list(values)
    memo: dict[Any, str] = {}
    return [None if v is None else memo.get(v) or memo.setdefault(v, _text(v, cast)) for v in values]


def _text(value: Any, cast: str) -> str:
    if cast == "jsonb":
        return _JSON.encode(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
