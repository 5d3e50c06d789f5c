"""Console: tenants (create, weight, guardrail, guarantees, members), their money and allowance."""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect

from accounts.access import caller
from accounts.models import Membership, Role, Tenant, User
from accounts.services import membership_remove, membership_set, tenant_create
from config.errors import PolicyError
from config.money import AmountError, format_credits, parse_credits
from frontend.access import admin_only, page
from frontend.charts import Series, line_chart
from inventory.models import GpuType
from market.api.errors import form_errors
from market.models import Allowance, AllowancePeriod
from market.selectors.allowance import allowance_history
from market.selectors.ledger import tenant_balance
from market.selectors.policy import tenant_policy
from market.selectors.spend import money_by_day
from market.services import ledger
from market.services.allowance import allowance_set
from market.services.policy import tenant_policy_update


class TenantCreate(forms.Form):
    name = forms.CharField(max_length=100)
    slug = forms.SlugField(max_length=50, help_text="Short name used in URLs and the API.")
    weight = forms.IntegerField(min_value=1, initial=1)


@admin_only
def tenants(request: HttpRequest) -> HttpResponse:
    form = TenantCreate(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenant = tenant_create(actor=caller(request), **form.cleaned_data)
        except IntegrityError:
            form.add_error("slug", "A team with this name or slug exists already.")
        except PolicyError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Team {tenant.name} created.")
            return redirect("frontend:console_tenant", slug=tenant.slug)
    paged = Paginator(Tenant.objects.order_by("slug"), 50).get_page(request.GET.get("page"))
    rows = [
        {"tenant": t, "balance": tenant_balance(tenant=t), "policy": tenant_policy(tenant=t)}
        for t in paged.object_list
    ]
    return page(request, "frontend/console/tenants.html", {"form": form, "page": paged, "rows": rows})


def _credits(field: str, raw: str, errors: dict[str, str], *, blank_ok: bool = False) -> int | None:
    raw = raw.strip()
    if not raw:
        if not blank_ok:
            errors[field] = "This field is required."
        return None
    try:
        return parse_credits(raw)
    except AmountError as exc:
        errors[field] = str(exc)
        return None


def _whole(field: str, raw: str, errors: dict[str, str]) -> int | None:
    try:
        return int(raw.strip())
    except ValueError:
        errors[field] = "must be a whole number"
        return None


def _policy_post(request: HttpRequest, tenant: Tenant, types: list[GpuType]) -> dict[str, str]:
    errors: dict[str, str] = {}
    weight = _whole("weight", request.POST.get("weight", ""), errors)
    guardrail = _credits("guardrail", request.POST.get("guardrail", ""), errors, blank_ok=True)
    guarantees = {}
    for t in types:
        n = _whole(f"guarantees.{t.name}", request.POST.get(f"guarantee-{t.name}", "0") or "0", errors)
        if n is not None:
            guarantees[t.name] = n
    if not errors:
        try:
            tenant_policy_update(
                actor=caller(request),
                tenant=tenant,
                weight=weight,
                guardrail=guardrail,
                guarantees=guarantees,
                reason=request.POST.get("reason", ""),
            )
        except PolicyError as exc:
            errors |= form_errors(exc)
    return errors


def _member_post(request: HttpRequest, tenant: Tenant) -> dict[str, str]:
    username = request.POST.get("username", "").strip()
    role = request.POST.get("role", "")
    user = User.objects.filter(username=username).first()
    if user is None:
        return {"username": f"no user called {username!r}"}
    if role == "remove":
        membership_remove(tenant=tenant, user=user, actor=caller(request))
        return {}
    try:
        membership_set(tenant=tenant, user=user, role=role, actor=caller(request))
    except PolicyError as exc:
        return form_errors(exc)
    return {}


def _money_post(request: HttpRequest, tenant: Tenant) -> dict[str, str]:
    """A top-up or refund; the form's nonce is the ledger key, so a resent form moves money once."""
    errors: dict[str, str] = {}
    amount = _credits("amount", request.POST.get("amount", ""), errors)
    kind = request.POST.get("money_kind", "topup")
    if kind not in ("topup", "refund"):  # a hostile form must not turn an unknown kind into a top-up
        errors["money_kind"] = "must be topup or refund"
    memo = request.POST.get("memo", "")[:200]
    key = f"console:{kind}:{request.POST.get('nonce', '')[:64]}"
    if amount is None or errors:
        return errors
    move = ledger.ledger_refund if kind == "refund" else ledger.ledger_topup
    try:
        move(tenant=tenant, amount=amount, key=key, actor=caller(request), memo=memo)
    except ledger.LedgerError as exc:  # an amount or key names its field; the rest show beside the amount
        errors |= form_errors(exc, whole="amount")
    return errors


def _allowance_post(request: HttpRequest, tenant: Tenant) -> dict[str, str]:
    errors: dict[str, str] = {}
    amount = _credits("allowance_amount", request.POST.get("allowance_amount", ""), errors)
    cap = _credits("allowance_cap", request.POST.get("allowance_cap", ""), errors)
    if errors or amount is None or cap is None:
        return errors
    try:
        allowance_set(
            actor=caller(request),
            tenant=tenant,
            amount=amount,
            period=request.POST.get("allowance_period", ""),
            cap=cap,
            active=request.POST.get("allowance_active") == "on",
            reason=request.POST.get("reason", ""),
        )
    except PolicyError as exc:
        errors[f"allowance_{exc.field}"] = exc.message
    return errors


_ACTIONS = {
    "policy": _policy_post,
    "member": _member_post,
    "money": _money_post,
    "allowance": _allowance_post,
}


@admin_only
def tenant(request: HttpRequest, slug: str) -> HttpResponse:
    found = Tenant.objects.filter(slug=slug).first()
    if found is None:
        raise Http404("No such team.")
    types = list(GpuType.objects.order_by("name"))
    errors: dict[str, str] = {}
    action = request.POST.get("action", "")
    if request.method == "POST" and action in _ACTIONS:
        handler: Any = _ACTIONS[action]
        errors = handler(request, found, types) if action == "policy" else handler(request, found)
        if not errors:
            messages.success(request, "Saved.")
            return redirect("frontend:console_tenant", slug=found.slug)
    found.refresh_from_db()
    policy = tenant_policy(tenant=found)
    allowance = Allowance.objects.filter(tenant=found).first()
    post = request.POST if errors else None
    response = page(
        request,
        "frontend/console/tenant.html",
        {
            "tenant": found,
            "action": action,
            "errors": errors,
            "post": post,
            "balance": tenant_balance(tenant=found),
            "guarantee_rows": [
                {
                    "type": t,
                    "gpus": (post.get(f"guarantee-{t.name}") if post else None)
                    or policy.guarantees.get(t.name, 0),
                    "error": errors.get(f"guarantees.{t.name}", ""),
                    "held": sum(n for (name, _), n in policy.held.items() if name == t.name),
                }
                for t in types
            ],
            "members": Membership.objects.filter(tenant=found)
            .select_related("user")
            .order_by("user__username"),
            "roles": [(Role.MANAGER, "owner"), (Role.MEMBER, "member")],
            "allowance": allowance,
            "periods": AllowancePeriod.choices,
            "allowance_history": allowance_history(tenant=found)[:20],
            "guardrail_text": format_credits(found.guardrail).replace(",", "")
            if found.guardrail is not None
            else "",
            "nonce": uuid.uuid4().hex,
            "money_chart": line_chart(
                [
                    Series(name, [(d.timestamp(), v / 1e6) for d, v in points], dash=i)
                    for i, (name, points) in enumerate(money_by_day(tenant=found).items())
                ],
                title="Credits per day: added (top-ups, allowances), charged, refunded",
                y_unit="credits",
            ),
        },
    )
    if errors:
        response.status_code = 400
    return response
