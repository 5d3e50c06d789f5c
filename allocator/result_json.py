"""The result's JSON form (docs/allocator.md): writing, and reading back for ``python -m allocator check``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from allocator.book import TIER_NAMES, Book
from allocator.errors import BookError
from allocator.result import PREEMPT_NAMES, REASON_NAMES, Losers, Moves, Preemptions, Result, Winners


def result_to_json(r: Result) -> dict[str, Any]:
    """Winners, losers and preemptions as rows; names instead of indices."""
    w, lo, p = r.winners, r.losers, r.preemptions
    ptr = w.slot_ptr.tolist()
    nodes = [r.node_names[i] for i in w.slot_node.tolist()]
    slots = w.slot_idx.tolist()
    tiers, types, tenants = w.tier.tolist(), w.gpu_type.tolist(), w.tenant.tolist()
    price, hold, job = w.price.tolist(), w.hold.tolist(), w.job.tolist()
    winners = [
        {
            "job": job[i],
            "tenant": r.tenant_names[tenants[i]],
            "tier": TIER_NAMES[tiers[i]],
            "gpu_type": r.type_names[types[i]],
            "price": price[i],
            "hold": hold[i],
            "gpus": [[nodes[j], slots[j]] for j in range(ptr[i], ptr[i + 1])],
        }
        for i in range(len(job))
    ]
    ltypes, reasons, figs = lo.gpu_type.tolist(), lo.reason.tolist(), lo.figure.tolist()
    losers = [
        {"job": j, "reason": REASON_NAMES[reasons[i]], "gpu_type": r.type_names[ltypes[i]], "figure": figs[i]}
        for i, j in enumerate(lo.job.tolist())
    ]
    preemptions = [
        {"lease": int(p.lease[i]), "reason": PREEMPT_NAMES[int(p.reason[i])], "for_job": int(p.for_job[i])}
        for i in range(len(p))
    ]
    return {
        "round": r.round,
        "posted": dict(zip(r.type_names, r.posted.tolist(), strict=True)),
        "spot_price": dict(zip(r.type_names, r.spot_price.tolist(), strict=True)),
        "winners": winners,
        "losers": losers,
        "preemptions": preemptions,
        "retiered": r.retiered.tolist(),
        "reserved": [
            {"node": r.node_names[n], "job": j, "start": s}
            for n, j, s in zip(
                r.reserved_node.tolist(), r.reserved_job.tolist(), r.reserved_start.tolist(), strict=True
            )
        ],
        "backfill": r.backfill_job.tolist(),
        "moves": [
            {
                "lease": int(r.moves.lease[i]),
                "gpus": [
                    [r.node_names[r.moves.slot_node[j]], int(r.moves.slot_idx[j])]
                    for j in range(int(r.moves.slot_ptr[i]), int(r.moves.slot_ptr[i + 1]))
                ],
            }
            for i in range(len(r.moves))
        ],
        "counters": dict(r.counters),
        "digest": r.digest,
    }


def _ix(names: tuple[str, ...]) -> dict[str, int]:
    return {n: i for i, n in enumerate(names)}


def result_from_json(data: Any, book: Book) -> Result:
    """Read a result document against its book (names become indices); the stored digest is kept as is."""
    try:
        return _parse(data, book)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, BookError):
            raise
        raise BookError("result", f"malformed result document ({type(exc).__name__}: {exc})") from None


def _parse(d: Mapping[str, Any], book: Book) -> Result:
    types, nodes, tenants = _ix(book.types.names), _ix(book.nodes.names), _ix(book.tenants.names)
    tiers = {n: k for k, n in enumerate(TIER_NAMES)}
    row_of = {int(j): i for i, j in enumerate(book.bids.job.tolist())}
    ws = d["winners"]
    gp = [g for w in ws for g in w["gpus"]]
    job = np.array([w["job"] for w in ws], dtype=np.int64)
    winners = Winners(
        job,
        np.array([row_of[j] for j in job.tolist()], dtype=np.int64),
        np.array([tenants[w["tenant"]] for w in ws], dtype=np.int32),
        np.array([tiers[w["tier"]] for w in ws], dtype=np.int8),
        np.array([types[w["gpu_type"]] for w in ws], dtype=np.int32),
        np.array([w["price"] for w in ws], dtype=np.int64),
        np.array([w["hold"] for w in ws], dtype=np.int64),
        np.concatenate([[0], np.cumsum([len(w["gpus"]) for w in ws], dtype=np.int64)]).astype(np.int64),
        np.array([nodes[g[0]] for g in gp], dtype=np.int32),
        np.array([g[1] for g in gp], dtype=np.int32),
    )
    reason_of = {n: k for k, n in REASON_NAMES.items()}
    ls = d["losers"]
    ljob = np.array([x["job"] for x in ls], dtype=np.int64)
    losers = Losers(
        ljob,
        np.array([row_of[j] for j in ljob.tolist()], dtype=np.int64),
        np.array([reason_of[x["reason"]] for x in ls], dtype=np.int8),
        np.array([types[x["gpu_type"]] for x in ls], dtype=np.int32),
        np.array([x["figure"] for x in ls], dtype=np.int64),
    )
    lease_row = {int(v): i for i, v in enumerate(book.leases.lease.tolist())}
    pre_of = {n: k for k, n in PREEMPT_NAMES.items()}
    ps = d["preemptions"]
    preemptions = Preemptions(
        np.array([p["lease"] for p in ps], dtype=np.int64),
        np.array([lease_row[p["lease"]] for p in ps], dtype=np.int64),
        np.array([pre_of[p["reason"]] for p in ps], dtype=np.int8),
        np.array([p["for_job"] for p in ps], dtype=np.int64),
    )
    reserved = d["reserved"]
    return Result(
        round=int(d["round"]),
        winners=winners,
        losers=losers,
        preemptions=preemptions,
        retiered=np.array(d["retiered"], dtype=np.int64),
        posted=np.array([d["posted"][n] for n in book.types.names], dtype=np.int64),
        spot_price=np.array([d["spot_price"][n] for n in book.types.names], dtype=np.int64),
        reserved_node=np.array([nodes[x["node"]] for x in reserved], dtype=np.int32),
        reserved_job=np.array([x["job"] for x in reserved], dtype=np.int64),
        reserved_start=np.array([x.get("start", -1) for x in reserved], dtype=np.int64),
        backfill_job=np.array(d.get("backfill", []), dtype=np.int64),
        moves=_moves(d.get("moves", []), lease_row, nodes),
        counters={str(k): int(v) for k, v in d["counters"].items()},
        type_names=book.types.names,
        node_names=book.nodes.names,
        tenant_names=book.tenants.names,
        digest=str(d["digest"]),
    )


def _moves(rows: list[Any], lease_row: Mapping[int, int], nodes: Mapping[str, int]) -> Moves:
    if not rows:
        return Moves.empty()
    gp = [g for m in rows for g in m["gpus"]]
    return Moves(
        np.array([m["lease"] for m in rows], dtype=np.int64),
        np.array([lease_row[m["lease"]] for m in rows], dtype=np.int64),
        np.concatenate([[0], np.cumsum([len(m["gpus"]) for m in rows], dtype=np.int64)]).astype(np.int64),
        np.array([nodes[g[0]] for g in gp], dtype=np.int32),
        np.array([g[1] for g in gp], dtype=np.int32),
    )
