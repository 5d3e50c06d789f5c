"""Node addresses: checked at every door (register, the admin API, manage.py node address), pinned by admins."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.models import AuditEvent
from inventory.addresses import check_node_address
from inventory.models import Node
from market.gang import gang_payloads, node_address, part_ranks
from nodeagent.agent.gang import check_address
from tests.nodeagent.agents import gpus_of, register

GOOD = [
    ("10.0.0.7", "10.0.0.7"),
    (" 192.168.1.20 ", "192.168.1.20"),
    ("fd00::0:1", "fd00::1"),
    ("127.0.0.2", "127.0.0.2"),
    ("GPU-Node-07.Example.org.", "gpu-node-07.example.org"),
    ("node7", "node7"),
    ("", ""),
]
BAD = ["0.0.0.0", "::", "224.0.0.1", "256.1.1.1", "1.2.3", "-node", "node-", "no de", "a_b.example", "x" * 64,
       "a." * 127 + "b", "node;reboot", "$(id)", "ünï.example"]  # fmt: skip


@pytest.mark.parametrize(("given", "stored"), GOOD)
def test_an_ip_or_a_host_name_is_taken_in_one_spelling(given, stored):
    assert check_node_address(given) == stored
    if stored:
        assert check_address(given) == stored  # the agent's flag holds the same rule


@pytest.mark.parametrize("given", BAD)
def test_anything_else_is_refused_with_the_reason(given):
    with pytest.raises(ValueError):
        check_node_address(given)
    with pytest.raises(ValueError):
        check_address(given)


def test_gang_payloads_rank_the_nodes_in_id_order_and_meet_at_rank_0():
    gpus = {12: ["g3", "g4"], 5: ["g1", "g2"]}
    made = gang_payloads(
        lease_id=3,
        gpus_by_node=gpus,
        addresses={5: ("10.0.0.5", "a"), 12: ("", "node_b")},
        port_range=(100, 109),
    )
    assert part_ranks(gpus) == {5: 0, 12: 1}
    assert made[5]["rank"] == 0 and made[12]["rank"] == 1
    # A node without an address is reached by its name in a gang (and it should get an address).
    assert made[12]["nodes"] == ["10.0.0.5", "node_b"] and made[12]["rdzv_addr"] == "10.0.0.5"
    assert made[5]["rdzv_port"] == made[12]["rdzv_port"] == 103
    assert node_address("", "solo", alone=True) == "127.0.0.1"  # a gang of one meets on the node itself


@pytest.mark.django_db
def test_registration_stores_the_address_and_refuses_a_bad_one_naming_the_field(world):
    from rest_framework.test import APIClient

    from nodeagent.services.registration import bootstrap_token_create

    agent = register(world, "n1", address="10.1.0.1")
    assert agent.node.address == "10.1.0.1"
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {bootstrap_token_create(actor=world.admin).secret}")
    body = {"name": "n2", "gpus": gpus_of("n2", 8), "address": "10.0.0.300"}
    refused = api.post("/api/v1/agent/register", body, format="json")
    assert refused.status_code == 400 and "address" in refused.json()["fields"]
    assert not Node.objects.filter(name="n2").exists()
    # A re-registration moves it (audited); one without an address leaves it.
    again = {"gpus": gpus_of("n1", 8), "address": "n1.cluster.local"}
    assert agent.post("register", again).status_code == 200
    agent.node.refresh_from_db()
    assert agent.node.address == "n1.cluster.local"
    assert agent.post("register", {"gpus": gpus_of("n1", 8)}).status_code == 200
    agent.node.refresh_from_db()
    assert agent.node.address == "n1.cluster.local"
    assert AuditEvent.objects.filter(action="node.address").count() == 1


@pytest.mark.django_db
def test_an_admin_pins_the_address_and_the_agent_no_longer_moves_it(world):
    agent = register(world, "n1", address="10.1.0.1")
    assert (
        world.client(world.alice)
        .patch("/api/v1/nodes/n1", {"address": "10.9.9.9"}, format="json")
        .status_code
        == 403
    )
    bad = world.client(world.admin).patch("/api/v1/nodes/n1", {"address": "not an address"}, format="json")
    assert bad.status_code == 400 and "address" in bad.json()["fields"]
    unknown = world.client(world.admin).patch("/api/v1/nodes/n1", {"adress": "10.9.9.9"}, format="json")
    assert unknown.status_code == 400
    pinned = world.client(world.admin).patch("/api/v1/nodes/n1", {"address": "10.9.9.9"}, format="json")
    assert pinned.status_code == 200
    assert (pinned.json()["address"], pinned.json()["address_pinned"]) == ("10.9.9.9", True)
    agent.post("register", {"gpus": gpus_of("n1", 8), "address": "10.1.0.1"})
    agent.node.refresh_from_db()
    assert agent.node.address == "10.9.9.9"
    # Cleared, the agent's next registration sets it again.
    out = StringIO()
    call_command("node", "address", "n1", "", stdout=out)
    assert "address (none)" in out.getvalue()
    agent.post("register", {"gpus": gpus_of("n1", 8), "address": "10.1.0.1"})
    agent.node.refresh_from_db()
    assert (agent.node.address, agent.node.address_pinned) == ("10.1.0.1", False)
    with pytest.raises(CommandError, match="address: "):
        call_command("node", "address", "n1", "10.0.0.999", stdout=StringIO())
    with pytest.raises(CommandError, match="usage"):
        call_command("node", "address", "n1", stdout=StringIO())
