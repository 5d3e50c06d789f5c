"""What a proposal would have done differently in one round: the shadow clear and its comparison with the live
result (docs/rounds.md §Shadow rounds). Pure: no database; numpy over the book's columns, no loop per bid.

Both sides start from the same frozen book (the live round's), so a shadow round is a counterfactual of that
one round, not a trajectory of its own: the next shadow round starts again from what the live rounds left (the
what-if replays, docs/whatif.md, follow a proposal's own trajectory over a whole window).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from allocator import Book, Result, clear, fairshare
from market.selectors.policy_snapshot import PolicySnapshot
from market.selectors.shadow_book import book_under

SIDES = ("live", "proposed")


@dataclass(frozen=True)
class ShadowDiff:
    """``summary``: round-wide counts (keys of SUMMARY_KEYS); ``prices``: per GPU type the next posted price
    and the spot price on each side; ``tenants``: per tenant slug its figures on each side, only for tenants
    where some figure differs (a round where nothing differs stores no tenant); ``clear_ms``: the shadow's own
    clearing time."""

    summary: dict[str, int]
    prices: dict[str, dict[str, int | None]]
    tenants: dict[str, dict[str, Any]]
    clear_ms: int


# Round-wide counts; each "_live"/"_proposed" pair is one figure on both sides.
SUMMARY_KEYS = (
    "bids",
    "winners_live",
    "winners_proposed",
    "gained",  # bids won under the proposal that lost live
    "lost",  # bids won live that the proposal would have lost
    "repriced",  # bids won on both sides at another price, tier or type
    "gpus_live",
    "gpus_proposed",
    "gpu_hours_live",  # GPUs x max hours of the winners: what the round's leases may run
    "gpu_hours_proposed",
    "preemptions_live",
    "preemptions_proposed",
    "fair_counted_live",  # (tenant, type) pairs left waiting by the round
    "fair_counted_proposed",
    "fair_complied_live",  # ... of them at or above 95% of their fair-share target (or short of less than a gang)
    "fair_complied_proposed",
    "prices_differ",  # GPU types whose next posted price differs
)


def shadow_round(book: Book, live: Result, proposal: PolicySnapshot) -> ShadowDiff:
    """Clear the live round's frozen book once more under the proposal and compare with the live result."""
    shadow_book = book_under(book, proposal)
    started = time.perf_counter()
    shadow = clear(shadow_book)
    clear_ms = round((time.perf_counter() - started) * 1000)
    return compare(book, live, shadow_book, shadow, clear_ms=clear_ms)


