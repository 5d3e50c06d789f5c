"""A throwaway PostgreSQL cluster for the test that restarts its server (issue 29).

tests/faults/test_postgres_restart.py cuts every connection to the server it runs on. On the machine's own
server that cuts every other program's sessions too, so it runs on a cluster of its own instead: `initdb` in
a temporary directory, listening on 127.0.0.1 on a free port (and a socket in that directory only), started
and restarted with `pg_ctl`, stopped and deleted afterwards. PostgreSQL refuses to run as root, so as root
both run as the `postgres` user (runuser), owner of the directory.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# Where Debian and Ubuntu install the server's programs, one directory per major version.
BIN_GLOB = "/usr/lib/postgresql/*/bin"
# Off because the cluster is thrown away: no fsync, and small, so it starts in a second or two.
SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "100",
}


@dataclass(frozen=True)
class PrivateCluster:
    port: int
    ctl: list[str]  # pg_ctl with the data directory and log: append start, stop or restart
    log: Path

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"


def postgres_bindir(pattern: str = BIN_GLOB) -> Path:
    """The newest installed server's bin directory; a failure (not a skip) naming what is missing."""
    found = sorted(
        (Path(p) for p in _glob(pattern) if (Path(p) / "initdb").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    pytest.fail(
        f"initdb not found (looked in {pattern} and on PATH): the PostgreSQL restart test needs the server's "
        "programs to make its own cluster; install the postgresql package"
    )


def _glob(pattern: str) -> list[str]:
    import glob

    return glob.glob(pattern)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({shlex.join(args)}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    bindir = postgres_bindir()
    root = Path(tempfile.mkdtemp(prefix="gpumarket-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb and postgres refuse root
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log = root / "data", root / "server.log"
    try:
        _run(
            [
                *as_user,
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ]
            + ["--no-sync", "--locale=C"],
            "initdb",
        )
        port = free_port()
        conf = {**SETTINGS, "port": str(port), "unix_socket_directories": f"'{root}'"}
        with (data / "postgresql.conf").open("a") as f:
            f.write("".join(f"{name} = {value}\n" for name, value in conf.items()))
        ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60"]
        _run([*ctl, "start"], "starting the private PostgreSQL")
        try:
            yield PrivateCluster(port=port, ctl=ctl, log=log)
        finally:
            subprocess.run([*ctl, "stop", "-m", "immediate"], capture_output=True, timeout=60, check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
