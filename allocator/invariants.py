"""The invariants of ARCHITECTURE.md §Clearing, checked on a (book, result) pair; vectorised for 10^6 bids.

Used by ``python -m allocator check`` and by the property tests, so each rule is written once. Every check
returns a list of violation messages (empty when the rule holds), each naming the rule and a first example.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from allocator.book import TIER_B, TIER_G, TIER_S, Book, hold_of
from allocator.digest import compute_digest
from allocator.fairshare import credit
from allocator.reference.order import preferences
from allocator.result import (
    BELOW_RESERVE,
    BUSY,
    FAIR_SHARE,
    GUARANTEE_FULL,
    MOVED,
    NO_FIT,
    OUTBID,
    Preemptions,
    Result,
)

I64 = NDArray[np.int64]
BOOL = NDArray[np.bool_]
Check = Callable[[Book, Result], list[str]]


def _first(rule: str, bad: BOOL, what: NDArray[np.int64], detail: str = "") -> list[str]:
    if not bad.any():
        return []
    at = int(np.argmax(bad))
    return [f"{rule}: {int(bad.sum())} case(s), first {int(what[at])}{detail}"]


def _winner_of_slot(r: Result) -> I64:
    return np.repeat(np.arange(len(r.winners)), np.diff(r.winners.slot_ptr))


def every_bid_once(book: Book, r: Result) -> list[str]:
    """Every bid of the book is exactly one winner or one loser."""
    rows = np.concatenate([r.winners.bid, r.losers.bid])
    seen = (
        np.bincount(rows, minlength=len(book.bids)) if rows.size else np.zeros(len(book.bids), dtype=np.int64)
    )
    out = _first("every bid exactly once (bid row)", seen != 1, np.arange(len(book.bids)))
    if rows.size and (book.bids.job[rows] != np.concatenate([r.winners.job, r.losers.job])).any():
        out.append("every bid exactly once: job id does not match its bid row")
    return out


def no_gpu_twice(book: Book, r: Result) -> list[str]:
    """No GPU bound twice and no node over capacity: each winner GPU is a real slot of a node of the winner's
    type, free in the book or freed by a preemption in this result, and used once."""
    w, nodes, ls = r.winners, book.nodes, book.leases
    owner = _winner_of_slot(r)
    node, slot = w.slot_node.astype(np.int64), w.slot_idx.astype(np.int64)
    width = max(nodes.free.shape[1], int(nodes.capacity.max(initial=0))) + 1
    out = _first("node over capacity (job)", (slot < 0) | (slot >= nodes.capacity[node]), w.job[owner])
    if out:
        return out
    out += _first("GPU of the wrong type (job)", nodes.gpu_type[node] != w.gpu_type[owner], w.job[owner])
    key = node * width + slot
    moved_key = r.moves.slot_node.astype(np.int64) * width + r.moves.slot_idx
    uniq, counts = np.unique(np.concatenate([key, moved_key]), return_counts=True)
    out += _first("GPU bound twice (node*width+slot)", counts > 1, uniq)
    freed = np.zeros(len(ls), dtype=np.bool_)
    freed[r.preemptions.row] = True
    lease_key = ls.slot_node.astype(np.int64) * width + ls.slot_idx
    busy = np.sort(lease_key[~freed[ls.slot_owner]])
    hit = np.isin(key, busy, assume_unique=False) if busy.size else np.zeros(key.size, dtype=np.bool_)
    out += _first("GPU of a running lease bound again (job)", hit, w.job[owner])
    fresh = ~np.isin(key, lease_key) if lease_key.size else np.ones(key.size, dtype=np.bool_)
    out += _first(
        "GPU neither free nor freed by preemption (job)", fresh & ~nodes.free[node, slot], w.job[owner]
    )
    return out


def moves_placed_again(book: Book, r: Result) -> list[str]:
    """Consolidation (step 5): a lease preempted as moved is placed again in the same round (one entry in
    ``moves``) and only such leases; on a node of its type, on GPUs free in the book, its GPU count kept; at most
    ``max_moves`` per round; none younger than ``move_min_runtime_s``."""
    m, p, ls, nodes = r.moves, r.preemptions, book.leases, book.nodes
    moved = p.lease[p.reason == MOVED]
    out = _first("moved lease not placed again (lease)", ~np.isin(moved, m.lease), moved)
    out += _first("placed again without a move (lease)", ~np.isin(m.lease, moved), m.lease)
    if not len(m):
        return out
    owner = np.repeat(np.arange(len(m)), np.diff(m.slot_ptr))
    node, slot = m.slot_node.astype(np.int64), m.slot_idx.astype(np.int64)
    out += _first(
        "moved onto another type (lease)", nodes.gpu_type[node] != ls.gpu_type[m.row[owner]], m.lease[owner]
    )
    out += _first("moved onto a GPU not free (lease)", ~nodes.free[node, slot], m.lease[owner])
    out += _first("move changed the GPU count (lease)", np.diff(m.slot_ptr) != ls.gpus[m.row], m.lease)
    young = book.now - ls.start[m.row] < book.policy.move_min_runtime_s
    out += _first("moved a lease younger than the minimum runtime for moves (lease)", young, m.lease)
    if len(m) > book.policy.max_moves:
        out.append(f"more moves than max_moves: {len(m)} > {book.policy.max_moves}")
    return out


def gangs_whole(book: Book, r: Result) -> list[str]:
    """Gangs all-or-nothing: a winner holds exactly its gang size; a gang that fits a node is on one node, a larger
    one on nodes of one topology domain."""
    w = r.winners
    got = np.diff(w.slot_ptr)
    out = _first("gang split or short (job)", got != book.bids.gpus[w.bid], w.job)
    if out or not len(w):
        return out
    owner = _winner_of_slot(r)
    big = np.zeros(len(book.types), dtype=np.int64)
    np.maximum.at(big, book.nodes.gpu_type, book.nodes.capacity)
    first_node = w.slot_node[w.slot_ptr[:-1]]
    one_node = book.bids.gpus[w.bid] <= big[w.gpu_type]
    spread = w.slot_node != first_node[owner]
    out += _first("gang that fits a node spread over nodes (job)", spread & one_node[owner], w.job[owner])
    dom = book.nodes.domain
    cross = dom[w.slot_node] != dom[first_node[owner]]
    out += _first("multi-node gang across domains (job)", cross, w.job[owner])
    return out


def reserved_nodes_idle(book: Book, r: Result) -> list[str]:
    """Nodes reserved for a gang take no other new work but backfill (a job marked backfill, predicted to end,
    now + its ``expect_s``, no later than the gang's expected start on that node) and tier-G gangs (a guarantee
    comes first); neither on several nodes."""
    if not r.reserved_node.size:
        return []
    owner = _winner_of_slot(r)
    w = r.winners
    reserved_for = np.full(len(book.nodes), -1, dtype=np.int64)
    reserved_for[r.reserved_node] = r.reserved_job
    start = np.full(len(book.nodes), -1, dtype=np.int64)
    start[r.reserved_node] = r.reserved_start
    target = reserved_for[w.slot_node]
    other = (target >= 0) & (target != w.job[owner])
    ends = book.now + book.bids.expect_s[w.bid[owner]]
    single = np.diff(w.slot_ptr)[owner] <= book.nodes.capacity[w.slot_node]
    backfill = np.isin(w.job[owner], r.backfill_job) & (ends <= start[w.slot_node]) & single
    allowed = backfill | ((w.tier[owner] == TIER_G) & single)  # a guarantee comes first
    return _first("work placed on a node reserved for another gang (job)", other & ~allowed, w.job[owner])


def prices_and_holds(book: Book, r: Result) -> list[str]:
    """Each winner pays at most its bid and at least r; G pays r, B pays p, S the type's uniform spot price;
    the hold is ceil(gpus * price * max_s / 3600); a tenant's holds never exceed its balance (or guardrail)."""
    w, types, bids = r.winners, book.types, book.bids
    limit = bids.limit[w.bid, w.gpu_type]
    out = _first("winner pays more than its bid (job)", w.price > limit, w.job)
    out += _first("winner pays less than the reserve (job)", w.price < types.reserve[w.gpu_type], w.job)
    out += _first(
        "tier G price is not r (job)", (w.tier == TIER_G) & (w.price != types.reserve[w.gpu_type]), w.job
    )
    out += _first(
        "tier B price is not p (job)", (w.tier == TIER_B) & (w.price != types.posted[w.gpu_type]), w.job
    )
    out += _first(
        "tier S price not uniform (job)", (w.tier == TIER_S) & (w.price != r.spot_price[w.gpu_type]), w.job
    )
    want = np.asarray(hold_of(bids.gpus[w.bid], w.price, bids.max_s[w.bid]), dtype=np.int64)
    out += _first("hold is not gpus*price*max_s/3600 (job)", w.hold != want, w.job)
    spent = np.zeros(len(book.tenants), dtype=np.int64)
    np.add.at(spent, w.tenant, w.hold)
    tenants = np.arange(len(book.tenants))
    out += _first("holds exceed balance or guardrail (tenant)", spent > book.tenants.budget, tenants)
    out += _first("winner tenant is not the bid's tenant (job)", w.tenant != bids.tenant[w.bid], w.job)
    bad_p = (r.posted < types.reserve) | (r.posted > types.max_price)
    out += _first("posted price outside [r, max] (type)", bad_p, np.arange(len(types)))
    return out


