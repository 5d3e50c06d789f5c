"""One translation of the services' refusals (market/api/errors.py, issue 26 §4): the table the API and the
portal both read, and the same refusal at both doors."""

from __future__ import annotations

import html

import pytest
from django.test import Client
from rest_framework import serializers

from config.errors import PolicyError
from market.api.errors import Refusal, Refused, ServiceError, api_exception, form_errors, refusal
from market.services import jobs, ledger
from tests.conftest import World
from tests.frontend.conftest import login
from tests.ledger.factories import fund, hold, settle

# What each door answered before the mapping was one (market/api/jobs.py _refused, market/api/ledger.py
# api_error and _STATUS, market/api/policy.py _policy_error; the portal's except clauses).
TABLE: list[tuple[ServiceError, Refusal]] = [
    (PolicyError("gpus", "must be at least 1"), Refusal("gpus", "must be at least 1", 400, "invalid")),
    (ledger.InvalidAmount("must be positive"), Refusal("amount", "must be positive", 400, "invalid")),
    (ledger.InvalidAmount("bad", field="charge"), Refusal("charge", "bad", 400, "invalid")),
    (ledger.InvalidKey("bad key"), Refusal("key", "bad key", 400, "invalid")),
    (ledger.NotPermitted("no"), Refusal(None, "no", 403, "permission_denied")),
    (ledger.UnknownHold("gone"), Refusal(None, "gone", 404, "unknown_hold")),
    (ledger.KeyConflict("k"), Refusal(None, "k", 409, "key_conflict")),
    (ledger.InsufficientFunds("poor"), Refusal(None, "poor", 409, "insufficient_funds")),
    (ledger.RefundExceedsCharges("much"), Refusal(None, "much", 409, "refund_exceeds_charges")),
    (ledger.HoldClosed("shut"), Refusal(None, "shut", 409, "hold_closed")),
    (ledger.LedgerError("other"), Refusal(None, "other", 400, "ledger_error")),
    (jobs.NotPermitted("no"), Refusal(None, "no", 403, "permission_denied")),
    (jobs.IdempotencyKeyReused("again"), Refusal(None, "again", 409, "idempotency_key_reused")),
    (jobs.JobNotPending("late"), Refusal(None, "late", 409, "job_not_pending")),
    (jobs.JobFinished("done"), Refusal(None, "done", 409, "job_finished")),
    (jobs.TooManyPending("many"), Refusal(None, "many", 409, "too_many_pending")),
]


@pytest.mark.parametrize(("exc", "expected"), TABLE, ids=[type(e).__name__ for e, _ in TABLE])
def test_each_refusal_has_one_answer(exc: ServiceError, expected: Refusal) -> None:
    assert refusal(exc) == expected
    api = api_exception(exc)
    if expected.field is not None:
        assert isinstance(api, serializers.ValidationError)
        assert api.detail == {expected.field: [expected.message]}
        assert form_errors(exc) == {expected.field: expected.message}
    else:
        assert isinstance(api, Refused)
        assert (api.status_code, api.get_codes(), str(api.detail)) == (
            expected.status,
            expected.code,
            expected.message,
        )
        assert form_errors(exc, whole="amount") == {"amount": expected.message}


@pytest.mark.django_db
def test_a_refund_beyond_the_charges_reads_the_same_at_both_doors(world: World) -> None:
    fund(world.alpha, 10_000_000)
    settle(hold(world.alpha, 5_000_000), 3_000_000)
    api = world.client(world.admin).post(
        "/api/v1/tenants/alpha/refunds", {"amount": "4", "key": "r1"}, format="json"
    )
    assert api.status_code == 409 and api.json()["error"] == "refund_exceeds_charges"
    message = api.json()["detail"]
    page = login(Client(), world.admin).post(
        "/console/tenants/alpha/", {"action": "money", "money_kind": "refund", "amount": "4", "nonce": "n"}
    )
    assert page.status_code == 400
    assert message in html.unescape(page.content.decode())
