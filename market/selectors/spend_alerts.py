"""Reads of spend alerts (docs/alerts.md): what a rule observes now, whether new bids are blocked, the
dashboard's notices, and a rule's deliveries."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.http import Http404
from django.utils import timezone

from accounts.models import Tenant
from config.money import format_credits
from market.models import (
    AccountKind,
    AlertAction,
    AlertKind,
    AllowancePeriod,
    Job,
    JobState,
    Posting,
    SpendAlertFiring,
    SpendAlertRule,
    WebhookDelivery,
)
from market.selectors.allowance import period_start
from market.selectors.ledger import tenant_balance
from market.selectors.spend import burn_rate


def rule_period(kind: str, now: datetime) -> datetime:
    """The start of the period a rule fires once in: the UTC day, or the ISO week for the weekly kind. The
    runway kind fires at most once a day."""
    return period_start(AllowancePeriod.WEEK if kind == AlertKind.SPEND_WEEK else AllowancePeriod.DAY, now)


def period_key(kind: str, now: datetime) -> str:
    """The name of the period a firing is unique in: its start date ("2026-11-23")."""
    return rule_period(kind, now).date().isoformat()


def spend_since(*, tenant: Tenant, since: datetime) -> int:
    """Net charges (settlements minus refunds) of the tenant's entries from `since`, micro-credits."""
    total = Posting.objects.filter(
        entry__tenant=tenant, account__kind=AccountKind.REVENUE, entry__created_at__gte=since
    ).aggregate(total=Coalesce(Sum("amount"), 0))["total"]
    return int(total)


@dataclass(frozen=True)
class Reading:
    """What a rule sees now: `value` in the rule's unit (micro-credits, or whole hours of runway, None when
    nothing burns), and whether that crosses the threshold."""

    value: int | None
    crossed: bool


def rule_reading(rule: SpendAlertRule, now: datetime) -> Reading:
    if rule.kind == AlertKind.RUNWAY:
        balance = tenant_balance(tenant=rule.tenant)
        runway = burn_rate(tenant=rule.tenant, available=balance.available, held=balance.held, now=now)
        if runway.runway_hours is None:  # nothing burns: the money never runs out
            return Reading(None, False)
        return Reading(int(runway.runway_hours), runway.runway_hours < rule.threshold)
    spent = spend_since(tenant=rule.tenant, since=rule_period(rule.kind, now))
    return Reading(spent, spent > rule.threshold)


def describe(rule: SpendAlertRule) -> str:
    """One line a person reads: "spend per day above 100 credits"."""
    if rule.kind == AlertKind.RUNWAY:
        return f"money lasts fewer than {rule.threshold} hours at the recent burn rate"
    per = "day" if rule.kind == AlertKind.SPEND_DAY else "week"
    return f"spend per {per} above {format_credits(rule.threshold)} credits"


def describe_value(rule: SpendAlertRule, value: int | None) -> str:
    if value is None:
        return "nothing is burning"
    if rule.kind == AlertKind.RUNWAY:
        return f"{value} hours of money left"
    return (
        f"{format_credits(value)} credits spent this {'day' if rule.kind == AlertKind.SPEND_DAY else 'week'}"
    )


def tenant_rules(*, tenant: Tenant) -> QuerySet[SpendAlertRule]:
    return SpendAlertRule.objects.filter(tenant=tenant).select_related("tenant").order_by("pk")


def tenant_rule(*, tenant: Tenant, rule_id: int) -> SpendAlertRule:
    """The tenant's rule; another tenant's (or none) is a 404, so ids do not leak."""
    rule = tenant_rules(tenant=tenant).filter(pk=rule_id).first()
    if rule is None:
        raise Http404("No such spend alert.")
    return rule


def secret_digest(secret: str) -> str:
    """A short fingerprint of a webhook secret, for a form to say which secret it saw (it reveals nothing of
    the secret: 32 random bytes); "" without one."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16] if secret else ""


def rule_deliveries(*, rule: SpendAlertRule) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(firing__rule=rule).select_related("firing").order_by("-pk")


def worst_cost(gpus: int, limits: list[dict[str, Any]], max_seconds: int) -> int:
    """What a bid's hold could ever become: every GPU for max hours at its highest limit (micro-credits)."""
    return gpus * max(int(bid["limit"]) for bid in limits) * max_seconds // 3600


