"""Series read from the database at scrape time: correct whichever process or machine did the work.

A custom collector (prometheus-client's documented way to export values kept elsewhere): each scrape asks
the database a handful of aggregate questions (ops.selectors) and turns the answers into metric families.
Money is exported in credits (1 credit = 1,000,000 micro-credits), times in seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from market.selectors.fair_share import fair_share_report, owed_by_tenant
from market.selectors.lost_work import lost_by_tenant
from market.selectors.prices import price_board
from ops import selectors

log = logging.getLogger(__name__)

MICRO = 1_000_000
# Round states grouped as the outcome a dashboard cares about.
_OUTCOME = {"dispatched": "committed", "failed": "failed"}


class MarketCollector(Collector):
    """Each group of series is read on its own: a group whose query fails is left out of this scrape and
    counted in gpumarket_scrape_errors, and the rest (and the process's own series) still answer."""

    def collect(self) -> Iterator[Metric]:
        failed = []
        for name, group in (
            ("rounds", _rounds),
            ("prices", _prices),
            ("gpus", _gpus),
            ("tenants", _tenants),
            ("fair_share", _fair_share),
            ("ledger", _ledger),
            ("agents", _agents),
        ):
            try:
                families = list(group())
            except DatabaseError:
                log.exception("metrics: reading the %s series failed", name)
                failed.append(name)
                continue
            yield from families
        errors = GaugeMetricFamily(
            "gpumarket_scrape_errors", "Groups of market series this scrape could not read.", labels=["group"]
        )
        for name in failed:
            errors.add_metric([name], 1)
        yield errors


def _rounds() -> Iterator[Metric]:
    totals = selectors.round_totals()
    done = CounterMetricFamily(
        "gpumarket_rounds", "Rounds finished, by outcome (committed or failed).", labels=["outcome"]
    )
    for state, outcome in _OUTCOME.items():
        done.add_metric([outcome], totals.by_state.get(state, 0))
    yield done
    in_progress = sum(n for state, n in totals.by_state.items() if state not in _OUTCOME)
    yield GaugeMetricFamily(
        "gpumarket_rounds_in_progress", "Rounds started and not yet finished.", value=in_progress
    )
    preempted = CounterMetricFamily(
        "gpumarket_round_preemptions",
        "Leases preempted by rounds, by the allocator's rule (reclaim_guarantee or fair_share).",
        labels=["reason"],
    )
    for reason, n in selectors.preemptions_by_reason().items():
        preempted.add_metric([reason], n)
    yield preempted
    lost = CounterMetricFamily(
        "gpumarket_preemption_lost_gpu_seconds",
        "GPU-seconds of work preemptions threw away (GPUs x seconds since the victim's last checkpoint or "
        "start), by the victim's tenant. GPU-hours: divide by 3600.",
        labels=["tenant"],
    )
    for tenant, seconds in lost_by_tenant().items():
        lost.add_metric([tenant], seconds)
    yield lost
    for name, help_text, value in (
        ("gpumarket_round_winners", "Bids that won a round (leases written).", totals.winners),
        ("gpumarket_round_bids", "Bids entered into rounds.", totals.bids),
        ("gpumarket_round_gpus_allocated", "GPUs allocated by rounds.", totals.gpus_allocated),
    ):
        yield CounterMetricFamily(name, help_text, value=value)
    if totals.last_done_at is not None:
        yield GaugeMetricFamily(
            "gpumarket_round_last_committed_timestamp_seconds",
            "When the newest committed round finished (Unix time).",
            value=totals.last_done_at.timestamp(),
        )
    held = selectors.reservation_totals(timezone.now())
    figures: tuple[tuple[str, str, float], ...] = (
        (
            "gpumarket_reserved_idle_gpu_seconds",
            "GPU-seconds idle on nodes reserved for a blocked gang: each round's idle reserved GPUs times its "
            "length.",
            held.reserved_idle_gpu_s,
        ),
        (
            "gpumarket_backfilled_gpu_seconds",
            "GPU-seconds run by leases started by backfill on reserved nodes (live ones until now).",
            held.backfilled_gpu_s,
        ),
        ("gpumarket_moves", "Running leases moved to other GPUs for a gang and placed again.", held.moves),
        (
            "gpumarket_moved_lost_gpu_seconds",
            "GPU-seconds of work moves threw away (since each moved job's last checkpoint).",
            held.moved_lost_gpu_s,
        ),
    )
    for name, help_text, figure in figures:
        yield CounterMetricFamily(name, help_text, value=figure)
    for step, hist in selectors.round_step_histograms().items():
        name = "gpumarket_round_duration_seconds" if step == "round" else f"gpumarket_round_{step}_seconds"
        what = "A round's work (freeze, clear and commit)" if step == "round" else f"A round's {step} step"
        family = HistogramMetricFamily(name, f"{what}, seconds.")
        buckets = [(str(bound), n) for bound, n in hist.buckets] + [("+Inf", hist.count)]
        family.add_metric([], buckets, hist.total_s)
        yield family


def _prices() -> Iterator[Metric]:
    posted = GaugeMetricFamily(
        "gpumarket_price_posted_credits_per_gpu_hour",
        "Posted price the next round starts from, by GPU type.",
        labels=["gpu_type"],
    )
    reserve = GaugeMetricFamily(
        "gpumarket_price_reserve_credits_per_gpu_hour", "Reserve price, by GPU type.", labels=["gpu_type"]
    )
    clearing = GaugeMetricFamily(
        "gpumarket_price_clearing_credits_per_gpu_hour",
        "Spot (clearing) price of the newest round with a spot winner in the type.",
        labels=["gpu_type"],
    )
    for row in price_board():
        posted.add_metric([row.gpu_type], row.posted / MICRO)
        reserve.add_metric([row.gpu_type], row.reserve / MICRO)
        if row.spot is not None:
            clearing.add_metric([row.gpu_type], row.spot / MICRO)
    yield from (posted, reserve, clearing)


def _gpus() -> Iterator[Metric]:
    gpus = GaugeMetricFamily(
        "gpumarket_gpus",
        "GPUs by type and state (free, busy, or the node's state when it is not up).",
        labels=["gpu_type", "state"],
    )
    for (gpu_type, state), n in sorted(selectors.gpus_by_state().items()):
        gpus.add_metric([gpu_type, state], n)
    yield gpus
    jobs = GaugeMetricFamily(
        "gpumarket_pending_jobs", "Pending jobs bidding for the GPU type.", labels=["gpu_type"]
    )
    demand = GaugeMetricFamily(
        "gpumarket_pending_gpus", "GPUs wanted by pending jobs bidding for the GPU type.", labels=["gpu_type"]
    )
    for gpu_type, (n_jobs, n_gpus) in sorted(selectors.pending_demand().items()):
        jobs.add_metric([gpu_type], n_jobs)
        demand.add_metric([gpu_type], n_gpus)
    yield from (jobs, demand)


def _tenants() -> Iterator[Metric]:
    held = selectors.tenant_gpus()
    family = GaugeMetricFamily(
        "gpumarket_tenant_gpus",
        "GPUs of a tenant's live leases, by type and tier (G guaranteed, B borrowed, S spot).",
        labels=["tenant", "gpu_type", "tier"],
    )
    for (tenant, gpu_type, tier), n in sorted(held.items()):
        family.add_metric([tenant, gpu_type, tier], n)
    yield family
    guaranteed = GaugeMetricFamily(
        "gpumarket_tenant_guarantee_gpus",
        "GPUs guaranteed to a tenant, by type.",
        labels=["tenant", "gpu_type"],
    )
    compliance = GaugeMetricFamily(
        "gpumarket_tenant_guarantee_compliance_ratio",
        "Share of its guarantee a tenant holds (1 when met, or when it wants none of the type).",
        labels=["tenant", "gpu_type"],
    )
    for row in selectors.guarantees(held, selectors.tenant_pending_types()):
        guaranteed.add_metric([row.tenant, row.gpu_type], row.guaranteed)
        compliance.add_metric([row.tenant, row.gpu_type], row.compliance)
    yield from (guaranteed, compliance)


def _fair_share() -> Iterator[Metric]:
    """allocator/fairshare.py's figures over the last 24 hours of rounds (market.selectors.fair_share) and the
    history the rounds keep; a tenant with no waiting demand in the window has no compliance or shortfall."""
    report = fair_share_report(since=timezone.now() - timedelta(days=1))
    compliance = GaugeMetricFamily(
        "gpumarket_tenant_fair_share_compliance_24h_ratio",
        "Share of a tenant's 24 h windows with waiting demand in which it held at least 95% of its fair-share "
        "target, over the last 24 hours.",
        labels=["tenant"],
    )
    shortfall = GaugeMetricFamily(
        "gpumarket_tenant_fair_share_shortfall_ratio",
        "GPUs a tenant held below its fair-share target over the type's GPUs, mean over contended rounds of "
        "the last 24 hours.",
        labels=["tenant"],
    )
    owed = GaugeMetricFamily(
        "gpumarket_tenant_fair_share_owed_gpu_hours",
        "GPU-hours of fair-share target a tenant did not receive, decayed (negative: received beyond it).",
        labels=["tenant", "gpu_type"],
    )
    for t in report.tenants:
        if t.compliance_24h is not None:
            compliance.add_metric([t.tenant], t.compliance_24h)
        if t.shortfall is not None:
            shortfall.add_metric([t.tenant], t.shortfall)
    for tenant, by_type in sorted(owed_by_tenant().items()):
        for gpu_type, hours in sorted(by_type.items()):
            owed.add_metric([tenant, gpu_type], hours)
    yield from (compliance, shortfall, owed)


def _ledger() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "gpumarket_ledger_balance_credits",
        "Ledger balances summed by account kind (available and held: all tenants; revenue, topup: the "
        "platform's), credits.",
        labels=["kind"],
    )
    for kind, total in sorted(selectors.ledger_totals().items()):
        family.add_metric([kind], total / MICRO)
    yield family


def _agents() -> Iterator[Metric]:
    beats = selectors.node_heartbeats()
    if not beats:
        return
    now = timezone.now()
    family = GaugeMetricFamily(
        "gpumarket_agent_heartbeat_age_seconds",
        "Seconds since a node's agent last sent a heartbeat.",
        labels=["node"],
    )
    for node, at in sorted(beats.items()):
        if at is not None:
            family.add_metric([node], (now - at).total_seconds())
    yield family