def _held_after(book: Book, r: Result) -> I64:
    """GPUs per tenant and type after the round: held - preempted + won, all tiers."""
    ls = book.leases
    out = book.tenants.held.sum(axis=1).astype(np.int64)
    gone = r.preemptions.row[r.preemptions.reason != MOVED]  # a moved lease is still held, elsewhere
    np.subtract.at(out, (ls.tenant[gone], ls.gpu_type[gone]), ls.gpus[gone])
    np.add.at(out, (r.winners.tenant, r.winners.gpu_type), book.bids.gpus[r.winners.bid])
    return np.asarray(out, dtype=np.int64)


def tier_g_within_guarantee(book: Book, r: Result) -> list[str]:
    """Tier G only fills unused guarantee: G winners per tenant and type <= q minus GPUs held before."""
    w = r.winners
    g = np.zeros_like(book.tenants.guarantee, dtype=np.int64)
    g_rows = w.tier == TIER_G
    np.add.at(g, (w.tenant[g_rows], w.gpu_type[g_rows]), book.bids.gpus[w.bid[g_rows]])
    unused = np.maximum(book.tenants.guarantee - book.tenants.held.sum(axis=1), 0)
    return _first(
        "tier G beyond the unused guarantee (tenant)", (g > unused).any(axis=1), np.arange(g.shape[0])
    )


