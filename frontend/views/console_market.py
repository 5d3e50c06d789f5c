"""Console: fairness, the market (charts, policy form and its change log), rounds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Field, Model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.safestring import SafeString

from accounts.access import caller
from accounts.models import Tenant
from accounts.selectors import audit_events
from config.errors import PolicyError
from config.money import AmountError, format_credits, parse_credits
from frontend.access import admin_only, page
from frontend.charts import Series, line_chart
from inventory.models import Gpu, GpuType
from market.models import BidOutcome, Lease
from market.models.policy import POLICY_LIMITS
from market.selectors.fair_share import fair_share_report, fairness_diagnostics
from market.selectors.market_stats import price_series, revenue_by_day, round_figures
from market.selectors.policy import market_policy
from market.selectors.preemptions import round_preempted
from market.selectors.reservations import fragmentation, moves_per_round, reservations_now
from market.selectors.round_losers import Loser, round_losers
from market.selectors.rounds import round_get, rounds_list
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.policy import policy_update
from market.services.policy_versions import policy_versioned

POLICY_LABELS = {
    "round_seconds": "Round period (seconds)",
    "price_step_bp": "Price step (basis points)",
    "min_runtime_s": "Minimum runtime (seconds)",
    "default_grace_s": "Default grace period (seconds)",
    "starve_rounds": "Rounds before reserving nodes",
    "max_reservations": "Reservations per type and round",
    "max_reserved_pct": "Reserved nodes per type, at most (%)",
    "fair_reclaim": "Fair reclaim (1: on, 0: off)",
    "fair_share_half_life_s": "Fair-share history half-life (seconds, 0: none)",
    "fair_share_payback_s": "Fair-share payback (seconds)",
    "max_moves": "Moves per round, at most (0: none)",
    "move_min_runtime_s": "Minimum runtime before a move (seconds)",
    "move_max_lost_gpu_s": "Most work a move may lose (GPU-seconds)",
    "move_cooldown_s": "Node cool-down after a move (seconds)",
    "move_restart_s": "Cost of a move per GPU (seconds)",
    "retention_days": "Keep round details (days)",
    "energy_price_kwh": "Energy price (credits per kWh)",
    "idle_util_pct": "Idle below utilisation (%, 0: off)",
    "idle_seconds": "Idle for (seconds)",
    "agent_report_budget_rps": "Agent reports per second, whole fleet",
}
# Knobs stored in micro-credits: the form shows and takes credits; the limits stay POLICY_LIMITS'.
MONEY_KNOBS = {"energy_price_kwh"}
WINDOWS = {
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


def _window(request: HttpRequest) -> tuple[str, datetime]:
    key = request.GET.get("window", "1d")
    key = key if key in WINDOWS else "1d"
    return key, timezone.now() - WINDOWS[key]


@admin_only
def console(request: HttpRequest) -> HttpResponse:
    return redirect("frontend:console_tenants")


@admin_only
def fairness(request: HttpRequest) -> HttpResponse:
    window, since = _window(request)
    share = fair_share_report(since=since)
    report = fairness_diagnostics(since=since)  # Jain's index, guarantee compliance, preemptions
    weights = {t.tenant: t.weight for t in report.tenants}
    weights |= dict(
        Tenant.objects.filter(slug__in=[t.tenant for t in share.tenants]).values_list("slug", "weight")
    )
    diagnostics = {t.tenant: t for t in report.tenants}
    types = sorted({name for t in share.tenants for name in t.owed} | {s.gpu_type for s in share.series})
    rows = [
        {
            "t": t,
            "weight": weights.get(t.tenant),
            "owed": [t.owed.get(name) for name in types],
            "preemptions": diagnostics[t.tenant].preemptions if t.tenant in diagnostics else 0,
        }
        for t in share.tenants
    ]
    charts = [
        line_chart(
            [
                Series(
                    "fair-share target",
                    [(t.timestamp(), v) for t, v in zip(s.slots, s.target, strict=True)],
                    dash=2,
                ),
                Series("held", [(t.timestamp(), v) for t, v in zip(s.slots, s.held, strict=True)]),
                Series(
                    "waiting", [(t.timestamp(), v) for t, v in zip(s.slots, s.waiting, strict=True)], dash=1
                ),
            ],
            title=f"{s.tenant} · {s.gpu_type}: GPUs held, fair-share target and waiting",
            y_unit="GPUs",
            step=True,
            width=460,
            height=180,
        )
        for s in share.series
    ]
    frag_charts = [
        line_chart(
            [
                Series(
                    "GPUs free by count", [(t.timestamp(), v) for t, v in zip(f.at, f.free_gpus, strict=True)]
                ),
                Series(
                    "whole free nodes",
                    [(t.timestamp(), v) for t, v in zip(f.at, f.free_nodes, strict=True)],
                    dash=2,
                ),
            ],
            title=f"{f.gpu_type}: free GPUs beside whole free nodes (fragmentation)",
            y_unit="",
            step=True,
            width=460,
            height=180,
        )
        for f in fragmentation(since=since)
    ]
    return page(
        request,
        "frontend/console/fairness.html",
        {
            "frag_charts": frag_charts,
            "reservations": reservations_now(),
            "moves": moves_per_round(since=since),
            "share": share,
            "rows": rows,
            "types": types,
            "report": report,
            "charts": charts,
            "window": window,
            "windows": list(WINDOWS),
        },
    )


def _help(obj: Model, name: str) -> str:
    field = obj._meta.get_field(name)
    return str(field.help_text) if isinstance(field, Field) else ""  # the knobs are all plain fields


def _shown(field: str, value: int) -> str:
    """A knob's value as the form shows it: credits for a money knob, else the number."""
    return format_credits(value).replace(",", "") if field in MONEY_KNOBS else str(value)


