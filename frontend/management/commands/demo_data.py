"""Create a small demo platform: GPU types, three tenants with budgets and guarantees, an admin and two users
per tenant, and an API token. Running it again changes nothing that is already there.

It lives in frontend, the top layer, because it seeds every layer below (accounts, market, nodeagent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from accounts import services as accounts_services
from accounts.models import ApiToken, Role, Tenant, User
from accounts.tokens import TOKEN_PREFIX, token_create
from config.money import MICRO
from inventory.services import gpu_types
from market.models import Guarantee
from market.selectors.jobs import largest_gangs
from market.services import ledger
from market.services.allowance import allowance_set
from market.services.guarantees import guarantee_set
from market.services.spend_alerts import spend_alert_create

DEMO_PASSWORD = "demo-password-123"
GPU_TYPES = [("H100", 80, 2.0, 20.0), ("A100", 80, 1.2, 12.0)]
# Simulated GPU machines: (name, type, topology domain, GPUs). Each registers through its own agent (sim
# backend), started by scripts/demo_agents.py from the Procfile, as a real machine would.
NODES = [
    ("sim-h100-0", "H100", "rack-a", 8),
    ("sim-h100-1", "H100", "rack-a", 8),
    ("sim-a100-0", "A100", "rack-b", 4),
    ("sim-a100-1", "A100", "rack-b", 4),
    ("sim-a100-2", "A100", "rack-b", 4),
]
# (tenant, job name, GPUs, bids (type, credits per GPU-hour) best first, max hours)
DEMO_JOBS = [
    ("vision", "vit-large", 8, [("H100", 4.0)], 6),
    ("vision", "detector-sweep", 2, [("A100", 2.0), ("H100", 2.5)], 2),
    ("nlp", "llm-finetune", 16, [("H100", 5.0)], 12),
    ("nlp", "tokenizer-eval", 1, [("A100", 1.5)], 1),
    ("speech", "asr-small", 4, [("A100", 1.8)], 4),
    ("vision", "dist-allreduce", 8, [("A100", 2.2)], 1),  # a gang across two whole A100 nodes (4 GPUs each)
]
# Jobs that run something else than the demo job: the gang meets at its rendezvous and all-reduces its ranks
# (docs/jobs.md §Multi-node jobs), then stays a minute so its parts can be watched on the job page.
DEMO_COMMANDS = {"dist-allreduce": "python -m nodeagent.agent.demo_dist --timeout 120 --hold 60"}


def demo_address(index: int) -> str:
    """Each demo node's address: its own loopback address (127.0.0.11, .12, ...), so a gang's parts on
    one machine still reach each other at distinct node addresses, as on a real cluster."""
    return f"127.0.0.{11 + index}"


# The demo jobs really run (on the simulated nodes' agents): the daemon's demo job, computing for a while.
DEMO_JOB_SECONDS = 120
# (slug, name, weight, guarantees by type, budget in credits)
TENANTS = [
    ("vision", "Vision", 2, {"H100": 4, "A100": 4}, 5_000),
    ("nlp", "NLP", 3, {"H100": 6, "A100": 2}, 8_000),
    ("speech", "Speech", 1, {"A100": 4}, 2_000),
]


class Command(BaseCommand):
    help = "Create demo GPU types, tenants, users, budgets and a token (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            admin = self._user("admin", staff=True)
            types = {
                name: gpu_types.gpu_type_save(
                    name=name,
                    memory_gb=mem,
                    reserve_price=int(r * MICRO),
                    max_price=int(m * MICRO),
                    actor=admin,
                )
                for name, mem, r, m in GPU_TYPES
            }
            self._nodes(types, admin)
            for slug, name, weight, guarantees, budget in TENANTS:
                tenant = Tenant.objects.filter(slug=slug).first() or accounts_services.tenant_create(
                    name=name, slug=slug, weight=weight, actor=admin
                )
                held = dict(Guarantee.objects.filter(tenant=tenant).values_list("gpu_type__name", "gpus"))
                for gpu_name, gpus in guarantees.items():
                    if held.get(gpu_name) == gpus:
                        continue  # set by an earlier run (checking it again needs every node registered)
                    guarantee_set(tenant=tenant, gpu_type=types[gpu_name], gpus=gpus, actor=admin)
                owner, member = self._user(f"{slug}-owner"), self._user(f"{slug}-member")
                accounts_services.membership_set(tenant=tenant, user=owner, role=Role.MANAGER, actor=admin)
                accounts_services.membership_set(tenant=tenant, user=member, role=Role.MEMBER, actor=admin)
                ledger.ledger_topup(
                    tenant=tenant,
                    amount=budget * MICRO,
                    key=f"demo-topup-{slug}",
                    actor=admin,
                    memo="demo budget",
                )
                # A weekly allowance of a tenth of the budget, never lifting it above one and a half times.
                allowance_set(
                    actor=admin,
                    tenant=tenant,
                    amount=budget * MICRO // 10,
                    period="week",
                    cap=budget * MICRO * 3 // 2,
                )
                # A spend alert that only notifies: under `make run` its mail shows in the worker's log.
                spend_alert_create(
                    actor=admin,
                    tenant=tenant,
                    kind="spend_day",
                    threshold=budget * MICRO // 20,
                    client_key="demo-daily-spend",
                    request_digest="demo-daily-spend",
                )
            self._jobs(types)
            secret = self._demo_token()
        if options["verbosity"] > 0:
            self._print_help(secret)

    def _jobs(self, types: dict[str, Any]) -> None:
        """A few pending jobs, so the first rounds have something to clear (idempotency keys: no repeats).

        A job is submitted once nodes of its types have registered (a gang larger than any node group is
        refused); scripts/demo_agents.py runs this command again once its agents have registered."""
        from market.services.jobs import job_submit

        for slug, name, gpus, bids, hours in DEMO_JOBS:
            tenant = Tenant.objects.get(slug=slug)
            if gpus > max(largest_gangs(gpu_types=[types[t] for t, _ in bids]).values()):
                continue
            job_submit(
                tenant=tenant,
                submitter=User.objects.get(username=f"{slug}-member"),
                name=name,
                command=DEMO_COMMANDS.get(
                    name, f"python -m nodeagent.agent.demo_job --seconds {DEMO_JOB_SECONDS}"
                ),
                gpus=gpus,
                bids=[(types[t], int(price * MICRO)) for t, price in bids],
                max_seconds=int(hours * 3600),
                grace_seconds=None,
                idempotency_key=f"demo-{name}",
                request_digest=f"demo-{name}",
            )

    def _nodes(self, types: dict[str, Any], admin: User) -> None:
        """One state directory per demo node under var/agents/, where scripts/demo_agents.py starts a
        simulated agent: a node not registered yet gets a bootstrap token there (kept while still usable);
        a registered one keeps the credential its agent wrote there."""
        from inventory.models import Node
        from nodeagent.services.registration import bootstrap_token_create, bootstrap_token_usable

        for index, (name, type_name, domain, count) in enumerate(NODES):
            state = Path(settings.VAR_DIR) / "agents" / name
            state.mkdir(parents=True, exist_ok=True)
            demo = {
                "gpus": count,
                "model": f"NVIDIA {type_name} 80GB (simulated)",
                "address": demo_address(index),
            }
            (state / "demo.json").write_text(json.dumps(demo) + "\n")
            if Node.objects.filter(name=name).exists():
                continue
            token = state / "bootstrap_token"
            if token.exists() and bootstrap_token_usable(raw=token.read_text().strip()) is not None:
                continue
            secret = bootstrap_token_create(
                actor=admin, name=name, gpu_type=types[type_name], topology_domain=domain
            ).secret
            token.write_text(secret + "\n")
            token.chmod(0o600)

    def _user(self, username: str, *, staff: bool = False) -> User:
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User.objects.create_user(
                username=username, password=DEMO_PASSWORD, email=f"{username}@demo.invalid", is_staff=staff
            )
            user.is_superuser = staff
            user.save(update_fields=["is_superuser"])
        return user

    def _demo_token(self) -> str:
        """The vision owner's token, kept under var/ so every run prints the same working one."""
        path = Path(settings.VAR_DIR) / "demo_token"
        secret = path.read_text().strip() if path.exists() else ""
        from accounts.tokens import token_authenticate

        if secret.startswith(TOKEN_PREFIX) and token_authenticate(raw=secret) is not None:
            return secret
        owner = User.objects.get(username="vision-owner")
        tenant = Tenant.objects.get(slug="vision")
        ApiToken.objects.filter(user=owner, name="demo", revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        secret = token_create(user=owner, tenant=tenant, name="demo").secret
        path.write_text(secret)
        path.chmod(0o600)
        return secret

    def _print_help(self, secret: str) -> None:
        out = self.stdout.write
        out(self.style.SUCCESS("Demo data ready."))
        out(f"  Portal:       http://127.0.0.1:8000/login/  (password for every demo user: {DEMO_PASSWORD})")
        out("  Users:        admin (platform admin); vision-owner, vision-member, nlp-owner, nlp-member,")
        out("                speech-owner, speech-member")
        out("  API docs:     http://127.0.0.1:8000/api/docs/")
        out(f"  API token:    {secret}  (vision-owner in vision; also in var/demo_token)")
        out(f"  Try:          curl -H 'Authorization: Bearer {secret}' http://127.0.0.1:8000/api/v1/me")
        out(
            f"  GPU nodes:    {len(NODES)} simulated agents, state under var/agents/ (scripts/demo_agents.py)"
        )