def preemption_rules(book: Book, r: Result) -> list[str]:
    """Reclaim, step 6: never a tier G lease (nor one re-tiered to G), never a non-preemptible lease, never one
    younger than the minimum runtime, never below the victim's own guarantee at the round's end (what it held,
    less what was preempted, plus what it won)."""
    ls, p = book.leases, r.preemptions
    keep = p.reason != MOVED  # a move is not a loss: moves_placed_again checks it
    p = Preemptions(p.lease[keep], p.row[keep], p.reason[keep], p.for_job[keep])
    rows = p.row
    out = _first(
        "preempted a tier G lease (lease)", (ls.tier[rows] == TIER_G) | np.isin(p.lease, r.retiered), p.lease
    )
    out += _first("preempted a non-preemptible lease (lease)", ~ls.preemptible[rows], p.lease)
    young = book.now - ls.start[rows] < book.policy.min_runtime_s
    out += _first("preempted a lease younger than the minimum runtime (lease)", young, p.lease)
    taken = np.zeros_like(book.tenants.guarantee, dtype=np.int64)
    np.add.at(taken, (ls.tenant[rows], ls.gpu_type[rows]), ls.gpus[rows])
    # What the tenant holds when the round ends: a tenant that won GPUs of the type in this round may lose a
    # running lease to fair reclaim while staying above its guarantee (and its entitlement) with what it won.
    won = np.zeros_like(taken)
    np.add.at(won, (r.winners.tenant, r.winners.gpu_type), book.bids.gpus[r.winners.bid])
    after = book.tenants.held.sum(axis=1).astype(np.int64) + won - taken
    below = (taken > 0) & (after < book.tenants.guarantee)
    return out + _first(
        "preemption took a tenant below its guarantee (tenant)", below.any(axis=1), np.arange(below.shape[0])
    )


