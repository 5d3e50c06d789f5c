"""Shared by the benchmarks that need a database of their own."""

from __future__ import annotations


def fresh_database(url: str) -> None:
    """Drop and re-create the PostgreSQL database named by `url` (connecting to `postgres` to do it)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
