"""The frozen book: pending bids by PostgreSQL's columnar read against the ORM path SQLite takes, and live
leases with their last checkpoints on both."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from allocator import NO_PRICE
from market.models import Job, JobState, Lease
from market.selectors.book import _COLUMNS, _pending, book_snapshot
from market.selectors.policy import market_policy
from market.services import rounds
from market.services.leases import lease_running
from tests.market.round_helpers import make_job

pytestmark = pytest.mark.django_db


def test_pending_columns_on_postgresql_equal_the_orm_path(world, monkeypatch):
    w = world
    make_job(w.alpha, w.amy, gpus=2, limits={w.h100: 4.5, w.a100: 2})
    make_job(w.beta, w.bea, gpus=8, limits={w.a100: 1.25}, age_s=600)
    only_h100 = make_job(w.alpha, w.alice, limits={w.h100: 3})
    make_job(w.gamma, w.cara, limits={w.h100: 2.000001})
    make_job(w.beta, w.bob, limits={w.h100: 9})
    Job.objects.filter(tenant=w.gamma).update(waited_before=3, wait_round=7, bid_version=2)
    done = make_job(w.alpha, w.amy, limits={w.h100: 5})
    Job.objects.filter(pk=done.pk).update(state=JobState.COMPLETED)  # not pending: not read

    tenants = [w.alpha.pk, w.gamma.pk, w.beta.pk]
    types = ["A100", "H100", "V100"]  # V100: a type no bid names
    fast = _pending(tenants, types)
    assert connection.vendor == "postgresql"
    monkeypatch.setattr(connection, "vendor", "sqlite")
    plain = _pending(tenants, types)

    assert set(fast) == set(plain) == {*_COLUMNS, "limit"}
    for name in fast:
        assert fast[name].dtype == np.int64 and np.array_equal(fast[name], plain[name]), name
    assert fast["job"].tolist() == sorted(
        Job.objects.filter(state=JobState.PENDING).values_list("pk", flat=True)
    )
    row = fast["job"].tolist().index(only_h100.pk)
    assert fast["limit"][row].tolist() == [NO_PRICE, 3_000_000, NO_PRICE]
    assert fast["limit"][fast["gpus"] == 8].tolist() == [[1_250_000, NO_PRICE, NO_PRICE]]
    assert sorted(set(fast["waited_before"].tolist())) == [0, 3]


def test_pending_of_no_jobs_or_no_types_is_empty_columns_of_the_right_shape(world):
    cols = _pending([world.alpha.pk], ["H100", "A100"])
    assert cols["limit"].shape == (0, 2) and all(len(cols[name]) == 0 for name in _COLUMNS)
    make_job(world.alpha, world.amy, limits={world.h100: 4})
    assert _pending([world.alpha.pk], [])["limit"].shape == (1, 0)


def test_the_freeze_passes_each_leases_checkpoint_else_its_start_on_both_paths(world, monkeypatch):
    """Live leases in the book: the same from both paths, each with its last checkpoint (else its start)."""
    w = world
    w.nodes(w.h100, 2, size=8)
    w.fund(w.beta, 1000)
    jobs = [make_job(w.beta, w.bob, gpus=8, limits={w.h100: 6}, name=f"b{i}") for i in range(2)]
    assert rounds.round_tick() is not None
    hour_ago = timezone.now() - timedelta(hours=1)
    for job in jobs:
        lease_running(lease_id=job.leases.get().pk)
    Lease.objects.filter(job__in=jobs).update(started_at=hour_ago, running_at=hour_ago)
    b0, b1 = (job.leases.get() for job in jobs)
    saved = timezone.now() - timedelta(minutes=7)
    Lease.objects.filter(pk=b0.pk).update(last_checkpoint_at=saved)
    b1.refresh_from_db()
    now = timezone.now()
    fast = book_snapshot(round_id=99, now=now, policy=market_policy()).book.leases
    assert connection.vendor == "postgresql"
    monkeypatch.setattr(connection, "vendor", "sqlite")  # the ORM path the local demo takes
    plain = book_snapshot(round_id=99, now=now, policy=market_policy()).book.leases
    for name in ("lease", "start", "checkpoint", "gpus"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name
    checkpoint = dict(zip(fast.lease.tolist(), fast.checkpoint.tolist(), strict=True))
    assert checkpoint == {b0.pk: int(saved.timestamp()), b1.pk: int(b1.started_at.timestamp())}
    # What the clearing will count as lost if it preempts now: 7 minutes on b0's 8 GPUs, an hour on b1's.
    lost = dict(zip(fast.lease.tolist(), fast.lost_gpu_s(int(now.timestamp())).tolist(), strict=True))
    assert lost[b0.pk] == pytest.approx(8 * 420, abs=8 * 2)
    assert lost[b1.pk] == pytest.approx(8 * 3600, abs=8 * 2)
