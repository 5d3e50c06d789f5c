"""The team dashboard: money, burn rate and runway, allowance, jobs, prices and GPUs."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from frontend.access import page, seat
from frontend.charts import sparkline
from market.models import Allowance, JobState
from market.selectors.allowance import allowance_history, next_allowance
from market.selectors.capacity import gpu_capacity
from market.selectors.fair_share import team_standing
from market.selectors.jobs import job_list
from market.selectors.ledger import tenant_balance
from market.selectors.prices import price_board, price_history
from market.selectors.spend import burn_rate
from market.selectors.spend_alerts import alert_notices

TREND_ROUNDS = 30


@login_required
def dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    s = seat(request, slug)
    balance = tenant_balance(tenant=s.tenant)
    prices = []
    for row in price_board():
        recent = list(price_history().filter(gpu_type__name=row.gpu_type)[:TREND_ROUNDS])[::-1]
        trend = [p.next_posted / 1e6 for p in recent]
        prices.append({"row": row, "trend": sparkline(trend, label=f"{row.gpu_type} posted price")})
    allowance = Allowance.objects.filter(tenant=s.tenant, active=True).first()
    return page(
        request,
        "frontend/dashboard.html",
        {
            "balance": balance,
            "burn": burn_rate(tenant=s.tenant, available=balance.available, held=balance.held),
            "allowance": allowance,
            "next_allowance": next_allowance(allowance) if allowance else None,
            "allowance_history": allowance_history(tenant=s.tenant)[:5],
            "running": job_list(
                tenant=s.tenant, states=[JobState.ALLOCATED, JobState.RUNNING, JobState.PREEMPTING]
            )[:10],
            "pending": job_list(tenant=s.tenant, states=[JobState.PENDING])[:10],
            "prices": prices,
            "capacity": gpu_capacity(),
            "notices": alert_notices(tenant=s.tenant),
            "standing": team_standing(tenant=s.tenant, since=timezone.now() - timedelta(days=1)),
        },
        s,
    )
