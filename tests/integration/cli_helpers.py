"""Running the `gpumarket` command line as a real subprocess against the live server (tests/integration/
test_cli.py), and a proxy that loses the first answer to a submit, as a dropped connection would."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.workers import ROOT

GPUMARKET = [sys.executable, "-m", "gpumarket_client"]


def cli_env(config: Path, **extra: str) -> dict[str, str]:
    """The environment of a command line run: its own config directory, no profile or server from the
    caller's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMARKET_")}
    return {**env, "XDG_CONFIG_HOME": str(config), "COLUMNS": "200", **extra}


def run(
    args: list[str], env: dict[str, str], *, timeout: float = 60, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUMARKET, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, input=stdin
    )


class LosingProxy:
    """A TCP proxy to the server that passes the first request starting with `prefix` on whole and throws the
    server's answer to it away, closing the connection: the server did the work, the client never heard.
    Everything else passes through. (A client sends its next request on a kept-alive connection only after
    it has read the answer to the last, so the next bytes from the server after that request are its answer.)"""

    def __init__(self, target: tuple[str, int], prefix: bytes) -> None:
        self.target, self.prefix = target, prefix
        self.dropped = 0
        self._armed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target, timeout=10)
            threading.Thread(target=self._up, args=(client, server), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                if data.startswith(self.prefix) and self.dropped == 0:
                    self._armed = True
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while data := server.recv(65536):
                if self._armed:
                    self._armed, self.dropped = False, self.dropped + 1
                    break  # the answer is read and never passed on
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


__all__ = ["ROOT", "LosingProxy", "cli_env", "run"]