def fair_reclaim_keeps_shares(book: Book, r: Result) -> list[str]:
    """Fair reclaim (step 6) places its gang in tier B, never takes from the claimant itself, and leaves each
    victim tenant at or above the share (excess / weight, in the gang's type) the claimant reaches, counting
    everything the gang took from that tenant on every node. The checker sees the round's end, not the moment
    of each gang, so it tests what must hold then: the victim at its most (its holdings before the round plus
    all it won, less what this gang took) against the claimant at its least (its holdings before less all
    preempted from it, plus the gang)."""
    p, ls, w = r.preemptions, book.leases, r.winners
    fair = p.reason == FAIR_SHARE
    if not fair.any():
        return []
    rows, jobs = p.row[fair], p.for_job[fair]
    hit = np.flatnonzero(np.isin(w.job, jobs))
    at = dict(zip(w.job[hit].tolist(), hit.tolist(), strict=True))
    q, weight = book.tenants.guarantee.astype(np.int64), book.tenants.weight
    before = book.tenants.held.sum(axis=1).astype(np.int64)
    won = np.zeros_like(before)
    np.add.at(won, (w.tenant, w.gpu_type), book.bids.gpus[w.bid])
    lost = np.zeros_like(before)
    np.add.at(lost, (ls.tenant[p.row], ls.gpu_type[p.row]), ls.gpus[p.row])
    taken: dict[tuple[int, int], int] = {}  # (job, victim tenant) -> GPUs that gang took from it
    for v, j in zip(rows.tolist(), jobs.tolist(), strict=True):
        key = (j, int(ls.tenant[v]))
        taken[key] = taken.get(key, 0) + int(ls.gpus[v])
    bad: dict[str, list[int]] = {}
    for (j, m), gone in sorted(taken.items()):
        i = at.get(j)
        if i is None:
            bad.setdefault("fair reclaim preempted for a job that did not win (job)", []).append(j)
            continue
        c, t, k = int(w.tenant[i]), int(w.gpu_type[i]), int(book.bids.gpus[w.bid[i]])
        if w.tier[i] != TIER_B:
            bad.setdefault("fair reclaim placed a gang outside tier B (job)", []).append(j)
        owed = credit(book, t)  # the fair-share history moves where each tenant stands (tiers.share)
        victim = (max(before[m, t] + won[m, t] - gone - q[m, t], 0) - owed[m]) / weight[m]
        claimant = (max(before[c, t] - lost[c, t] - q[c, t], 0) + k - owed[c]) / weight[c]
        if m == c or victim < claimant - 1e-9:
            bad.setdefault(
                "fair reclaim took from the claimant, or a victim below its share (job)", []
            ).append(j)
    return [f"{rule}: {len(set(js))} case(s), first {js[0]}" for rule, js in bad.items()]


