"""The shipped web server (gunicorn + uvicorn workers serving config.asgi) and the agents' command long poll
on it: woken by Redis as soon as a command is written, holding no worker while it waits, falling back to
looking on its own without Redis, answering errors exactly as the rest of the agent API does; and the sync
views beside it, each on a thread of its own."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from rest_framework.test import APIClient

from accounts.tokens import token_create
from market.models import Command, CommandKind, EndReason, Job, Lease
from market.services import rounds
from market.services.leases import lease_request_stop
from nodeagent.services.registration import bootstrap_token_create
from tests.integration import asgi_server
from tests.market.round_helpers import make_job
from tests.nodeagent.agents import FakeAgent, register

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

COMMANDS = "/api/v1/agent/commands"
PROMPT_S = 0.2  # the old poll looked every 0.5 s; a woken one answers in milliseconds


class Poll(threading.Thread):
    """One long poll in a thread of its own; `received` is when its answer came (time.monotonic())."""

    def __init__(self, server: asgi_server.Server, credential: str, after: int, wait: int) -> None:
        super().__init__(daemon=True)
        self.server, self.credential, self.path = server, credential, f"{COMMANDS}?after={after}&wait={wait}"
        self.status, self.answer, self.received = 0, None, 0.0

    def run(self) -> None:
        self.status, self.answer = self.server.request("GET", self.path, self.credential, timeout=60)
        self.received = time.monotonic()

    def result(self, timeout: float = 40) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the poll did not answer"
        assert self.status == 200, self.answer
        return self.answer


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., asgi_server.Server]]:
    servers: list[asgi_server.Server] = []

    def start(**env: str) -> asgi_server.Server:
        servers.append(asgi_server.start(tmp_path / f"server{len(servers)}.log", **env))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
        print(server.log.read_text()[-3000:])


def parked(server: asgi_server.Server, polls: int) -> None:
    """Until `polls` polls wait in the server (its gauge), so what the test writes next finds them waiting."""
    deadline = time.monotonic() + 20
    while server.metric("gpumarket_agent_polls_waiting") < polls:
        assert time.monotonic() < deadline, f"{polls} polls not waiting within 20 s"
        time.sleep(0.05)


def leases_on(world: Any, agent: FakeAgent, count: int) -> list[Lease]:
    """`count` one-GPU leases of alpha's on the agent's node, bound by one round."""
    world.fund(world.alpha, 1000)
    jobs = [make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 5}) for _ in range(count)]
    rounds.round_tick()
    return list(Lease.objects.filter(job__in=jobs).order_by("pk"))


def test_a_waiting_poll_answers_as_soon_as_a_command_is_written(world, serve):
    server = serve()
    agent = register(world, "n1")
    world.fund(world.alpha, 1000)
    make_job(world.alpha, world.alice, gpus=8, limits={world.h100: 5})
    poll = Poll(server, agent.credential, after=0, wait=20)
    poll.start()
    parked(server, 1)
    rounds.round_tick()  # the round commit writes the bind
    written = time.monotonic()
    [bind] = poll.result()["commands"]
    assert bind["kind"] == "bind"
    assert poll.received - written < PROMPT_S

    # A stop request (lease_request_stop: cancel, expiry, drain) wakes it the same way, every time.
    lease = Lease.objects.get(pk=bind["lease"])
    poll = Poll(server, agent.credential, after=bind["id"], wait=20)
    poll.start()
    parked(server, 1)
    lease_request_stop(lease_id=lease.pk, kind=CommandKind.RELEASE, reason=EndReason.CANCELLED, fence=1)
    written = time.monotonic()
    [release] = poll.result()["commands"]
    assert release["kind"] == "release" and release["lease"] == lease.pk
    assert poll.received - written < PROMPT_S


def test_every_stop_request_wakes_its_nodes_poll_at_once(world, serve):
    server = serve()
    agent = register(world, "n1")
    leases = leases_on(world, agent, 5)
    after = max(c["id"] for c in agent.commands())
    delays = []
    for lease in leases:
        poll = Poll(server, agent.credential, after=after, wait=20)
        poll.start()
        parked(server, 1)
        lease_request_stop(lease_id=lease.pk, kind=CommandKind.RELEASE, reason=EndReason.CANCELLED, fence=1)
        written = time.monotonic()
        [command] = poll.result()["commands"]
        delays.append(poll.received - written)
        after = command["id"]
    # Polling every 0.5 s, five in a row would all come this fast once in 32 tries.
    assert max(delays) < PROMPT_S, delays


def test_two_hundred_waiting_polls_hold_no_worker_and_no_connection(world, serve):
    server = serve()  # one worker
    agents = [register(world, f"n{i}") for i in range(50)]
    token = token_create(user=world.alice, tenant=world.alpha, name="t").secret
    polls = [Poll(server, a.credential, after=0, wait=15) for a in agents for _ in range(4)]
    for poll in polls:
        poll.start()
    parked(server, 200)

    took = []
    for _ in range(5):
        started = time.monotonic()
        status, me = server.request("GET", "/api/v1/me", token)
        took.append(time.monotonic() - started)
        assert status == 200, me
    assert max(took) < 0.25, took  # milliseconds on an idle machine; a worker held by a poll takes 15 s
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (server_connections,) = cursor.fetchone()
    assert server_connections <= 20  # the pool's ceiling (DB_POOL_SIZE), not one per waiting poll

    leases = leases_on(world, agents[0], 1)
    for poll in polls[:4]:
        answer = poll.result()
        assert [c["lease"] for c in answer["commands"]] == [leases[0].pk]
    assert all(p.result()["commands"] == [] for p in polls[4:])


def test_without_redis_a_poll_looks_on_its_own(world, serve):
    server = serve(REDIS_URL="")
    agent = register(world, "n1")
    world.fund(world.alpha, 1000)
    make_job(world.alpha, world.alice, gpus=8, limits={world.h100: 5})
    poll = Poll(server, agent.credential, after=0, wait=20)
    poll.start()
    parked(server, 1)
    rounds.round_tick()
    written = time.monotonic()
    [bind] = poll.result()["commands"]
    assert bind["kind"] == "bind"
    assert poll.received - written < 1.5  # found by its next look (every 0.5 s), long before wait=20


def test_errors_are_those_of_the_rest_of_the_agent_api(world, serve):
    server = serve()
    agent = register(world, "n1")
    bootstrap = bootstrap_token_create(actor=world.admin).secret
    cases = [  # (token, query, the field a 400 names)
        ("", "wait=5", None),  # no credential: 401
        ("gpn_forged", "wait=5", None),  # 401
        (bootstrap, "wait=5", None),  # a bootstrap token is for register only: 403
        (agent.credential, f"wait={settings.AGENT_POLL_SECONDS + 1}", "wait"),  # past poll_seconds
        (agent.credential, "after=-1&wait=5", "after"),
        (agent.credential, "wait=soon", "wait"),
    ]
    wsgi = APIClient()
    for token, query, field in cases:
        status, body = server.request("GET", f"{COMMANDS}?{query}", token)
        expected = wsgi.get(f"{COMMANDS}?{query}", HTTP_AUTHORIZATION=f"Bearer {token}" if token else "")
        assert (status, body) == (expected.status_code, expected.json()), query
        assert status == 400 if field else status in (401, 403)
        if field:
            assert list(body["fields"]) == [field]


def test_a_sync_view_waiting_in_the_database_does_not_hold_up_the_others(world, serve):
    """Django runs each sync view on a thread of its own under ASGI: one blocked on a row lock leaves the
    worker's other requests alone (they are not queued on one thread)."""
    server = serve()  # one worker
    token = token_create(user=world.alice, tenant=world.alpha, name="t").secret
    job = make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 5})
    cancel = threading.Thread(
        target=lambda: results.append(
            server.request("POST", f"/api/v1/tenants/alpha/jobs/{job.pk}/cancel", token)
        )
    )
    results: list[tuple[int, Any]] = []
    with transaction.atomic():
        Job.objects.select_for_update().get(pk=job.pk)  # the cancel waits for this lock
        cancel.start()
        time.sleep(1.0)
        assert cancel.is_alive() and not results
        started = time.monotonic()
        status, me = server.request("GET", "/api/v1/me", token)
        assert status == 200, me
        assert time.monotonic() - started < 0.25
    cancel.join(30)
    assert results and results[0][0] == 200, results


