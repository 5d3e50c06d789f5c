"""Property test: random sequences of ledger calls against a plain-Python model of ARCHITECTURE.md §Money.

Keys come from a small pool so that repeats (same arguments: replay) and collisions (different arguments:
KeyConflict) happen often. After every call the database must agree with the model, every entry must balance
and no tenant account may be negative.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from market.selectors.ledger import Balance, ledger_problems, tenant_balance
from market.services import ledger as svc
from market.services.ledger_bulk import ledger_hold
from tests.conftest import World

# slow: minutes of generated or hostile input; `make check` leaves it out, `make test` runs it.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TENANTS = st.integers(0, 1)
KEYS = st.integers(0, 5).map(lambda i: f"k{i}")
HOLD_KEYS = st.integers(0, 2).map(lambda i: f"k{i}")  # narrower, so settles often find (closed) holds
AMOUNTS = st.integers(0, 60)

CALL = st.one_of(
    st.tuples(st.just("topup"), TENANTS, st.integers(1, 60), KEYS),
    st.tuples(st.just("hold"), TENANTS, AMOUNTS, KEYS),
    st.tuples(st.just("settle"), HOLD_KEYS, st.integers(0, 80), KEYS),
    st.tuples(st.just("release"), HOLD_KEYS, st.just(0), KEYS),
)
# ("repeat", i) re-issues the i-th call so far (modulo their number), verbatim.
STEP = st.one_of(CALL, st.tuples(st.just("repeat"), st.integers(0, 1000)))


@dataclass
class Model:
    available: list[int] = field(default_factory=lambda: [0, 0])
    held: list[int] = field(default_factory=lambda: [0, 0])
    spent: list[int] = field(default_factory=lambda: [0, 0])
    holds: dict[str, list[Any]] = field(default_factory=dict)  # key -> [tenant, amount, open]
    requests: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def apply(self, call: tuple[Any, ...]) -> str:
        """The outcome the ledger must give: "ok", "replay" or an exception class name."""
        kind, target, amount, key = call
        if kind == "topup":
            request: tuple[Any, ...] = (kind, target, amount, None)
        elif kind == "hold":
            request = (kind, target, amount, key)
        else:  # settle and release name the hold, not the tenant
            request = (kind, None, amount, target)
        key = scoped(call)
        if key in self.requests:
            return "replay" if self.requests[key] == request else "KeyConflict"
        if kind == "topup":
            self.available[target] += amount
        elif kind == "hold":
            if amount > self.available[target]:
                return "InsufficientFunds"
            self.available[target] -= amount
            self.held[target] += amount
            self.holds[key] = [target, amount, True]
        else:
            found = self.holds.get(target)
            if found is None:
                return "UnknownHold"
            tenant, held, is_open = found
            if not is_open:
                return "HoldClosed"
            charged = min(amount, held)
            self.held[tenant] -= held
            self.available[tenant] += held - charged
            self.spent[tenant] += charged
            found[2] = False
        self.requests[key] = request
        return "ok"


def scoped(call: tuple[Any, ...]) -> Any:
    """A top-up's key is the client's, scoped to its tenant; holds and settlements share the system's."""
    kind, target, _, key = call
    return ("client", target, key) if kind == "topup" else key


def _call(world: World, call: tuple[Any, ...]) -> tuple[str, int | None]:
    kind, target, amount, key = call
    tenants = [world.alpha, world.beta]
    try:
        if kind == "topup":
            entry = svc.ledger_topup(tenant=tenants[target], amount=amount, key=key, actor=world.admin)
        elif kind == "hold":
            entry = ledger_hold(tenant=tenants[target], amount=amount, key=key)
        elif kind == "settle":
            entry = svc.ledger_settle(hold_key=target, charge=amount, key=key)
        else:
            entry = svc.ledger_release(hold_key=target, key=key)
    except svc.KeyConflict:  # a client's key reused is its subclass ClientKeyReused (config/idempotency.py)
        return "KeyConflict", None
    except svc.LedgerError as exc:
        return type(exc).__name__, None
    return ("replay" if entry.replayed else "ok"), entry.pk


@contextmanager
def rolled_back() -> Iterator[None]:
    """One example's writes, undone afterwards so the next example starts from an empty ledger."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=25))
def test_random_call_sequences_keep_the_ledger_consistent(world: World, steps: list[tuple[Any, ...]]) -> None:
    with rolled_back():
        model = Model()
        # Seed money so that holds usually fit; the sequence can still run a tenant dry.
        history: list[tuple[Any, ...]] = [("topup", 0, 100, "seed0"), ("topup", 1, 100, "seed1")]
        first_entry: dict[Any, int | None] = {}
        for call in history:
            assert model.apply(call) == "ok"
            first_entry[scoped(call)] = _call(world, call)[1]
        for step in steps:
            picked = step if step[0] != "repeat" else (history[step[1] % len(history)] if history else None)
            if picked is None:
                continue
            call = picked
            history.append(call)
            before = [tenant_balance(tenant=t) for t in (world.alpha, world.beta)]
            want = model.apply(call)
            got, entry_id = _call(world, call)
            assert got == want, call
            event(got)
            key = scoped(call)
            if got == "ok":
                first_entry[key] = entry_id
            if got == "replay":
                assert entry_id == first_entry[key]
            if got != "ok":
                assert [tenant_balance(tenant=t) for t in (world.alpha, world.beta)] == before
            for i, tenant in enumerate((world.alpha, world.beta)):
                want_balance = Balance(model.available[i], model.held[i], model.spent[i])
                assert tenant_balance(tenant=tenant) == want_balance
            assert ledger_problems() == []
