"""The orphan check: every key the database does not enforce is checked, and a row pointing at nothing is
named with its table, column and id (the integration tests run it on real traffic, where it must find none)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from market.models import (
    BidOutcome,
    Command,
    FairShareUsage,
    JournalEntry,
    Lease,
    LeaseGpu,
    RoundLoss,
    UsageMinute,
    UsageSample,
)
from ops.integrity import orphans, unchecked_keys

pytestmark = pytest.mark.django_db


def test_the_unenforced_keys_are_the_bulk_written_ones() -> None:
    keys = {(model.__name__, field.name) for model, field in unchecked_keys()}
    assert {("Lease", "job"), ("Lease", "round"), ("LeaseGpu", "lease"), ("LeaseGpu", "gpu")} <= keys
    assert {("Command", "node"), ("Command", "lease"), ("BidOutcome", "round"), ("BidOutcome", "job")} <= keys
    assert ("JournalEntry", "lease") in keys  # a settlement"s lease (issue 36: its hold is shared)
    assert (
        {model for model, _ in unchecked_keys()}
        <= {
            Lease,
            LeaseGpu,
            Command,
            BidOutcome,
            RoundLoss,  # issue 36: the round's losses by tenant and reason, bulk-written beside the outcomes
            UsageSample,  # issue 36: day-partitioned, its partitions dropped whole (no key to check at each insert)
            UsageMinute,
            FairShareUsage,
            JournalEntry,
        }
    )


def test_an_empty_database_has_no_orphans() -> None:
    assert orphans() == []
    out = StringIO()
    call_command("orphan_check", stdout=out)
    assert out.getvalue().startswith("orphans: none over ")


def test_a_command_for_a_missing_node_and_lease_is_named() -> None:
    command = Command.objects.create(
        node_id=987_654,
        lease_id=987_653,
        kind="bind",
        payload={},
        fence=1,
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    found = {(o.table, o.column): o for o in orphans()}
    assert set(found) == {("market_command", "node_id"), ("market_command", "lease_id")}
    assert found["market_command", "node_id"].count == 1
    assert found["market_command", "node_id"].sample == [command.pk]
    assert "point at no nodeagent_node row" in found["market_command", "node_id"].what

    out = StringIO()
    with pytest.raises(CommandError, match="2 key"):
        call_command("orphan_check", stdout=out)
    assert f"market_command.lease_id: 1 row(s) point at no market_lease row (e.g. id {command.pk})" in (
        out.getvalue()
    )
