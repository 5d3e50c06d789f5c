"""`manage.py demo_data` prepares one agent state directory per demo node instead of making nodes itself."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command
from rest_framework.test import APIClient

from frontend.management.commands.demo_data import DEMO_JOBS, NODES
from inventory.models import Node
from market.models import Job
from nodeagent.models import BootstrapToken

pytestmark = pytest.mark.django_db


def test_demo_nodes_register_through_their_agents(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("demo_data", stdout=StringIO())
    assert not Node.objects.exists() and not Job.objects.exists()  # no nodes yet: no job could fit
    tokens = {}
    for name, _type, _domain, gpus in NODES:
        state = tmp_path / "agents" / name
        tokens[name] = (state / "bootstrap_token").read_text().strip()
        assert tokens[name].startswith("gpb_") and (state / "bootstrap_token").stat().st_mode & 0o777 == 0o600
        demo = json.loads((state / "demo.json").read_text())
        assert demo["gpus"] == gpus and demo["address"].startswith("127.0.0.")
    call_command("demo_data", stdout=StringIO())  # again: the same tokens
    assert {n: (tmp_path / "agents" / n / "bootstrap_token").read_text().strip() for n in tokens} == tokens
    assert BootstrapToken.objects.count() == len(NODES)

    for name, type_name, domain, gpus in NODES:  # what each agent does with its token
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens[name]}")
        body = {
            "gpus": [
                {"uuid": f"GPU-{name}-{i}", "index": i, "model": "sim", "memory_mb": 1} for i in range(gpus)
            ]
        }
        response = api.post("/api/v1/agent/register", body, format="json")
        assert response.status_code == 201, response.json()
        node = Node.objects.get(name=name)
        assert (node.gpu_type.name, node.topology_domain) == (type_name, domain)
    cache.clear()  # the largest gang per type is cached for 30 s; the launcher runs this in a new process
    call_command("demo_data", "-v", "0", stdout=StringIO())
    assert Job.objects.count() == len(DEMO_JOBS)
    gang = Job.objects.get(name="dist-allreduce")  # two whole A100 nodes: the 8-GPU gang of make run
    assert gang.gpus == 8 and gang.command.startswith("python -m nodeagent.agent.demo_dist")
    assert BootstrapToken.objects.count() == len(NODES)  # registered nodes get no new token
