"""Spend alerts (docs/alerts.md): managers set rules; a beat task evaluates them; a crossing fires once per rule
and period and, if the rule says so, pauses or caps new bids until a manager lifts it. Running jobs are never
touched. The mail and the signed webhook of a firing: market.services.spend_alert_notify."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.access import can_manage
from accounts.audit import audit
from accounts.models import Tenant, User
from config import idempotency
from config.errors import PolicyError
from config.money import MAX_AMOUNT
from market.models import AlertAction, AlertKind, SpendAlertFiring, SpendAlertRule
from market.selectors.spend_alerts import period_key, rule_reading, secret_digest
from market.services import webhooks

MAX_RULES_PER_TENANT = 20
RUNWAY_MAX_HOURS = 24 * 366


class NotPermitted(Exception):
    """Only the tenant's managers and platform admins write rules and lift pauses."""


class TooManyRules(Exception):
    """A team already has MAX_RULES_PER_TENANT rules: each is evaluated every tick (a 409, like tokens')."""


def _check_manager(actor: User, tenant: Tenant) -> None:
    if not can_manage(actor, tenant):
        raise NotPermitted("Only the team's managers or platform admins may change spend alerts.")


def _whole(field: str, value: object, low: int, high: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(field, f"must be a whole number of {unit}")
    if not low <= value <= high:
        raise PolicyError(field, f"must be between {low} and {high} {unit}")
    return value


def _check(values: dict[str, Any]) -> dict[str, Any]:
    """The whole rule, checked together (a change is checked as the rule it would make)."""
    kind, action = values["kind"], values["action"]
    if kind not in AlertKind.values:
        raise PolicyError("kind", f"must be one of {', '.join(AlertKind.values)}")
    if action not in AlertAction.values:
        raise PolicyError("action", f"must be one of {', '.join(AlertAction.values)}")
    if kind == AlertKind.RUNWAY:
        values["threshold"] = _whole("threshold", values["threshold"], 1, RUNWAY_MAX_HOURS, "hours")
    else:
        values["threshold"] = _whole("threshold", values["threshold"], 1, MAX_AMOUNT, "micro-credits")
    if action == AlertAction.CAP:
        if kind == AlertKind.RUNWAY:
            raise PolicyError("action", "a cap needs a spend per day or per week rule")
        if values.get("cap") is None:
            raise PolicyError("cap", "is required when the action caps new bids")
        values["cap"] = _whole("cap", values["cap"], 1, MAX_AMOUNT, "micro-credits")
        if values["cap"] < values["threshold"]:
            raise PolicyError("cap", "must be at least the threshold")
    elif values.get("cap") is not None:
        raise PolicyError("cap", "is only for the cap action")
    if not isinstance(values["email"], bool):
        raise PolicyError("email", "must be true or false")
    if not isinstance(values["active"], bool):
        raise PolicyError("active", "must be true or false")
    values["webhook_url"] = webhooks.check_webhook_url(
        values["webhook_url"], allow_private=settings.SPEND_ALERT_WEBHOOK_ALLOW_PRIVATE
    )
    return values


@dataclass(frozen=True)
class Created:
    rule: SpendAlertRule
    secret: str  # the webhook secret, shown in this one answer ("" without a webhook)
    created: bool  # False: a replay of the same key and request


def _keyed_rule(tenant: Tenant, client_key: str) -> Created | None:
    rule = SpendAlertRule.objects.filter(tenant=tenant, client_key=client_key).first() if client_key else None
    # The first answer may have been lost on the way: its retry gets the secret it carried.
    return None if rule is None else Created(rule, rule.webhook_secret, False)


def spend_alert_create(
    *,
    actor: User,
    tenant: Tenant,
    kind: str,
    threshold: int,
    action: str = AlertAction.NOTIFY,
    cap: int | None = None,
    email: bool = True,
    webhook_url: str = "",
    client_key: str = "",
    request_digest: str = "",
) -> Created:
    """A new rule; with a webhook, a fresh secret returned once. A repeated `client_key` with the same
    request returns the first rule; with another request it is refused."""
    _check_manager(actor, tenant)
    client_key = idempotency.check_key(client_key)

    def find() -> Created | None:
        return _keyed_rule(tenant, client_key)

    def same(found: Created) -> bool:
        return found.rule.request_digest == request_digest

    def name(found: Created) -> str:
        return f"spend alert {found.rule.pk}"

    first = idempotency.replay(key=client_key, found=find(), same=same, name=name)
    if first is not None:
        return first
    values = _check(
        {
            "kind": kind,
            "threshold": threshold,
            "action": action,
            "cap": cap,
            "email": email,
            "webhook_url": webhook_url,
            "active": True,
        }
    )
    made, _ = idempotency.replay_or_create(
        key=client_key,
        find=find,
        same=same,
        name=name,
        create=lambda: _create(actor, tenant, client_key, request_digest, values),
        look_first=False,  # looked up above, before the checks: a replay is answered whatever they say today
    )
    return made


@transaction.atomic
def _create(
    actor: User, tenant: Tenant, client_key: str, request_digest: str, values: dict[str, Any]
) -> Created:
    # Serialises creates of one tenant, so the count below cannot be raced past.
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).first()
    if SpendAlertRule.objects.filter(tenant=tenant).count() >= MAX_RULES_PER_TENANT:
        raise TooManyRules(
            f"{tenant.slug} already has {MAX_RULES_PER_TENANT} spend alerts, the most a team may have; "
            "delete one first."
        )
    secret = secrets.token_urlsafe(32) if values["webhook_url"] else ""
    rule = SpendAlertRule.objects.create(
        tenant=tenant,
        created_by=actor,
        webhook_secret=secret,
        client_key=client_key,
        request_digest=request_digest if client_key else "",
        **values,
    )
    audit(actor=actor, tenant=tenant, action="spend_alert.create", detail=_detail(rule))
    return Created(rule, secret, True)


