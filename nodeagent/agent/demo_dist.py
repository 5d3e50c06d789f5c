"""A demo gang job: `python -m nodeagent.agent.demo_dist [--timeout 60] [--hold 0]`.

Every part of a gang runs it, one per node. The parts meet at the rendezvous the platform chose for the lease
(MASTER_ADDR:MASTER_PORT, rank 0's node: docs/jobs.md §Multi-node jobs) and all-reduce their ranks over TCP:
rank 0 listens there, every other rank connects and sends its rank, rank 0 sums what it got with its own and
sends the sum back to each. Each part prints the sum and exits 0, or prints why not and exits 1 (a rank that
never came, no rendezvous within --timeout, a peer that sent something else). Standard library only, so it
runs wherever the agent does. --hold keeps it running afterwards (to watch a gang live and die together).

Messages are one JSON line each: {"rank": r, "value": v, "node": addr} up, {"sum": s, "ranks": [...]} down.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass


class GangError(Exception):
    """Why the parts did not meet; printed as one line before exiting 1."""


@dataclass(frozen=True)
class Place:
    rank: int
    world: int
    addr: str
    port: int
    node: str


def place_from_env(env: dict[str, str]) -> Place:
    """This part's rank, the gang size and the rendezvous, from the variables the agent sets."""
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
    except KeyError as exc:
        raise GangError(f"{exc.args[0]} is not set: run this as a job of the platform, or set it") from None
    except ValueError as exc:
        raise GangError(f"a gang variable is not a number: {exc}") from None
    if not 0 <= rank < world:
        raise GangError(f"RANK {rank} is outside WORLD_SIZE {world}")
    nodes = env.get("GPUMARKET_NODES", "").split(",")
    node = nodes[rank] if len(nodes) == world else socket.gethostname()
    return Place(rank, world, addr, port, node)


def _send(conn: socket.socket, message: dict[str, object]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _receive(conn: socket.socket, deadline: float, who: str) -> dict[str, object]:
    data = b""
    while not data.endswith(b"\n"):
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            raise GangError(f"{who} sent nothing before the timeout") from None
        if not chunk:
            raise GangError(f"{who} closed the connection before answering")
        data += chunk
        if len(data) > 65536:
            raise GangError(f"{who} sent more than a message")
    try:
        message = json.loads(data)
    except ValueError:
        raise GangError(f"{who} sent something that is not a message: {data[:80]!r}") from None
    if not isinstance(message, dict):
        raise GangError(f"{who} sent something that is not a message: {data[:80]!r}")
    return message


def _listen(place: Place) -> socket.socket:
    """Rank 0's listener on the rendezvous address (on every address when that one is not this machine's)."""
    family = socket.AF_INET6 if ":" in place.addr else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((place.addr, place.port))
    except OSError:
        try:
            server.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", place.port))
        except OSError as exc:
            server.close()
            raise GangError(f"rank 0 cannot listen on port {place.port}: {exc}") from None
    server.listen(place.world)
    return server


def serve(place: Place, value: int, deadline: float) -> int:
    """Rank 0: gather every other rank's value, reduce, send the sum back to each."""
    got: dict[int, int] = {0: value}
    peers: list[socket.socket] = []
    with _listen(place) as server:
        try:
            while len(got) < place.world:
                server.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    conn, peer = server.accept()
                except TimeoutError:
                    missing = sorted(set(range(place.world)) - set(got))
                    raise GangError(f"ranks {missing} never reached the rendezvous") from None
                peers.append(conn)
                hello = _receive(conn, deadline, f"a peer at {peer[0]}")
                rank, sent = hello.get("rank"), hello.get("value")
                if not isinstance(rank, int) or not isinstance(sent, int) or not 0 < rank < place.world:
                    raise GangError(f"a peer at {peer[0]} sent {hello!r}, not a rank of this gang")
                if rank in got:
                    raise GangError(f"rank {rank} came twice")
                got[rank] = sent
                print(f"rank 0: rank {rank} arrived from {hello.get('node') or peer[0]}", flush=True)
            total = sum(got.values())
            for conn in peers:
                _send(conn, {"sum": total, "ranks": sorted(got)})
        finally:
            for conn in peers:
                conn.close()
    return total


def join(place: Place, value: int, deadline: float) -> int:
    """Rank > 0: connect to the rendezvous (retrying until rank 0 listens), send the value, get the sum."""
    last: OSError | None = None
    while time.monotonic() < deadline:
        try:
            conn = socket.create_connection(
                (place.addr, place.port), timeout=max(0.01, min(5.0, deadline - time.monotonic()))
            )
        except OSError as exc:
            last = exc
            time.sleep(0.2)
            continue
        with conn:
            _send(conn, {"rank": place.rank, "value": value, "node": place.node})
            answer = _receive(conn, deadline, f"rank 0 at {place.addr}:{place.port}")
        total = answer.get("sum")
        if not isinstance(total, int):
            raise GangError(f"rank 0 answered {answer!r}, not a sum")
        return total
    raise GangError(f"no rendezvous at {place.addr}:{place.port} within the timeout (last error: {last})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo_dist", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to meet (default 60)")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to keep running afterwards")
    args = parser.parse_args(argv)
    try:
        place = place_from_env(dict(os.environ))
        print(
            f"rank {place.rank} of {place.world} on {place.node}: "
            f"rendezvous {place.addr}:{place.port}, GPUs {os.environ.get('CUDA_VISIBLE_DEVICES', '')}",
            flush=True,
        )
        deadline = time.monotonic() + args.timeout
        value = place.rank  # the all-reduce of the ranks: 0 + 1 + ... + (world - 1)
        total = serve(place, value, deadline) if place.rank == 0 else join(place, value, deadline)
    except GangError as exc:
        print(f"demo_dist: error: {exc}", file=sys.stderr, flush=True)
        return 1
    expected = place.world * (place.world - 1) // 2
    verdict = "ok" if total == expected else f"WRONG (expected {expected})"
    print(f"rank {place.rank}: allreduce sum of ranks = {total} {verdict}", flush=True)
    if args.hold > 0:
        time.sleep(args.hold)
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
