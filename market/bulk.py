"""Bulk inserts for the round commit: one statement per table whatever the row count.

On PostgreSQL the rows go in as one `INSERT ... SELECT * FROM unnest(...) RETURNING id` whose arrays are sent
as text literals built with `str.join`, which is several times cheaper than building a model instance and
adapting every value for each row, and is what keeps a round of thousands of winners within seconds.
Elsewhere (SQLite for the local demo) it falls back to Django's bulk_create. Either way the ids come back in
row order, as Django's own bulk_create relies on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from django.db import connection, models
from django.db.models.expressions import RawSQL

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
}


def insert(model: type[models.Model], columns: Mapping[str, Sequence[Any]], *, ids: bool = True) -> list[int]:
    """Insert rows given as columns ({field attname: values}); returns the new primary keys in row order, or
    with ids=False nothing ([]): 20,000 bid outcomes need no ids sent back."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"columns of unequal length: { {k: len(v) for k, v in columns.items()} }")
    n = lengths.pop()
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
    fields = [meta.get_field(name) for name in columns]  # get_field knows attnames ("round_id") too
    casts = []
    for f in fields:
        target = f.target_field if isinstance(f, models.ForeignKey) else f
        casts.append(_PG_TYPES[target.get_internal_type()])
    # Each column is one array parameter, except JSON ones: a single JSON array whose elements
    # jsonb_array_elements gives back, so the values are encoded by one json.dumps (in C) instead of one
    # dumps and one quoting per row. ROWS FROM zips the columns row by row, as unnest(a, b, ...) does.
    params, sources = [], []
    for values, cast in zip(columns.values(), casts, strict=True):
        if cast == "jsonb" and None not in values:
            params.append(json.dumps(values, separators=(",", ":")))
            sources.append("jsonb_array_elements(%s::jsonb)")
        else:
            params.append(_literal(values, cast))
            sources.append(f"unnest(%s::{cast}[])")
    cols = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({cols}) "
        f"SELECT * FROM ROWS FROM ({', '.join(sources)})"
    )
    if ids:
        sql += f" RETURNING {connection.ops.quote_name(meta.pk.column)}"
    connection.ensure_connection()
    # psycopg's own cursor, not Django's client-side binding one: the arrays (megabytes of text) go as
    # parameters beside the statement instead of being escaped and pasted into it, a tenth of the commit.
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()] if ids else []


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
        plain: list[str] = texts  # type: ignore[assignment]
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
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