def _leftover(book: Book, r: Result) -> tuple[I64, I64, I64]:
    """Per type: largest free block on one open node, largest whole-free capacity in one domain, node size."""
    nodes = book.nodes
    free = nodes.free_count.astype(np.int64)
    np.subtract.at(free, r.winners.slot_node, 1)
    np.add.at(free, r.winners.slot_node, ~nodes.free[r.winners.slot_node, r.winners.slot_idx])
    np.subtract.at(free, r.moves.slot_node, 1)
    open_ = np.ones(len(nodes), dtype=np.bool_)
    open_[r.reserved_node] = False
    n_types = len(book.types)
    single, multi, big = (np.zeros(n_types, dtype=np.int64) for _ in range(3))
    np.maximum.at(single, nodes.gpu_type[open_], free[open_])
    np.maximum.at(big, nodes.gpu_type, nodes.capacity)
    whole = open_ & (free == nodes.capacity)
    key = (
        nodes.gpu_type[whole].astype(np.int64) * (int(nodes.domain.max(initial=0)) + 1) + nodes.domain[whole]
    )
    per = (
        np.bincount(key, weights=nodes.capacity[whole]).astype(np.int64)
        if whole.any()
        else np.zeros(0, np.int64)
    )
    tix = np.arange(per.size) // (int(nodes.domain.max(initial=0)) + 1)
    np.maximum.at(multi, tix, per)
    return single, np.maximum(single, multi), big


def work_conserving(book: Book, r: Result) -> list[str]:
    """Work conserving: no eligible, budget-admitted losing bid fits the GPUs left free in any type it accepts
    (outside reserved nodes): on one node when it fits a node, else on whole nodes of one domain."""
    single, multi, big = _leftover(book, r)
    lo = r.losers
    active = np.isin(lo.reason, [OUTBID, BUSY, NO_FIT, GUARANTEE_FULL])
    k = book.bids.gpus[lo.bid].astype(np.int64)[:, None]
    eligible = book.bids.limit[lo.bid] >= book.types.reserve[None, :]
    fit = np.where(k <= big[None, :], k <= single[None, :], k <= multi[None, :]) & eligible
    return _first("eligible bid left out although it fits free GPUs (job)", active & fit.any(axis=1), lo.job)


def guarantee_honoured(book: Book, r: Result) -> list[str]:
    """A tenant below its guarantee is never left with a losing eligible bid inside its guarantee gap that fits
    the free GPUs; rounds where preemption could not restore it are counted in ``guarantee_unrestored``."""
    single, multi, big = _leftover(book, r)
    gap = np.maximum(book.tenants.guarantee - _held_after(book, r), 0)
    lo = r.losers
    active = np.isin(lo.reason, [OUTBID, BUSY, NO_FIT, GUARANTEE_FULL])
    k = book.bids.gpus[lo.bid].astype(np.int64)[:, None]
    eligible = book.bids.limit[lo.bid] >= book.types.reserve[None, :]
    inside = k <= gap[book.bids.tenant[lo.bid]]
    fit = np.where(k <= big[None, :], k <= single[None, :], k <= multi[None, :])
    return _first(
        "tenant left below its guarantee while its bid fits (job)",
        active & (eligible & inside & fit).any(axis=1),
        lo.job,
    )


def _outcome(book: Book, r: Result) -> tuple[I64, I64, I64]:
    """Per bid row: GPU type it won in (-1: lost), type and reason of its loss (-1: won)."""
    n = len(book.bids)
    won_type, lost_type, reason = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    won_type[r.winners.bid] = r.winners.gpu_type
    lost_type[r.losers.bid] = r.losers.gpu_type
    reason[r.losers.bid] = r.losers.reason
    return won_type, lost_type, reason