def _policy_form(request: HttpRequest) -> dict[str, str]:
    errors: dict[str, str] = {}
    changes = {}
    for field in POLICY_LIMITS:
        if field not in request.POST:  # a form from before a knob existed leaves that knob as it is
            continue
        raw = request.POST.get(field, "").strip()
        try:
            changes[field] = parse_credits(raw) if field in MONEY_KNOBS else int(raw)
        except AmountError as exc:
            errors[field] = str(exc)
        except ValueError:
            errors[field] = "must be a whole number"
    prices = {}
    for t in GpuType.objects.order_by("name"):
        pair = []
        for bound in ("reserve", "max"):
            name = f"{bound}-{t.name}"
            try:
                pair.append(parse_credits(request.POST.get(name, "")))
            except AmountError as exc:
                errors[name] = str(exc)
        if len(pair) == 2:
            prices[t] = pair
    if errors:
        return errors
    try:
        # One policy version for the form, knobs and prices together; a refused part undoes the rest.
        with policy_versioned(actor=caller(request), reason=request.POST.get("reason", "")):
            _policy_write(request, changes, prices)
    except _Refused as refused:
        return refused.errors
    except PolicyError as exc:
        return {exc.field: exc.message}
    return {}


class _Refused(Exception):
    """A refusal already turned into the form's errors, raised to roll the form's writes back."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


def _policy_write(request: HttpRequest, changes: dict[str, int], prices: dict[GpuType, list[int]]) -> None:
    try:
        policy_update(
            actor=caller(request), reason="", **changes
        )  # the form's reason is the enclosing version's
    except PolicyError as exc:
        if exc.field in MONEY_KNOBS:  # the service speaks micro-credits, the form credits
            low, high = (format_credits(v) for v in POLICY_LIMITS[exc.field])
            raise _Refused({exc.field: f"must be between {low} and {high} credits"}) from exc
        raise _Refused({exc.field: exc.message}) from exc
    for t, (reserve, top) in prices.items():
        try:
            gpu_type_policy_save(
                name=t.name,
                memory_gb=t.memory_gb,
                reserve_price=reserve,
                max_price=top,
                actor=caller(request),
            )
        except PolicyError as exc:
            field = f"{'reserve' if exc.field == 'reserve_price' else 'max'}-{t.name}"
            raise _Refused({field: exc.message}) from exc


def _market_charts(since: datetime) -> list[SafeString]:
    """Prices (one colour per type: posted solid, spot dashed), utilisation, demand against supply, revenue."""
    prices = price_series(since=since)
    price_chart = line_chart(
        [
            Series(f"{name} {kind}", [(t.timestamp(), v / 1e6) for t, v in points], dash=dash, colour=k)
            for k, (name, rows) in enumerate(prices.items())
            for kind, dash, points in (
                ("posted", 0, [(t, posted) for t, posted, _ in rows]),
                ("spot", 1, [(t, spot) for t, _, spot in rows if spot is not None]),
            )
        ],
        title="Posted (solid) and clearing spot (dashed) prices",
        y_unit="credits per GPU-hour",
    )
    figures = round_figures(since=since)
    total = Gpu.objects.count() or 1
    util_chart = line_chart(
        [
            Series(
                "busy share of GPUs at freeze",
                [(f.slot.timestamp(), round(1 - f.gpus_free / total, 4)) for f in figures],
            )
        ],
        title="Utilisation",
        y_unit="share of GPUs",
    )
    demand_chart = line_chart(
        [
            Series("GPUs asked (bids in the book)", [(f.slot.timestamp(), f.demand_gpus) for f in figures]),
            Series("GPUs free at freeze", [(f.slot.timestamp(), f.gpus_free) for f in figures], dash=1),
            Series("GPUs won", [(f.slot.timestamp(), f.won_gpus) for f in figures], dash=2),
        ],
        title="Demand against supply",
        y_unit="GPUs",
    )
    revenue_chart = line_chart(
        [Series("revenue", [(d.timestamp(), v / 1e6) for d, v in revenue_by_day(since=since)])],
        title="Revenue per day",
        y_unit="credits",
    )
    return [price_chart, util_chart, demand_chart, revenue_chart]


@admin_only
def market(request: HttpRequest) -> HttpResponse:
    errors: dict[str, str] = {}
    if request.method == "POST":
        errors = _policy_form(request)
        if not errors:
            messages.success(request, "Market policy saved.")
            return redirect("frontend:console_market")
    window, since = _window(request)
    policy = market_policy()
    post = request.POST if errors else None
    fields = [
        {
            "name": f,
            "value": (post.get(f) if post else _shown(f, getattr(policy, f))),
            "low": _shown(f, lo),
            "high": _shown(f, hi),
            "money": f in MONEY_KNOBS,
            "help": _help(policy, f),
            "error": errors.get(f, ""),
            "label": POLICY_LABELS[f],
        }
        for f, (lo, hi) in POLICY_LIMITS.items()
    ]
    type_rows = [
        {
            "type": t,
            "reserve": post.get(f"reserve-{t.name}")
            if post
            else format_credits(t.reserve_price).replace(",", ""),
            "max": post.get(f"max-{t.name}") if post else format_credits(t.max_price).replace(",", ""),
            "reserve_error": errors.get(f"reserve-{t.name}", ""),
            "max_error": errors.get(f"max-{t.name}", ""),
        }
        for t in GpuType.objects.order_by("name")
    ]
    changes = Paginator(
        audit_events().filter(action__in=["policy.update", "gpu_type.update", "gpu_type.create"]), 20
    ).get_page(request.GET.get("page"))
    response = page(
        request,
        "frontend/console/market.html",
        {
            "charts": _market_charts(since),
            "fields": fields,
            "type_rows": type_rows,
            "errors": errors,
            "changes": changes,
            "window": window,
            "windows": list(WINDOWS),
        },
    )
    if errors:
        response.status_code = 400
    return response


@admin_only
def rounds(request: HttpRequest) -> HttpResponse:
    paged = Paginator(rounds_list(), 50).get_page(request.GET.get("page"))
    return page(request, "frontend/console/rounds.html", {"page": paged})


@admin_only
def round_detail(request: HttpRequest, round_id: int) -> HttpResponse:
    rnd = round_get(round_id=round_id)
    if rnd is None:
        raise Http404("No such round.")
    outcomes = BidOutcome.objects.filter(round=rnd).select_related("job__tenant", "gpu_type")
    nodes_of = dict(Lease.objects.filter(round=rnd).values_list("job_id", "node__name"))
    winners = [(o, nodes_of.get(o.job_id, "")) for o in outcomes.filter(won=True).order_by("tier", "job_id")]
    # Derived from the round's book: a bid that lost as the round before wrote no row (market.selectors.
    # round_losers); once the book is pruned, the round's own loss rows (the losses that changed there).
    derived = round_losers(rnd)
    pager = Paginator(
        derived
        if derived is not None
        else [Loser(o.job_id, o, None) for o in outcomes.filter(won=False).order_by("reason", "job_id")],
        100,
    )
    losers = pager.get_page(request.GET.get("page"))
    preempted = list(round_preempted(round_id=rnd.pk))
    return page(
        request,
        "frontend/console/round.html",
        {
            "round": rnd,
            "winners": winners,
            "losers": losers,
            "preempted": preempted,
            "lost": _lost_work(preempted),
        },
    )


def _lost_work(preempted: list[Lease]) -> dict[str, Any]:
    """The work the round's preemptions threw away (market.selectors.lost_work): in all and per tenant, in
    GPU-seconds and GPU-hours; None in all when no lease recorded it (preempted before it was)."""
    recorded = [lease for lease in preempted if lease.lost_gpu_s is not None]
    by_tenant: dict[str, float] = {}
    for lease in recorded:
        by_tenant[lease.tenant.slug] = by_tenant.get(lease.tenant.slug, 0.0) + (lease.lost_gpu_s or 0.0)
    total = sum(by_tenant.values()) if recorded else None
    return {
        "total": total,
        "total_hours": None if total is None else round(total / 3600, 3),
        "by_tenant": sorted(by_tenant.items()),
    }
