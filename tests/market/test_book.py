"""The frozen book's pending bids: PostgreSQL's columnar read against the ORM path SQLite takes."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from allocator import NO_PRICE
from market.models import Job, JobState
from market.selectors.book import _COLUMNS, _pending
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
