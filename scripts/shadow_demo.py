"""Shadow comparison of one proposal on the demo history (docs/rounds.md §Shadow rounds, figures).

Builds the demo platform (`manage.py demo_data`) in a fresh PostgreSQL database (SHADOW_DEMO_DATABASE_URL,
default postgres://postgres@127.0.0.1:5432/gpumarket_shadow_demo: dropped and re-created), registers its five
simulated nodes as their agents would (the bootstrap tokens demo_data leaves), lets demo_data submit its jobs,
and runs rounds a period apart (each lease and the fair-share history moved back a period before each round,
as if the time had passed), each with the proposal in shadow; then prints the live rounds, the stored
shadow totals and `manage.py shadow_replay` of the same version (the kept books, cleared after the fact), as
JSON lines. The proposal: vision's weight 2 -> 6 and its H100 guarantee 4 -> 8, nlp's H100 guarantee 6 -> 2
(the demo's H100 contention: vision's 8-GPU vit-large against nlp's 16-GPU llm-finetune on 16 H100s), the
minimum runtime halved.

    .venv/bin/python scripts/shadow_demo.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import timedelta
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _db import fresh_database  # noqa: E402 - bench/ holds the database helper the benches share

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpumarket_shadow_demo"
PERIOD = timedelta(seconds=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    url = os.environ.get("SHADOW_DEMO_DATABASE_URL", DEFAULT_URL)
    os.environ["DATABASE_URL"] = url
    os.environ["GPUMARKET_VAR_DIR"] = tempfile.mkdtemp(prefix="shadow-demo-")  # demo_data's agent folders
    os.environ.setdefault("SECRET_KEY", "demo-only")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db.models import F
    from django.utils import timezone

    from accounts.models import User
    from frontend.management.commands.demo_data import NODES
    from market.models import FairShareUsage, Lease, Round
    from market.selectors.policy_snapshot import policy_snapshot
    from market.selectors.shadow import compliance, shadow_totals
    from market.services.policy_proposals import policy_version_propose
    from market.services.rounds import round_tick
    from market.services.shadow import shadow_start
    from nodeagent.services.registration import GpuInfo, node_register

    fresh_database(url)
    call_command("migrate", verbosity=0)
    call_command("demo_data", verbosity=0)
    for name, type_name, _domain, count in NODES:
        token = (Path(settings.VAR_DIR) / "agents" / name / "bootstrap_token").read_text().strip()
        gpus = [GpuInfo(f"GPU-{name}-{i}", i, f"NVIDIA {type_name} 80GB", 81920) for i in range(count)]
        assert node_register(raw_token=token, name=name, agent_version="demo", gpus=gpus) is not None
    call_command("demo_data", verbosity=0)  # the jobs, now that their nodes exist

    admin = User.objects.get(username="admin")
    proposal = policy_snapshot()
    proposal["tenants"]["vision"]["weight"] = 6
    proposal["tenants"]["vision"]["guarantees"]["H100"] = 8
    proposal["tenants"]["nlp"]["guarantees"]["H100"] = 2
    proposal["market"]["min_runtime_s"] //= 2
    version = policy_version_propose(
        actor=admin,
        snapshot=proposal,
        reason="demo: vision weight 6 and H100 guarantee 8, nlp H100 guarantee 2, minimum runtime halved",
    )
    shadow_start(actor=admin, version=version)
    start = timezone.now()
    for r in range(args.rounds):
        if r:  # a period passes: the freeze reads the clock, so the leases and the fair-share history age instead
            Lease.objects.update(started_at=F("started_at") - PERIOD)
            FairShareUsage.objects.update(updated_at=F("updated_at") - PERIOD)
        rnd = round_tick(now=start + PERIOD * r)
        assert rnd is not None and rnd.state == "dispatched", rnd and rnd.error
    for rnd in Round.objects.order_by("slot"):
        print(
            json.dumps(
                {"round": rnd.pk, "bids": rnd.bids, "winners": rnd.winners, "preemptions": rnd.preemptions}
            )
        )
    leases = Lease.objects.values_list("job__name", "tenant__slug", "gpu_type__name", "tier", "state")
    print(json.dumps({"live_leases": [list(row) for row in leases.order_by("pk")]}))
    totals = shadow_totals(version=version)
    s = totals.summary
    print(
        json.dumps(
            {
                "shadow_totals": s,
                "tenants": totals.tenants,
                "prices": totals.prices,
                "compliance_live": compliance(s["fair_complied_live"], s["fair_counted_live"]),
                "compliance_proposed": compliance(s["fair_complied_proposed"], s["fair_counted_proposed"]),
            }
        )
    )
    out = StringIO()
    call_command("shadow_replay", str(version.number), stdout=out)
    print(json.dumps({"shadow_replay": json.loads(out.getvalue())["summary"]}))


if __name__ == "__main__":
    main()
