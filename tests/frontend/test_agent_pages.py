"""The parts of the portal and console that show what the node agents measured and act on nodes: a job's
usage charts, log tail and end reason; the nodes page, its actions and bootstrap tokens."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client

from accounts.models import AuditEvent
from inventory.models import Gpu, Node
from market.models import EndReason, Lease
from nodeagent.models import BootstrapToken
from tests.frontend.conftest import Market, login, report_usage

pytestmark = pytest.mark.django_db


def _running(m: Market) -> Lease:
    from market.services.leases import lease_running

    lease = Lease.objects.get(job=m.winner)
    return lease_running(lease_id=lease.pk, now=lease.started_at)


def test_a_running_job_shows_its_usage_charts_and_escaped_log_tail(market: Market) -> None:
    lease = _running(market)
    client = login(Client(), market.world.amy)
    url = f"/t/alpha/jobs/{market.winner.pk}/"
    assert "No usage reported yet" in client.get(url).content.decode()
    report_usage(lease, seconds=1800, log_tail="epoch 3 loss 0.12\n<script>alert(1)</script>")
    html = client.get(url).content.decode()
    for title in ("GPU utilisation", "GPU memory used", "energy used"):
        assert f'aria-label="Lease {lease.pk}: {title}"' in html
    # 30 reports, one line per node: the utilisation chart's line has a point per report.
    util = re.search(rf'aria-label="Lease {lease.pk}: GPU utilisation".*?points="([^"]+)"', html, re.S)
    assert util is not None and len(util.group(1).split()) == 30
    assert "epoch 3 loss 0.12\n&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "1 GPU-hour over 30 samples" in html  # 2 GPUs x 30 minutes, the lease's own counters
    assert "0.300 kWh" in html


def test_the_usage_series_is_bounded_and_its_energy_adds_up(market: Market) -> None:
    from market.selectors.usage import lease_usage_series

    lease = _running(market)
    report_usage(lease, seconds=6 * 3600, every=20)  # 1,080 reports
    (node, points), *others = lease_usage_series(lease=lease, points=100).items()
    assert not others and node == lease.node.name
    assert 100 <= len(points) <= 101
    start = lease.running_at or lease.started_at
    assert points[0].at == start + timedelta(seconds=20) and points[-1].at == start + timedelta(hours=6)
    assert [p.at for p in points] == sorted(p.at for p in points)
    # Energy used between the first and the last report: 2 GPUs x 300 W for 6 h less one 20 s step.
    assert points[-1].energy_j == pytest.approx(2 * 300 * (6 * 3600 - 20))
    assert {p.mem_used_mb for p in points} == {60_000}  # summed over the lease's 2 GPUs


def test_a_report_of_another_leases_gpus_is_not_on_this_jobs_chart(market: Market) -> None:
    from django.utils import timezone

    from market.selectors.usage import lease_usage_series
    from nodeagent.services.usage import report_ingest
    from nodeagent.services.usage_parse import parse_samples

    lease = _running(market)
    mine = [g.gpu.uuid for g in lease.lease_gpus.select_related("gpu")]
    other = Gpu.objects.filter(node=lease.node).exclude(uuid__in=mine).first()
    assert other is not None
    start = (lease.running_at or lease.started_at).timestamp()
    # A protocol 2 report of three ticks: the lease's 2 GPUs at 30 GB, a busy foreign GPU beside them.
    usage = {
        "gpus": [*mine, other.uuid],
        "t": [start + 10 * k for k in (1, 2, 3)],
        "util": [[90, 90, 100]] * 3,
        "mem_mb": [[30_000, 30_000, 80_000]] * 3,
        "power_w": [[300.0, 300.0, 650.0]] * 3,
        "energy_j": [[5e6 + 3000 * k, 5e6 + 3000 * k, 1e6 + 6500 * k] for k in (1, 2, 3)],
        "lease": [[lease.pk, lease.pk, 0]] * 3,
        "foreign": [[0, 0, 1]] * 3,
    }
    assert report_ingest(
        node_id=lease.node_id, boot_epoch=1, seq=1, sent_at=timezone.now(), samples=parse_samples(usage),
        leases=[],
    )  # fmt: skip
    points = lease_usage_series(lease=lease)[lease.node.name]
    assert [p.mem_used_mb for p in points] == [60_000, 60_000, 60_000]
    assert [p.energy_j for p in points] == [0.0, 6000.0, 12000.0]  # the lease's 2 GPUs only


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("node_lost", "stopped answering after 30 minutes, so the lease was ended; charged 2.00 credits for "
         "1 GPU-hour measured (only what the node reported), and the job went back to the queue"),
        ("idle", "Released as idle after 30 minutes: its GPUs stayed below 10% utilisation for 10 minutes "
         "(the market's idle policy); charged 2.00 credits for 1 GPU-hour measured."),
        ("completed", "Completed: the job exited normally after 30 minutes; charged 2.00 credits"),
    ],
)  # fmt: skip
def test_the_owner_reads_why_the_lease_ended_in_one_sentence(market: Market, reason: str, says: str) -> None:
    from market.models import PartState
    from market.services.lease_parts import part_ended
    from market.services.leases import lease_stopped
    from market.services.policy import policy_update
    from nodeagent.services.lease_events import leases_release_idle

    lease = _running(market)
    end = lease.started_at + timedelta(minutes=30)
    if reason == "idle":
        policy_update(actor=market.world.admin, idle_util_pct=10, idle_seconds=600)
        report_usage(lease, seconds=1800, util=(3.0,))  # idle from the first report on
        assert leases_release_idle(now=end) == [lease.pk]
        lease_stopped(lease_id=lease.pk, now=end)
    else:
        report_usage(lease, seconds=1800)
        if reason == "node_lost":
            part_ended(lease_id=lease.pk, node_id=lease.node_id, state=PartState.LOST, now=end)
        else:
            lease_stopped(lease_id=lease.pk, reason=EndReason.COMPLETED, now=end)
    html = login(Client(), market.world.amy).get(f"/t/alpha/jobs/{market.winner.pk}/").content.decode()
    sentence = re.search(rf'data-field="ended-{lease.pk}">([^<]+)<', html)
    assert sentence is not None and says in sentence.group(1).replace("&#x27;", "'"), (
        sentence and sentence.group(1)
    )


def test_nodes_page_shows_gpu_health_heartbeat_utilisation_and_running_leases(market: Market) -> None:
    from django.utils import timezone

    lease = _running(market)
    report_usage(lease, seconds=120, util=(77.0,))
    node = lease.node
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now(), agent_version="0.3.1")
    Gpu.objects.filter(node=node, index=7).update(healthy=False, error="Xid 79: fallen off the bus")
    html = login(Client(), market.world.admin).get("/console/nodes/").content.decode()
    row = html[html.index(f'data-node="{node.name}"') :]
    row = row[: row.index("</tr>")]
    assert "agent 0.3.1" in row and "<time" in row and "Up" in row
    assert "#7\n    unhealthy: Xid 79: fallen off the bus" in row
    assert row.count("· 77% · 30000 / 81920 MB") == 2  # the lease's 2 GPUs at the last report
    assert f"alpha job {market.winner.pk} ×2 (running)" in row
    assert 'aria-label="Drain ' in row and 'aria-label="Retire ' in row


def test_drain_resume_and_retire_go_through_the_services_and_are_audited(market: Market) -> None:
    node = Lease.objects.get(job=market.winner).node
    admin = login(Client(), market.world.admin)
    base = f"/console/nodes/{node.name}"
    assert admin.post(f"{base}/drain/").status_code == 302
    assert Node.objects.get(pk=node.pk).state == "draining"
    # A live lease on it: retiring is refused with the service's reason, and nothing changes.
    page = admin.post(f"{base}/retire/", follow=True).content.decode()
    assert "Refused: node" in page and "still has live leases" in page
    assert Node.objects.get(pk=node.pk).state == "draining"
    assert 'aria-label="Resume ' in page
    assert admin.post(f"{base}/resume/").status_code == 302
    assert Node.objects.get(pk=node.pk).state == "up"
    actions = list(
        AuditEvent.objects.filter(action__startswith="node.")
        .order_by("pk")
        .values_list("action", "actor__username")
    )
    assert actions == [("node.drain", "root"), ("node.resume", "root")]
    assert admin.post(f"{base}/reboot/").status_code == 404
    assert admin.post("/console/nodes/no-such-node/drain/").status_code == 404
    assert admin.get(f"{base}/drain/").status_code == 405  # a link cannot drain a node


def test_an_admin_sets_a_node_address_in_the_console_and_a_bad_one_is_refused(market: Market) -> None:
    node = Lease.objects.get(job=market.winner).node
    admin = login(Client(), market.world.admin)
    page = admin.post(f"/console/nodes/{node.name}/address/", {"address": "10.0.0.300"}, follow=True)
    assert "Refused: address: " in page.content.decode()
    assert Node.objects.get(pk=node.pk).address == ""
    page = admin.post(f"/console/nodes/{node.name}/address/", {"address": "10.2.0.7"}, follow=True)
    html = page.content.decode()
    assert "address set to 10.2.0.7 (pinned)" in html
    assert f'data-field="address-{node.name}">address 10.2.0.7 (pinned)' in html
    assert AuditEvent.objects.filter(action="node.address", actor__username="root").count() == 1


def test_node_actions_are_for_platform_admins_only(market: Market) -> None:
    node = Lease.objects.get(job=market.winner).node
    urls = [f"/console/nodes/{node.name}/{a}/" for a in ("drain", "resume", "retire", "address")]
    urls.append("/console/nodes/bootstrap-token/")
    for url in urls:
        response = Client().post(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    for who in ("amy", "alice", "bob"):  # member, owner, outsider
        client = login(Client(), getattr(market.world, who))
        for url in urls:
            assert client.post(url, {"name": "x"}).status_code == 403, (who, url)
    assert Node.objects.get(pk=node.pk).state == "up"
    assert not BootstrapToken.objects.exists() and not AuditEvent.objects.filter(action__startswith="node.")


def test_node_actions_need_the_csrf_token(market: Market) -> None:
    node = Lease.objects.get(job=market.winner).node
    client = Client(enforce_csrf_checks=True)
    client.force_login(market.world.admin)
    assert client.post(f"/console/nodes/{node.name}/drain/").status_code == 403
    assert client.post("/console/nodes/bootstrap-token/").status_code == 403
    assert Node.objects.get(pk=node.pk).state == "up" and not BootstrapToken.objects.exists()


def test_a_bootstrap_token_is_shown_once_and_bad_input_is_refused_beside_the_field(market: Market) -> None:
    from nodeagent import credentials

    admin = login(Client(), market.world.admin)
    bad = admin.post("/console/nodes/bootstrap-token/", {"name": "bad name!", "ttl_hours": "0"})
    html = bad.content.decode()
    assert bad.status_code == 400 and 'id="id_name-error"' in html and 'id="id_ttl_hours-error"' in html
    assert 'value="bad name!"' in html and not BootstrapToken.objects.exists()
    registered = market.world.h100.nodes.first()
    assert registered is not None
    taken = admin.post("/console/nodes/bootstrap-token/", {"name": registered.name})
    assert taken.status_code == 400 and "is already registered" in taken.content.decode()
    made = admin.post(
        "/console/nodes/bootstrap-token/",
        {"name": "gpu-node-07", "gpu_type": "H100", "topology_domain": "rack-a", "ttl_hours": "12"},
    )
    assert made.status_code == 200 and made["Cache-Control"] == "no-store"
    secret = re.search(r'id="new-bootstrap-token">(gpb_[^<]+)<', made.content.decode())
    assert secret is not None
    token = BootstrapToken.objects.get()
    assert token.digest == credentials.digest(secret.group(1)) and token.name == "gpu-node-07"
    assert token.gpu_type == market.world.h100 and token.created_by == market.world.admin
    assert AuditEvent.objects.filter(action="node.bootstrap_token").count() == 1
    assert secret.group(1) not in admin.get("/console/nodes/").content.decode()


def test_a_short_job_reads_in_gpu_seconds_and_a_charge_that_is_not_zero(market: Market) -> None:
    # The job page once said "charged 0.01 credits for 0.00 GPU-hours measured" for a 15-second job.
    from config.money import format_fixed
    from market.services.leases import lease_stopped

    lease = _running(market)
    report_usage(lease, seconds=15, every=15)
    lease = lease_stopped(
        lease_id=lease.pk, reason=EndReason.COMPLETED, now=lease.started_at + timedelta(seconds=15)
    )
    lease.refresh_from_db()
    assert lease.charged is not None and 0 < lease.charged < 100_000  # 2 GPUs x 15 s at 2 credits: 0.0167
    html = login(Client(), market.world.amy).get(f"/t/alpha/jobs/{market.winner.pk}/").content.decode()
    sentence = re.search(rf'data-field="ended-{lease.pk}">([^<]+)<', html)
    assert sentence is not None, html
    charged = format_fixed(lease.charged)  # never "0.00" for a charge (tests/market/test_lost_work.py)
    gpu_seconds = 15 * lease.gpus
    assert f"charged {charged} credits for {gpu_seconds} GPU-seconds measured" in sentence.group(1)
    assert f"{gpu_seconds} GPU-seconds over 1 sample" in html
    assert "0.00 GPU-hours" not in html