EDITABLE = ("threshold", "action", "cap", "email", "webhook_url", "active")


@transaction.atomic
def spend_alert_update(
    *,
    actor: User,
    rule: SpendAlertRule,
    changes: dict[str, Any],
    rotate_secret: bool = False,
    seen_secret: str = "",
) -> Created:
    """Change some of a rule's fields (the kind stays: a new kind is a new rule). A rule that gets its first
    webhook URL gets a secret, and `rotate_secret` replaces it; either is returned once. Changing the URL keeps
    the secret (fixing a URL must not break the receiver's check; the secret is never sent, so the new address
    learns nothing) and removing it drops the secret. `seen_secret`, a form's `secret_digest` of the secret it
    was shown with, makes a resent rotate act once. A rule that stops pausing or capping (another action, or
    inactive) stops blocking bids. Audited as {field: [old, new]}."""
    _check_manager(actor, rule.tenant)
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise PolicyError(unknown[0], "cannot be changed")
    rule = (
        SpendAlertRule.objects.select_for_update(no_key=True, of=("self",))
        .select_related("tenant")
        .get(pk=rule.pk)
    )
    values = {f: getattr(rule, f) for f in ("kind", *EDITABLE)}
    if changes.get("action", rule.action) != AlertAction.CAP and "cap" not in changes:
        values["cap"] = None
    values = _check(values | changes)
    if rotate_secret and not values["webhook_url"]:
        raise PolicyError("rotate_secret", "needs a webhook URL: there is no secret without one")
    if rotate_secret and seen_secret and seen_secret != secret_digest(rule.webhook_secret):
        raise PolicyError(
            "rotate_secret",
            "was already done from this form (it was sent twice); the secret shown then is the current one. "
            "Tick it again to rotate once more.",
        )
    diff = {f: [getattr(rule, f), values[f]] for f in EDITABLE if getattr(rule, f) != values[f]}
    secret = ""
    if not values["webhook_url"]:
        rule.webhook_secret = ""
    elif rotate_secret or not rule.webhook_secret:
        secret = secrets.token_urlsafe(32)
        rule.webhook_secret = secret
        diff["webhook_secret"] = ["rotated"] if rotate_secret else ["made"]
    if rule.blocked_since is not None and (values["action"] == AlertAction.NOTIFY or not values["active"]):
        rule.blocked_since = None
        diff["blocked"] = [True, False]
    for field in EDITABLE:
        setattr(rule, field, values[field])
    if diff:
        rule.save()
        audit(actor=actor, tenant=rule.tenant, action="spend_alert.update", detail=_redacted(diff))
    return Created(rule, secret, False)


