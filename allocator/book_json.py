"""The book's JSON form (docs/allocator.md): parsing with field-named errors, and writing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from allocator.book import NO_PRICE, TIER_NAMES, Bids, Book, GpuTypes, Leases, Nodes, Policy, Tenants
from allocator.errors import BookError


def _get(row: Any, key: str, where: str, default: Any = ...) -> Any:
    if not isinstance(row, Mapping):
        raise BookError(where, "must be an object")
    if key in row:
        return row[key]
    if default is ...:
        raise BookError(f"{where}.{key}", "is required")
    return default


def _int(value: Any, where: str, *, minimum: int | None = None, what: str = "an integer") -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or (minimum is not None and value < minimum):
        raise BookError(where, f"must be {what}")
    return int(value)


def _name(value: Any, names: Mapping[str, int], where: str, what: str) -> int:
    if not isinstance(value, str) or value not in names:
        raise BookError(where, f"must name a known {what}")
    return names[value]


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise BookError(where, "must be a list")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise BookError(where, "must be an object mapping GPU type names to counts")
    return value


def _index(names: Sequence[str], where: str) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise BookError(f"{where}[{i}].name", "must be a non-empty string")
        if name in index:
            raise BookError(f"{where}[{i}].name", "duplicate name")
        index[name] = i
    return index


def types_from_json(rows: Any) -> GpuTypes:
    rows = _list(rows, "gpu_types")
    names = [_get(r, "name", f"gpu_types[{i}]") for i, r in enumerate(rows)]
    _index(names, "gpu_types")
    reserve, posted, cap = [], [], []
    for i, r in enumerate(rows):
        at = f"gpu_types[{i}]"
        reserve.append(
            _int(_get(r, "reserve", at), f"{at}.reserve", minimum=0, what="a non-negative integer")
        )
        posted.append(
            _int(
                _get(r, "posted", at, reserve[-1]),
                f"{at}.posted",
                minimum=reserve[-1],
                what="an integer >= reserve",
            )
        )
        default_cap = max(posted[-1], 100 * reserve[-1])
        cap.append(
            _int(
                _get(r, "max_price", at, default_cap),
                f"{at}.max_price",
                minimum=posted[-1],
                what="an integer >= posted",
            )
        )
    return GpuTypes(tuple(names), np.array(reserve), np.array(posted), np.array(cap))


def _lease_slots(rows: list[Any], node_ix: Mapping[str, int]) -> list[list[tuple[int, int]]]:
    out = []
    for i, r in enumerate(rows):
        gpus = _list(_get(r, "gpus", f"leases[{i}]"), f"leases[{i}].gpus")
        pairs = []
        for g in gpus:
            if not isinstance(g, list) or len(g) != 2:
                raise BookError(f"leases[{i}].gpus", "must be a list of [node name, slot] pairs")
            node = _name(g[0], node_ix, f"leases[{i}].gpus", "node")
            pairs.append((node, _int(g[1], f"leases[{i}].gpus", minimum=0, what="[node name, slot] pairs")))
        if not pairs:
            raise BookError(f"leases[{i}].gpus", "must hold at least one GPU")
        out.append(pairs)
    return out


def nodes_from_json(rows: Any, type_ix: Mapping[str, int], busy: set[tuple[int, int]]) -> Nodes:
    rows = _list(rows, "nodes")
    names = [_get(r, "name", f"nodes[{i}]") for i, r in enumerate(rows)]
    _index(names, "nodes")
    caps = [
        _int(_get(r, "capacity", f"nodes[{i}]"), f"nodes[{i}].capacity", minimum=1, what="a positive integer")
        for i, r in enumerate(rows)
    ]
    free = np.zeros((len(rows), max(caps, default=0)), dtype=bool)
    gtype, domain, moved_at = [], [], []
    for i, r in enumerate(rows):
        at = f"nodes[{i}]"
        gtype.append(_name(_get(r, "gpu_type", at), type_ix, f"{at}.gpu_type", "GPU type"))
        moved_at.append(
            _int(
                _get(r, "moved_at", at, -1), f"{at}.moved_at", minimum=-1, what="a time (epoch seconds) or -1"
            )
        )
        domain.append(
            _int(_get(r, "domain", at, 0), f"{at}.domain", minimum=0, what="a non-negative integer")
        )
        slots = _get(r, "free", at, None)
        if slots is None:
            free[i, : caps[i]] = [(i, s) not in busy for s in range(caps[i])]
            continue
        for s in _list(slots, f"{at}.free"):
            slot = _int(s, f"{at}.free", minimum=0, what="a list of slot indices below capacity")
            if slot >= caps[i]:
                raise BookError(f"{at}.free", "slot index beyond capacity")
            free[i, slot] = True
    return Nodes(
        tuple(names),
        np.array(gtype),
        np.array(domain),
        np.array(caps),
        free,
        np.array(moved_at, dtype=np.int64),
    )


def tenants_from_json(rows: Any, type_ix: Mapping[str, int], held_by_leases: np.ndarray) -> Tenants:
    rows = _list(rows, "tenants")
    names = [_get(r, "name", f"tenants[{i}]") for i, r in enumerate(rows)]
    _index(names, "tenants")
    n_types = len(type_ix)
    guarantee = np.zeros((len(rows), n_types), dtype=np.int32)
    held = held_by_leases.copy()
    owed = np.zeros((len(rows), n_types), dtype=np.float64)
    weight, balance, guardrail = [], [], []
    for i, r in enumerate(rows):
        at = f"tenants[{i}]"
        w = _get(r, "weight", at, 1.0)
        if isinstance(w, bool) or not isinstance(w, int | float) or not w > 0:
            raise BookError(f"{at}.weight", "must be a positive number")
        weight.append(float(w))
        balance.append(
            _int(_get(r, "balance", at), f"{at}.balance", minimum=0, what="a non-negative integer")
        )
        g = _get(r, "guardrail", at, None)
        guardrail.append(
            NO_PRICE
            if g is None
            else _int(g, f"{at}.guardrail", minimum=0, what="a non-negative integer or null")
        )
        for tname, q in _mapping(_get(r, "guarantee", at, {}), f"{at}.guarantee").items():
            t = _name(tname, type_ix, f"{at}.guarantee", "GPU type")
            guarantee[i, t] = _int(q, f"{at}.guarantee.{tname}", minimum=0, what="a non-negative integer")
        for tname, tiers in _mapping(_get(r, "held", at, {}), f"{at}.held").items():
            t = _name(tname, type_ix, f"{at}.held", "GPU type")
            for k, tier in enumerate(TIER_NAMES):
                held[i, k, t] = _int(
                    _get(tiers, tier, f"{at}.held.{tname}", 0),
                    f"{at}.held.{tname}.{tier}",
                    minimum=0,
                    what="a non-negative integer",
                )
        for tname, value in _mapping(_get(r, "owed", at, {}), f"{at}.owed").items():
            t = _name(tname, type_ix, f"{at}.owed", "GPU type")
            ok = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
            if not ok:
                raise BookError(f"{at}.owed.{tname}", "must be a number of GPU-hours")
            owed[i, t] = float(value)
    return Tenants(
        tuple(names), np.array(weight), guarantee, held, np.array(balance), np.array(guardrail), owed
    )


def leases_from_json(
    rows: list[Any],
    slots: list[list[tuple[int, int]]],
    type_ix: Mapping[str, int],
    tenant_ix: Mapping[str, int],
) -> Leases:
    if not rows:
        return Leases.empty()
    tiers = {name: k for k, name in enumerate(TIER_NAMES)}
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "lease",
            "tenant",
            "gpu_type",
            "tier",
            "start",
            "preemptible",
            "checkpoint",
            "expect_end",
            "backfill",
        )
    }
    for i, r in enumerate(rows):
        at = f"leases[{i}]"
        cols["lease"].append(_int(_get(r, "lease", at), f"{at}.lease"))
        cols["tenant"].append(_name(_get(r, "tenant", at), tenant_ix, f"{at}.tenant", "tenant"))
        cols["gpu_type"].append(_name(_get(r, "gpu_type", at), type_ix, f"{at}.gpu_type", "GPU type"))
        cols["tier"].append(_name(_get(r, "tier", at), tiers, f"{at}.tier", "tier (G, B or S)"))
        cols["start"].append(_int(_get(r, "start", at), f"{at}.start"))
        cols["checkpoint"].append(_int(_get(r, "checkpoint", at, cols["start"][-1]), f"{at}.checkpoint"))
        cols["expect_end"].append(
            _int(
                _get(r, "expect_end", at, -1),
                f"{at}.expect_end",
                minimum=-1,
                what="a time (epoch seconds) or -1",
            )
        )
        for flag, default in (("preemptible", cols["tier"][-1] != 0), ("backfill", False)):
            value = _get(r, flag, at, default)
            if not isinstance(value, bool):
                raise BookError(f"{at}.{flag}", "must be true or false")
            cols[flag].append(value)
    ptr = np.concatenate([[0], np.cumsum([len(s) for s in slots])])
    flat = [p for s in slots for p in s]
    return Leases(
        np.array(cols["lease"]),
        np.array(cols["tenant"]),
        np.array(cols["gpu_type"]),
        np.array(cols["tier"]),
        np.array(cols["start"]),
        np.array(cols["preemptible"], dtype=bool),
        ptr,
        np.array([p[0] for p in flat]),
        np.array([p[1] for p in flat]),
        np.array(cols["checkpoint"]),
        np.array(cols["expect_end"], dtype=np.int64),
        np.array(cols["backfill"], dtype=bool),
    )


def bids_from_rows(
    rows: Sequence[Mapping[str, Any]], type_names: Sequence[str], tenant_names: Sequence[str]
) -> Bids:
    """Bids from row objects (see ``Bids.from_rows``)."""
    type_ix = {n: i for i, n in enumerate(type_names)}
    tenant_ix = {n: i for i, n in enumerate(tenant_names)}
    n = len(rows)
    limit = np.full((n, len(type_names)), NO_PRICE, dtype=np.int64)
    cols: dict[str, list[int]] = {
        k: [] for k in ("job", "tenant", "gpus", "max_s", "submit", "waited", "expect_s")
    }
    for i, r in enumerate(rows):
        at = f"bids[{i}]"
        cols["job"].append(_int(_get(r, "job", at), f"{at}.job"))
        cols["tenant"].append(_name(_get(r, "tenant", at), tenant_ix, f"{at}.tenant", "tenant"))
        cols["gpus"].append(_int(_get(r, "gpus", at), f"{at}.gpus", minimum=1, what="a positive integer"))
        cols["max_s"].append(_max_s(r, at))
        cols["expect_s"].append(
            _int(
                _get(r, "expect_s", at, cols["max_s"][-1]),
                f"{at}.expect_s",
                minimum=1,
                what="a positive integer",
            )
        )
        cols["submit"].append(_int(_get(r, "submit", at, 0), f"{at}.submit"))
        cols["waited"].append(
            _int(_get(r, "waited", at, 0), f"{at}.waited", minimum=0, what="a non-negative integer")
        )
        limits = _get(r, "limits", at)
        if not isinstance(limits, Mapping) or not limits:
            raise BookError(f"{at}.limits", "must map at least one GPU type to a limit price")
        for tname, price in limits.items():
            t = _name(tname, type_ix, f"{at}.limits", "GPU type")
            limit[i, t] = _int(price, f"{at}.limits.{tname}", minimum=0, what="a non-negative integer")
    return Bids(
        np.array(cols["job"], dtype=np.int64),
        np.array(cols["tenant"], dtype=np.int32),
        np.array(cols["gpus"], dtype=np.int32),
        limit,
        np.array(cols["max_s"], dtype=np.int64),
        np.array(cols["submit"], dtype=np.int64),
        np.array(cols["waited"], dtype=np.int32),
        np.array(cols["expect_s"], dtype=np.int64),
    )


def _max_s(row: Mapping[str, Any], at: str) -> int:
    if "max_s" in row:
        return _int(row["max_s"], f"{at}.max_s", minimum=1, what="a positive integer")
    return 3600 * _int(_get(row, "max_hours", at), f"{at}.max_hours", minimum=1, what="a positive integer")


def _column(cols: Mapping[str, Any], key: str, n: int, dtype: Any, default: Any = ...) -> np.ndarray:
    if key not in cols:
        if default is ...:
            raise BookError(f"bids.{key}", "is required")
        return np.full(n, default, dtype=dtype)
    values = _list(cols[key], f"bids.{key}")
    if len(values) != n:
        raise BookError(f"bids.{key}", f"has {len(values)} entries, expected {n}")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise BookError(f"bids[{i}].{key}", "must be an integer")
    return np.array(values, dtype=dtype)


def bids_from_columns(cols: Any, type_ix: Mapping[str, int], tenant_ix: Mapping[str, int]) -> Bids:
    """Bids from the columnar object ``{"job": [...], "tenant": [names], "limits": {type: [...]}, ...}``."""
    job = _list(_get(cols, "job", "bids"), "bids.job")
    n = len(job)
    tenants = _list(_get(cols, "tenant", "bids"), "bids.tenant")
    if len(tenants) != n:
        raise BookError("bids.tenant", f"has {len(tenants)} entries, expected {n}")
    try:
        tenant = np.fromiter((tenant_ix[t] for t in tenants), dtype=np.int32, count=n)
    except (KeyError, TypeError):
        bad = next(i for i, t in enumerate(tenants) if not isinstance(t, str) or t not in tenant_ix)
        raise BookError(f"bids[{bad}].tenant", "must name a known tenant") from None
    limit = np.full((n, len(type_ix)), NO_PRICE, dtype=np.int64)
    limits = _get(cols, "limits", "bids")
    if not isinstance(limits, Mapping):
        raise BookError(
            "bids.limits", "must map GPU type names to lists of limit prices (-1: not acceptable)"
        )
    for tname in limits:
        t = _name(tname, type_ix, "bids.limits", "GPU type")
        limit[:, t] = _column(limits, tname, n, np.int64)
    if "max_s" not in cols and "max_hours" in cols:
        max_s = _column(cols, "max_hours", n, np.int64) * 3600
    else:
        max_s = _column(cols, "max_s", n, np.int64)
    return Bids(
        _column(cols, "job", n, np.int64),
        tenant,
        _column(cols, "gpus", n, np.int32),
        limit,
        max_s,
        _column(cols, "submit", n, np.int64, 0),
        _column(cols, "waited", n, np.int32, 0),
        _column(cols, "expect_s", n, np.int64) if "expect_s" in cols else max_s,
    )


def policy_from_json(data: Any) -> Policy:
    if not isinstance(data, Mapping):
        raise BookError("policy", "must be an object")
    known = {f.name for f in fields(Policy)} - {"fair_reclaim"}  # the integer knobs: one list, Policy's own
    for key in data:
        if key == "fair_reclaim":
            if not isinstance(data[key], bool):
                raise BookError("policy.fair_reclaim", "must be true or false")
            continue
        if key not in known:
            raise BookError(f"policy.{key}", "unknown policy setting")
        _int(data[key], f"policy.{key}", minimum=0, what="a non-negative integer")
    ints = {k: int(v) for k, v in data.items() if k != "fair_reclaim"}
    return Policy(**ints, fair_reclaim=bool(data.get("fair_reclaim", True)))


def book_from_json(data: Any) -> Book:
    """Parse a book document; every problem is a BookError naming its field."""
    if not isinstance(data, Mapping):
        raise BookError("book", "must be a JSON object")
    types = types_from_json(_get(data, "gpu_types", "book"))
    type_ix = {n: i for i, n in enumerate(types.names)}
    node_rows = _list(_get(data, "nodes", "book"), "nodes")
    node_ix = _index([_get(r, "name", f"nodes[{i}]") for i, r in enumerate(node_rows)], "nodes")
    lease_rows = _list(_get(data, "leases", "book", []), "leases")
    slots = _lease_slots(lease_rows, node_ix)
    nodes = nodes_from_json(node_rows, type_ix, {p for s in slots for p in s})
    tenant_rows = _list(_get(data, "tenants", "book"), "tenants")
    tenant_ix = _index([_get(r, "name", f"tenants[{i}]") for i, r in enumerate(tenant_rows)], "tenants")
    leases = leases_from_json(lease_rows, slots, type_ix, tenant_ix)
    held = np.zeros((len(tenant_rows), 3, len(types)), dtype=np.int64)
    owner = leases.slot_owner
    np.add.at(held, (leases.tenant[owner], leases.tier[owner], leases.gpu_type[owner]), 1)
    tenants = tenants_from_json(tenant_rows, type_ix, held)
    raw_bids = _get(data, "bids", "book", [])
    if isinstance(raw_bids, Mapping):
        bids = bids_from_columns(raw_bids, type_ix, tenant_ix)
    else:
        bids = bids_from_rows(_list(raw_bids, "bids"), types.names, tenants.names)
    return Book(
        now=_int(_get(data, "now", "book"), "now"),
        round=_int(_get(data, "round", "book", 0), "round"),
        types=types,
        nodes=nodes,
        tenants=tenants,
        bids=bids,
        leases=leases,
        policy=policy_from_json(_get(data, "policy", "book", {})),
    )


def book_to_json(book: Book) -> dict[str, Any]:
    """The JSON document of ``book``; bids are written in columnar form."""
    t, n, m, b, ls = book.types, book.nodes, book.tenants, book.bids, book.leases
    node_rows = [
        {
            "name": n.names[i],
            "gpu_type": t.names[n.gpu_type[i]],
            "domain": int(n.domain[i]),
            "capacity": int(n.capacity[i]),
            "free": np.flatnonzero(n.free[i]).tolist(),
            "moved_at": int(n.moved_at[i]),
        }
        for i in range(len(n))
    ]
    tenant_rows = [
        {
            "name": m.names[i],
            "weight": float(m.weight[i]),
            "balance": int(m.balance[i]),
            "guardrail": None if m.guardrail[i] < 0 else int(m.guardrail[i]),
            "guarantee": {t.names[k]: int(m.guarantee[i, k]) for k in range(len(t)) if m.guarantee[i, k]},
            "held": {
                t.names[k]: dict(zip(TIER_NAMES, m.held[i, :, k].tolist(), strict=True))
                for k in range(len(t))
            },
            "owed": {t.names[k]: float(m.owed[i, k]) for k in range(len(t)) if m.owed[i, k]},
        }
        for i in range(len(m))
    ]
    lease_rows = [
        {
            "lease": int(ls.lease[i]),
            "tenant": m.names[ls.tenant[i]],
            "gpu_type": t.names[ls.gpu_type[i]],
            "tier": TIER_NAMES[ls.tier[i]],
            "start": int(ls.start[i]),
            "checkpoint": int(ls.checkpoint[i]),
            "preemptible": bool(ls.preemptible[i]),
            "expect_end": int(ls.expect_end[i]),
            "backfill": bool(ls.backfill[i]),
            "gpus": [
                [n.names[ls.slot_node[j]], int(ls.slot_idx[j])]
                for j in range(ls.slot_ptr[i], ls.slot_ptr[i + 1])
            ],
        }
        for i in range(len(ls))
    ]
    bids = {
        "job": b.job.tolist(),
        "tenant": [m.names[i] for i in b.tenant.tolist()],
        "gpus": b.gpus.tolist(),
        "limits": {t.names[k]: b.limit[:, k].tolist() for k in range(len(t))},
        "max_s": b.max_s.tolist(),
        "submit": b.submit.tolist(),
        "waited": b.waited.tolist(),
        "expect_s": b.expect_s.tolist(),
    }
    p = book.policy
    return {
        "now": int(book.now),
        "round": int(book.round),
        "policy": {
            "min_runtime_s": p.min_runtime_s,
            "starve_rounds": p.starve_rounds,
            "price_step_bp": p.price_step_bp,
            "max_reservations": p.max_reservations,
            "max_reserved_pct": p.max_reserved_pct,
            "fair_reclaim": bool(p.fair_reclaim),
            "fair_share_half_life_s": p.fair_share_half_life_s,
            "fair_share_payback_s": p.fair_share_payback_s,
            "max_moves": p.max_moves,
            "move_min_runtime_s": p.move_min_runtime_s,
            "move_max_lost_gpu_s": p.move_max_lost_gpu_s,
            "move_cooldown_s": p.move_cooldown_s,
            "move_restart_s": p.move_restart_s,
        },
        "gpu_types": [
            {
                "name": t.names[k],
                "reserve": int(t.reserve[k]),
                "posted": int(t.posted[k]),
                "max_price": int(t.max_price[k]),
            }
            for k in range(len(t))
        ],
        "nodes": node_rows,
        "tenants": tenant_rows,
        "leases": lease_rows,
        "bids": bids,
    }