def test_no_wake_is_lost_while_polls_come_and_go(world, serve):
    """Twenty agents re-polling with short waits on two workers (so their subscriptions come and go, and a
    node's next poll subscribes while its last one leaves), eighty stop requests among them: each is answered
    at once, none left to the 5 s re-check."""
    server = serve(GUNICORN_WORKERS="2")
    agents = [register(world, f"n{i}") for i in range(20)]
    world.fund(world.alpha, 1000)
    jobs = [make_job(world.alpha, world.alice, gpus=1, limits={world.h100: 5}) for _ in range(100)]
    rounds.round_tick()
    leases = list(Lease.objects.filter(job__in=jobs))
    received: dict[int, float] = {}
    stop = threading.Event()

    def agent_loop(agent: FakeAgent, rng: random.Random) -> None:
        after = max([c["id"] for c in agent.commands()] or [0])
        while not stop.is_set():
            path = f"{COMMANDS}?after={after}&wait={rng.randint(1, 4)}"
            status, answer = server.request("GET", path, agent.credential)
            assert status == 200, answer
            for command in answer["commands"]:
                received[command["id"]] = time.monotonic()
                after = max(after, command["id"])

    threads = [
        threading.Thread(target=agent_loop, args=(a, random.Random(i)), daemon=True)
        for i, a in enumerate(agents)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2)  # all polling (the gauge is per worker without a shared metrics folder)
    rng = random.Random(7)
    written: dict[int, float] = {}
    for lease in rng.sample(leases, 80):
        lease_request_stop(lease_id=lease.pk, kind=CommandKind.RELEASE, reason=EndReason.CANCELLED, fence=1)
        now = time.monotonic()
        for pk in Command.objects.filter(lease=lease, kind=CommandKind.RELEASE).values_list("pk", flat=True):
            written.setdefault(pk, now)
        time.sleep(rng.uniform(0, 0.1))
    deadline = time.monotonic() + 10
    while set(written) - set(received) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for thread in threads:
        thread.join(10)
    delays = sorted(received.get(pk, math.inf) - at for pk, at in written.items())
    assert delays[-1] < 1.0, delays[-5:]  # milliseconds each; a lost wake would show as ~5 s
