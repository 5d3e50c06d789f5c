"""Reads of shadow rounds (docs/rounds.md §Shadow rounds): which versions run in shadow, their rounds, and the
totals the console and the API show."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet, Sum

from allocator import clear
from market.models import PolicyVersion, Round, RoundState, ShadowRound, ShadowRun, VersionStatus
from market.selectors.book import Snapshot
from market.selectors.policy_snapshot import PolicySnapshot
from market.selectors.shadow_diff import SUMMARY_KEYS, shadow_round

# The one status a version runs in shadow with: a proposal (a draft never in force), not an applied version.
SHADOW_STATUS = VersionStatus.PROPOSED

# Per-tenant figures summed over a version's rounds (ShadowDiff.tenants' keys, less the fair-share state of one
# round, which is counted below as rounds where the proposal complied and live did not, or the reverse).
TENANT_SUMS = (
    "gained",
    "lost",
    "repriced",
    "gpus_live",
    "gpus_proposed",
    "gpu_hours_live",
    "gpu_hours_proposed",
    "preempted_live",
    "preempted_proposed",
)


def shadow_versions(*, limit: int) -> list[PolicyVersion]:
    """The versions in shadow now, oldest run first, at most `limit`."""
    runs = ShadowRun.objects.filter(stopped_at__isnull=True, version__status=SHADOW_STATUS)
    return [run.version for run in runs.select_related("version").order_by("started_at", "pk")[:limit]]


def shadow_proposal(version: PolicyVersion) -> PolicySnapshot:
    """The policy a version proposes, as a shadow round clears under it."""
    snapshot: PolicySnapshot = version.snapshot
    return snapshot


def shadow_run_open(*, version: PolicyVersion) -> ShadowRun | None:
    return ShadowRun.objects.filter(version=version, stopped_at__isnull=True).first()


def shadow_runs(*, version: PolicyVersion) -> QuerySet[ShadowRun]:
    return (
        ShadowRun.objects.filter(version=version).select_related("started_by", "stopped_by").order_by("-pk")
    )


def shadow_rounds(*, version: PolicyVersion) -> QuerySet[ShadowRound]:
    """A version's shadow rounds, newest round first (the index of its unique constraint)."""
    return ShadowRound.objects.filter(version=version).select_related("round").order_by("-round_id")


@dataclass
class ShadowTotals:
    """A version's shadow rounds accumulated: `summary` sums SUMMARY_KEYS (plus `rounds` and `clear_ms`);
    `tenants`: per slug TENANT_SUMS plus `fair_better` / `fair_worse` (rounds in which the tenant waited
    on both sides and complied with its fair share only under the proposal / only live); `prices`: per GPU type the rounds whose next posted
    price differed and the mean difference (proposed minus live, micro-credits per GPU-hour)."""

    summary: dict[str, int]
    tenants: dict[str, dict[str, float]] = field(default_factory=dict)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)


def shadow_sums(*, version: PolicyVersion) -> dict[str, int]:
    """The summary columns of a version's kept shadow rounds, summed in the database, with `rounds`."""
    rows = ShadowRound.objects.filter(version=version)
    sums = rows.aggregate(rounds=Count("pk"), **{key: Sum(key) for key in (*SUMMARY_KEYS, "clear_ms")})
    return {key: int(value or 0) for key, value in sums.items()}


def shadow_totals(*, version: PolicyVersion) -> ShadowTotals:
    """A version's kept shadow rounds, accumulated."""
    rows = ShadowRound.objects.filter(version=version).values_list(
        *SUMMARY_KEYS, "clear_ms", "tenants", "prices"
    )
    keys = (*SUMMARY_KEYS, "clear_ms")
    return accumulate(
        (dict(zip(keys, row[: len(keys)], strict=True)), row[-2], row[-1])
        for row in rows.iterator(chunk_size=500)
    )


def accumulate(
    rounds: Iterable[tuple[dict[str, int], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]],
) -> ShadowTotals:
    """Totals of shadow rounds given as (summary, tenants, prices), as ShadowDiff holds them (a stored
    ShadowRound, or a replay of kept books: manage.py shadow_replay)."""
    summary: dict[str, int] = dict.fromkeys((*SUMMARY_KEYS, "clear_ms", "rounds"), 0)
    tenants: dict[str, dict[str, float]] = defaultdict(
        lambda: dict.fromkeys((*TENANT_SUMS, "fair_better", "fair_worse"), 0)
    )
    price_rounds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # rounds, differing, sum of diffs
    for figures_of_round, tenant_rows, prices in rounds:
        summary["rounds"] += 1
        for key, value in figures_of_round.items():
            summary[key] += int(value)
        for slug, figures in tenant_rows.items():
            total = tenants[slug]
            for key in TENANT_SUMS:
                total[key] += figures.get(key, 0)
            live, proposed = figures.get("complied_live"), figures.get("complied_proposed")
            # Only where the tenant waits on both sides: not waiting at all is neither better nor worse.
            total["fair_better"] += int(proposed is True and live is False)
            total["fair_worse"] += int(live is True and proposed is False)
        for name, p in prices.items():
            diff = p["posted_proposed"] - p["posted_live"]
            acc = price_rounds[name]
            acc[0] += 1
            acc[1] += int(diff != 0)
            acc[2] += diff
    return ShadowTotals(
        summary=summary,
        tenants={slug: {k: round(v, 2) for k, v in t.items()} for slug, t in sorted(tenants.items())},
        prices={
            name: {"rounds": n, "differ": differ, "mean_diff": round(total / n) if n else 0}
            for name, (n, differ, total) in sorted(price_rounds.items())
        },
    )


def shadow_replay(*, version: PolicyVersion, rounds: int | None = None) -> ShadowTotals:
    """Shadow rounds after the fact: the kept books of the newest `rounds` finished rounds (every one whose
    book retention has not dropped, by default) cleared under the version and compared with their live result,
    accumulated as shadow_totals accumulates stored rows. Nothing is written (manage.py shadow_replay)."""
    kept = (
        Round.objects.filter(state=RoundState.DISPATCHED, book__isnull=False)
        .exclude(digest="")
        .order_by("-slot")
        .values_list("book", flat=True)
    )
    proposal = shadow_proposal(version)

    def diffs() -> Iterator[tuple[dict[str, int], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]]:
        for blob in kept[:rounds] if rounds is not None else kept.iterator(chunk_size=20):
            if blob is None:  # pruned between the query and this row
                continue
            book = Snapshot.load(bytes(blob)).book
            diff = shadow_round(book, clear(book), proposal)
            yield {**diff.summary, "clear_ms": diff.clear_ms}, diff.tenants, diff.prices

    return accumulate(diffs())


def compliance(complied: int, counted: int) -> float | None:
    """A share of (tenant, type) pairs, as the fair-share figures give it (None: nobody waited)."""
    return round(complied / counted, 4) if counted else None


def shadow_round_view(row: ShadowRound) -> dict[str, Any]:
    """One shadow round as the API and the console show it."""
    return {
        "round": row.round_id,
        "slot": row.round.slot,
        "created_at": row.created_at,
        "clear_ms": row.clear_ms,
        **{key: getattr(row, key) for key in SUMMARY_KEYS},
        "prices": row.prices,
        "tenants": row.tenants,
    }