def tier_b_follows_entitlement(book: Book, r: Result) -> list[str]:
    """Tier B within one gang of the weighted entitlement over holdings: for every tenant i still outbid in its
    first-choice type t at or above p, no tenant j that won tier-B GPUs there ends, counting the excess it held
    before and its tier-B winners less the one GPU that counting entitlements in whole GPUs may add, above (x_i + largest unmet gang of i + 1) / w_i per weight, where x_i is the
    excess i holds after the round. Tenants whose bids at or above p in t may have been selected but not placed
    there (lost as no_node_fits, or ended in another type) are left out: placement, not the shares, decided;
    so are gangs placed by fair reclaim (step 6 has its own rules: they bring a tenant up to its entitlement
    over holdings, which a tenant whose gangs fit no node's freed GPUs may not reach)."""
    w, bids, weight = r.winners, book.bids, book.tenants.weight
    first = preferences(bids, book.types)[:, 0]
    won_type, lost_type, reason = _outcome(book, r)
    n_tenants = len(book.tenants)
    before, after = book.tenants.held.sum(axis=1).astype(np.int64), _held_after(book, r)
    q = book.tenants.guarantee.astype(np.int64)
    fair_jobs = r.preemptions.for_job[
        r.preemptions.reason == FAIR_SHARE
    ]  # placed by fair reclaim: its own rule
    out: list[str] = []
    for t in range(len(book.types)):
        b = np.zeros(n_tenants, dtype=np.int64)
        rows = (w.tier == TIER_B) & (w.gpu_type == t) & ~np.isin(w.job, fair_jobs)
        np.add.at(b, w.tenant[rows], bids.gpus[w.bid[rows]])
        pool = (first == t) & (bids.limit[:, t] >= book.types.posted[t])
        elsewhere = pool & (won_type != t) & ((lost_type != t) | (reason == NO_FIT))
        unclear = np.bincount(bids.tenant[elsewhere], minlength=n_tenants) > 0
        unmet_rows = pool & (lost_type == t) & np.isin(reason, [OUTBID, BUSY])
        gang = np.zeros(n_tenants, dtype=np.int64)
        np.maximum.at(gang, bids.tenant[unmet_rows], bids.gpus[unmet_rows])
        unmet = (gang > 0) & ~unclear
        if not unmet.any() or not b.any():
            continue
        owed = credit(book, t)  # standing counts the fair-share history (tiers.share)
        x_after = np.maximum(after[:, t] - q[:, t], 0)
        floor_i = ((x_after + gang + 1 - owed) / weight)[unmet].min()
        x_b = np.maximum(before[:, t] - q[:, t], 0) + b
        out += _first(
            f"tier B beyond the weighted entitlement in type {t} (tenant)",
            # less one GPU: entitlements are counted in whole GPUs by largest remainder (tiers.whole_gpus)
            (b > 0) & ((x_b - 1 - owed) / weight > floor_i + 1e-9),
            np.arange(n_tenants),
        )
    return out


def below_reserve_never_wins(book: Book, r: Result) -> list[str]:
    """A bid below the reserve of every type it accepts never wins (and is reported as below reserve)."""
    eligible = np.asarray((book.bids.limit >= book.types.reserve[None, :]).any(axis=1), dtype=np.bool_)
    out = _first("winner below reserve (job)", ~eligible[r.winners.bid], r.winners.job)
    lo = r.losers
    return out + _first(
        "loser mislabelled below reserve (job)", (lo.reason == BELOW_RESERVE) == eligible[lo.bid], lo.job
    )


def digest_matches(book: Book, r: Result) -> list[str]:
    """The result carries the sha256 of its canonical serialisation."""
    want = compute_digest(r)
    return [] if want == r.digest else [f"digest mismatch: stored {r.digest}, computed {want}"]


CHECKS: tuple[Check, ...] = (
    every_bid_once,
    no_gpu_twice,
    gangs_whole,
    reserved_nodes_idle,
    moves_placed_again,
    prices_and_holds,
    tier_g_within_guarantee,
    preemption_rules,
    fair_reclaim_keeps_shares,
    work_conserving,
    guarantee_honoured,
    tier_b_follows_entitlement,
    below_reserve_never_wins,
    digest_matches,
)


def check(book: Book, r: Result) -> list[str]:
    """Run every invariant; the list of violations (empty when the result is valid for the book)."""
    out: list[str] = []
    for rule in CHECKS:
        out += rule(book, r)
    return out


__all__ = ["CHECKS", "check"]
