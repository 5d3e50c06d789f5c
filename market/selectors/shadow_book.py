"""A frozen book as a proposed policy would have frozen it (docs/rounds.md §Shadow rounds). Pure: no database.

A shadow round clears the live round's own frozen book once more under a proposal, so everything the freeze
read from the world (nodes, free GPUs, leases, bids, balances, fair-share history, posted prices) stays as it
was, and only what the policy decides changes:

- the market knobs the allocator takes (``allocator.Policy``: price step, minimum runtime, starvation, fair
  reclaim, fair-share half-life and payback), by their names in the snapshot's ``market``;
- per GPU type, the reserve and maximum price; the posted price the round starts from is kept within the new
  bounds, as ``/prices`` keeps it within today's;
- per tenant, the weight, the guardrail and the guarantees (a type the tenant's entry does not name is
  guaranteed nothing, as in the snapshot itself).

A tenant or GPU type the proposal does not name (created after the proposal was taken) keeps the book's
values; a tenant or type the proposal names but the book lacks (inactive now, retired) is ignored: the book is
what the cluster is. Allowances are not part of a round's input, so they make no difference here.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from allocator import NO_PRICE, Book, GpuTypes, Policy, Tenants
from market.selectors.policy_snapshot import PolicySnapshot


def book_under(book: Book, proposal: PolicySnapshot) -> Book:
    """The same book, as the proposal's policy would have frozen it."""
    return replace(
        book,
        types=_types(book.types, proposal.get("gpu_types", {})),
        tenants=_tenants(book, proposal.get("tenants", {})),
        policy=_policy(book.policy, proposal.get("market", {})),
    )


def _policy(policy: Policy, market: dict[str, int]) -> Policy:
    changed: dict[str, Any] = {}
    for f in fields(Policy):
        if f.name in market:
            value = market[f.name]
            changed[f.name] = bool(value) if isinstance(getattr(policy, f.name), bool) else int(value)
    return replace(policy, **changed)


def _types(types: GpuTypes, proposed: dict[str, Any]) -> GpuTypes:
    reserve, top = types.reserve.copy(), types.max_price.copy()
    for k, name in enumerate(types.names):
        bounds = proposed.get(name)
        if bounds is not None:
            reserve[k], top[k] = bounds["reserve_price"], bounds["max_price"]
    return GpuTypes(
        names=types.names,
        reserve=reserve,
        posted=np.minimum(np.maximum(types.posted, reserve), top),
        max_price=top,
    )


def _tenants(book: Book, proposed: dict[str, Any]) -> Tenants:
    t = book.tenants
    weight, guardrail, guarantee = t.weight.copy(), t.guardrail.copy(), t.guarantee.copy()
    type_ix = {name: k for k, name in enumerate(book.types.names)}
    for m, slug in enumerate(t.names):
        entry = proposed.get(slug)
        if entry is None:
            continue
        weight[m] = entry["weight"]
        guardrail[m] = NO_PRICE if entry["guardrail"] is None else entry["guardrail"]
        guarantee[m] = 0
        for type_name, gpus in entry["guarantees"].items():
            if type_name in type_ix:
                guarantee[m, type_ix[type_name]] = gpus
    return replace(t, weight=weight, guardrail=guardrail, guarantee=guarantee)
