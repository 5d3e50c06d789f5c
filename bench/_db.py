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


def django_on_fresh_database(url: str) -> None:
    """A fresh database at `url`, Django set up on it and migrated (for a benchmark run as a script)."""
    import os

    fresh_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("TLS", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
