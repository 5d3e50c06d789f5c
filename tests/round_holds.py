"""What a round's holds should be, from its cleared result: one hold per tenant, the sum of its winners' holds
(docs/ledger.md §Holds), keyed as the commit keys it."""

from __future__ import annotations

from collections import defaultdict

from accounts.models import Tenant
from allocator import Result
from market.services.round_commit import hold_key


def decided_holds(round_id: int, result: Result) -> dict[str, int]:
    tenants = dict(Tenant.objects.values_list("slug", "pk"))
    out: dict[str, int] = defaultdict(int)
    for w in result.winner_records():
        out[hold_key(round_id, tenants[w.tenant])] += w.hold
    return dict(out)
