"""The PostgreSQL restart test on a cluster of its own (issue 29), so that it runs in the main pytest run:
the machine's server, and every other program's connections to it, are never touched.

test_postgres_restart_on_a_private_cluster runs tests/faults/test_postgres_restart.py in a pytest of its own
(`-m pg_restart`) with DATABASE_URL on a private cluster (tests/faults/private_postgres.py) and FAULTS_PG_CTL
restarting that cluster; its test database, workers and agents all use it. Redis is the suite's, on a queue
of its own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.faults.private_postgres import postgres_bindir, private_cluster

ROOT = Path(__file__).resolve().parents[2]
RESTART_TEST = Path(__file__).with_name("test_postgres_restart.py")


def test_a_private_cluster_starts_restarts_and_goes_away() -> None:
    with private_cluster() as pg:
        assert pg.port != 5432
        with psycopg.connect(pg.url("postgres"), connect_timeout=5) as conn:
            assert conn.execute("SELECT current_setting('port')").fetchone() == (str(pg.port),)
        done = subprocess.run([*pg.ctl, "restart"], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr + pg.log_tail()
        with psycopg.connect(pg.url("postgres"), connect_timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        data_dir = pg.log.parent
    assert not data_dir.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg.url("postgres"), connect_timeout=2)


def test_without_initdb_it_fails_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="initdb not found"):
        postgres_bindir(str(tmp_path / "nothing" / "*" / "bin"))


@pytest.mark.integration
def test_postgres_restart_on_a_private_cluster() -> None:
    with private_cluster() as pg:
        # A pytest of its own: none of this run's xdist or current-test variables.
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))},
            "DATABASE_URL": pg.url("gpumarket"),
            "FAULTS_PG_CTL": shlex.join(pg.ctl),
            "PYTHONPATH": str(ROOT),
        }
        args = [sys.executable, "-m", "pytest", "-m", "pg_restart", str(RESTART_TEST), "-q"]
        args += ["-p", "no:cacheprovider"]
        done = subprocess.run(
            args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-2000:]}\n{pg.log_tail()}"
        assert re.search(r"^1 passed", done.stdout, re.MULTILINE), done.stdout[-3000:]  # it ran, not skipped