@transaction.atomic
def spend_alert_delete(*, actor: User, rule: SpendAlertRule) -> None:
    """Delete a rule with its firings and deliveries; a pause it held ends with it."""
    _check_manager(actor, rule.tenant)
    audit(actor=actor, tenant=rule.tenant, action="spend_alert.delete", detail=_detail(rule))
    rule.delete()


@transaction.atomic
def spend_alert_lift(*, actor: User, rule: SpendAlertRule) -> SpendAlertRule:
    """End a rule's pause or cap: new bids go through again. The rule has fired for this period, so it does
    not pause again before the next one. Lifting a rule that blocks nothing changes nothing."""
    _check_manager(actor, rule.tenant)
    rule = (
        SpendAlertRule.objects.select_for_update(no_key=True, of=("self",))
        .select_related("tenant")
        .get(pk=rule.pk)
    )
    if rule.blocked_since is None:
        return rule
    since = rule.blocked_since
    rule.blocked_since = None
    rule.save(update_fields=["blocked_since", "updated_at"])
    audit(
        actor=actor,
        tenant=rule.tenant,
        action="spend_alert.lift",
        detail={"rule": rule.pk, "action": rule.action, "blocked_since": since.isoformat()},
    )
    return rule


# Evaluation: what the beat task runs.


def spend_alerts_evaluate(*, now: datetime | None = None) -> list[int]:
    """Evaluate every active rule; returns the ids of the firings made now (the task then notifies). One
    transaction per rule, so one failing rule does not hold up the rest."""
    now = now or timezone.now()
    fired = []
    for rule_id in SpendAlertRule.objects.filter(active=True).order_by("pk").values_list("pk", flat=True):
        firing_id = _evaluate_one(rule_id, now)
        if firing_id is not None:
            fired.append(firing_id)
    return fired


def _evaluate_one(rule_id: int, now: datetime) -> int | None:
    rule = SpendAlertRule.objects.select_related("tenant").filter(pk=rule_id, active=True).first()
    if rule is None:
        return None
    period = period_key(rule.kind, now)
    if SpendAlertFiring.objects.filter(rule=rule, period=period).exists():  # the cheap common case
        return None
    reading = rule_reading(rule, now)
    if not reading.crossed or reading.value is None:
        return None
    try:
        with transaction.atomic():
            # The claim: the unique (rule, period) row. A second worker waits on the index, then fails here.
            firing = SpendAlertFiring.objects.create(
                rule=rule,
                period=period,
                value=reading.value,
                threshold=rule.threshold,
                action=rule.action,
                fired_at=now,
            )
            if rule.action in (AlertAction.PAUSE, AlertAction.CAP):
                SpendAlertRule.objects.filter(pk=rule.pk, blocked_since__isnull=True).update(
                    blocked_since=now
                )
            audit(
                actor=None,
                tenant=rule.tenant,
                action="spend_alert.fire",
                detail={"rule": rule.pk, "period": period, "value": reading.value, "action": rule.action},
            )
    except IntegrityError:
        return None
    return firing.pk


def _detail(rule: SpendAlertRule) -> dict[str, Any]:
    return {
        "rule": rule.pk,
        "kind": rule.kind,
        "threshold": rule.threshold,
        "action": rule.action,
        "cap": rule.cap,
        "email": rule.email,
        "webhook": bool(rule.webhook_url),
    }


def _redacted(diff: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A webhook URL can carry a token in its path: the audit log says it changed, not what it is."""
    if "webhook_url" in diff:
        diff["webhook_url"] = [bool(diff["webhook_url"][0]), bool(diff["webhook_url"][1])]
    return diff