def pending_worst_cost(*, tenant: Tenant, besides: int | None = None) -> int:
    """The worst cost of the tenant's pending jobs: bids already in the book that a cap must count, or
    splitting one large bid into small ones would pass it. `besides`: a job whose bid is being replaced.
    Read only while a cap blocks (rare)."""
    pending = Job.objects.filter(tenant=tenant, state=JobState.PENDING)
    if besides is not None:
        pending = pending.exclude(pk=besides)
    rows = pending.values_list("gpus", "limits", "max_seconds")
    return sum(worst_cost(gpus, limits, seconds) for gpus, limits, seconds in rows if limits)


@dataclass(frozen=True)
class Block:
    """Why a new bid is refused: the rule and a sentence that says what, why and who can lift it."""

    rule: SpendAlertRule
    paused: bool  # True: every new bid; False: a cap that this bid's cost would pass
    message: str


def bid_block(
    *, tenant: Tenant, cost: int, now: datetime | None = None, replacing: int | None = None
) -> Block | None:
    """The first blocking rule that refuses a new bid whose worst-case cost is `cost` micro-credits: a
    pausing rule refuses every bid; a capping rule refuses one that would take the period's spend plus the
    open holds plus the pending jobs' worst cost plus `cost` past its cap. `replacing`: the pending job an
    amend changes, whose old bid no longer counts. One indexed query when nothing is blocked (the common case)."""
    blocking = list(SpendAlertRule.objects.filter(tenant=tenant, blocked_since__isnull=False).order_by("pk"))
    if not blocking:
        return None
    now = now or timezone.now()
    lift = "an owner of the team (the manager role) or a platform admin can lift it on the Alerts page or through the API"
    for rule in blocking:
        if rule.action == AlertAction.PAUSE:
            return Block(
                rule,
                True,
                f"New bids are paused by spend alert {rule.pk} ({describe(rule)}), crossed "
                f"{rule.blocked_since:%Y-%m-%d %H:%M} UTC; {lift}.",
            )
        if rule.action == AlertAction.CAP and rule.cap is not None:
            committed = spend_since(tenant=tenant, since=rule_period(rule.kind, now))
            committed += tenant_balance(tenant=tenant).held + pending_worst_cost(
                tenant=tenant, besides=replacing
            )
            if committed + cost > rule.cap:
                return Block(
                    rule,
                    False,
                    f"New bids are capped by spend alert {rule.pk} ({describe(rule)}): this bid could cost "
                    f"{format_credits(cost)} credits, and with {format_credits(committed)} credits spent, "
                    f"held or bid this period that passes the cap of {format_credits(rule.cap)} credits; {lift}.",
                )
    return None


@dataclass(frozen=True)
class Notice:
    rule: SpendAlertRule
    firing: SpendAlertFiring | None
    text: str


def alert_notices(*, tenant: Tenant, now: datetime | None = None) -> list[Notice]:
    """The dashboard's notices: each active rule that fired in its current period, and each rule still
    blocking bids (whenever it fired)."""
    now = now or timezone.now()
    notices = []
    for rule in tenant_rules(tenant=tenant).filter(active=True):
        firing = rule.firings.filter(period=period_key(rule.kind, now)).first()
        if firing is None and rule.blocked_since is None:
            continue
        parts = [f"Spend alert {rule.pk}: {describe(rule)}"]
        if firing is not None:
            parts.append(
                f"crossed at {firing.fired_at:%Y-%m-%d %H:%M} UTC ({describe_value(rule, firing.value)})"
            )
        if rule.blocked_since is not None:
            parts.append(
                "new bids are paused until an owner of the team lifts it"
                if rule.action == AlertAction.PAUSE
                else f"new bids are capped at {format_credits(rule.cap or 0)} credits this period until an "
                "owner of the team lifts it"
            )
        notices.append(Notice(rule, firing, "; ".join(parts) + "."))
    return notices