def compare(
    live_book: Book, live: Result, shadow_book: Book, shadow: Result, *, clear_ms: int = 0
) -> ShadowDiff:
    """Bid by bid, lease by lease and tenant by tenant, what the shadow result changes against the live one.
    Both books must hold the same bids, leases and tenants in the same rows (book_under keeps them)."""
    bids, n_tenants = live_book.bids, len(live_book.tenants)
    won = {side: _won(len(bids), r) for side, r in zip(SIDES, (live, shadow), strict=True)}
    won_l, won_p = won["live"][0], won["proposed"][0]
    gained, lost = won_p & ~won_l, won_l & ~won_p
    repriced = won_l & won_p & (won["live"][1] != won["proposed"][1]).any(axis=0)
    hours = bids.gpus.astype(np.float64) * bids.max_s / 3600.0

    def per_tenant(mask: NDArray[np.bool_], weights: NDArray[Any] | None = None) -> NDArray[np.float64]:
        w = None if weights is None else weights[mask]
        return np.bincount(bids.tenant[mask], weights=w, minlength=n_tenants).astype(np.float64)

    lease_tenant = live_book.leases.tenant
    preempted = {
        side: np.bincount(lease_tenant[r.preemptions.row], minlength=n_tenants)
        for side, r in zip(SIDES, (live, shadow), strict=True)
    }
    fair = {
        side: _fair(b, r) for side, b, r in zip(SIDES, (live_book, shadow_book), (live, shadow), strict=True)
    }
    figures: dict[str, NDArray[Any]] = {
        "won_live": per_tenant(won_l),
        "won_proposed": per_tenant(won_p),
        "gained": per_tenant(gained),
        "lost": per_tenant(lost),
        "repriced": per_tenant(repriced),
        "gpus_live": per_tenant(won_l, bids.gpus),
        "gpus_proposed": per_tenant(won_p, bids.gpus),
        "gpu_hours_live": per_tenant(won_l, hours),
        "gpu_hours_proposed": per_tenant(won_p, hours),
        "preempted_live": preempted["live"],
        "preempted_proposed": preempted["proposed"],
        "held_live": fair["live"].held,
        "held_proposed": fair["proposed"].held,
        "target_live": fair["live"].target,
        "target_proposed": fair["proposed"].target,
    }
    differs = (
        (figures["gained"] > 0)
        | (figures["lost"] > 0)
        | (figures["repriced"] > 0)
        | (figures["preempted_live"] != figures["preempted_proposed"])
        | (figures["held_live"] != figures["held_proposed"])
        | (fair["live"].complied != fair["proposed"].complied)
    )
    tenants = {
        live_book.tenants.names[m]: {
            **{name: _plain(values[m]) for name, values in figures.items()},
            "complied_live": _complied(fair["live"].complied[m]),
            "complied_proposed": _complied(fair["proposed"].complied[m]),
        }
        for m in np.flatnonzero(differs).tolist()
    }
    prices = {
        name: {
            "posted_live": int(live.posted[k]),
            "posted_proposed": int(shadow.posted[k]),
            "spot_live": _spot(live.spot_price[k]),
            "spot_proposed": _spot(shadow.spot_price[k]),
        }
        for k, name in enumerate(live_book.types.names)
    }
    summary = {
        "bids": len(bids),
        "winners_live": int(won_l.sum()),
        "winners_proposed": int(won_p.sum()),
        "gained": int(gained.sum()),
        "lost": int(lost.sum()),
        "repriced": int(repriced.sum()),
        "gpus_live": int(bids.gpus[won_l].sum()),
        "gpus_proposed": int(bids.gpus[won_p].sum()),
        "gpu_hours_live": round(float(hours[won_l].sum())),
        "gpu_hours_proposed": round(float(hours[won_p].sum())),
        "preemptions_live": len(live.preemptions),
        "preemptions_proposed": len(shadow.preemptions),
        "fair_counted_live": fair["live"].counted,
        "fair_counted_proposed": fair["proposed"].counted,
        "fair_complied_live": fair["live"].complied_pairs,
        "fair_complied_proposed": fair["proposed"].complied_pairs,
        "prices_differ": sum(p["posted_live"] != p["posted_proposed"] for p in prices.values()),
    }
    return ShadowDiff(summary=summary, prices=prices, tenants=tenants, clear_ms=clear_ms)


def _won(n: int, result: Result) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """Per bid row: whether it won, and (price, tier, type) where it did (-1 elsewhere), as a [3, n] array."""
    w = result.winners
    won = np.zeros(n, dtype=np.bool_)
    won[w.bid] = True
    terms = np.full((3, n), -1, dtype=np.int64)
    terms[0, w.bid], terms[1, w.bid], terms[2, w.bid] = w.price, w.tier, w.gpu_type
    return won, terms


@dataclass(frozen=True)
class _Fair:
    """The fair-share figures of the state one side's round leaves (allocator/fairshare.py): per tenant the
    GPUs held and the target (summed over types) under that side's own weights and guarantees, and whether it
    complied in every type where it still waits (1), failed in one (0), or waits nowhere (-1); the (tenant,
    type) pairs counted and complied."""

    held: NDArray[np.float64]
    target: NDArray[np.float64]
    complied: NDArray[np.int8]
    counted: int
    complied_pairs: int


def _fair(book: Book, result: Result) -> _Fair:
    demand = fairshare.book_demand(book, result)
    capacity = np.bincount(book.nodes.gpu_type, weights=book.nodes.capacity, minlength=len(book.types))
    series = fairshare.Series.of(
        [book.now],
        demand.held[None],
        demand.waiting[None],
        demand.smallest[None],
        book.tenants.guarantee,
        book.tenants.weight,
        capacity,
    )
    counted, complied = (a[0] for a in fairshare.round_pairs(series))
    state = np.where(counted.any(axis=1), (complied == counted).all(axis=1), -1).astype(np.int8)
    return _Fair(
        held=demand.held.sum(axis=1),
        target=np.round(series.target[0].sum(axis=1), 2),
        complied=state,
        counted=int(counted.sum()),
        complied_pairs=int(complied.sum()),
    )


def _plain(value: Any) -> int | float:
    """A figure as JSON stores it: whole numbers as ints, others rounded to two decimals."""
    f = float(value)
    return int(f) if f.is_integer() else round(f, 2)


def _complied(state: Any) -> bool | None:
    return None if int(state) < 0 else bool(state)


def _spot(price: Any) -> int | None:
    return int(price) if price >= 0 else None
