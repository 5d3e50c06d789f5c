"""Console: single sign-on's group mapping (provider group -> team and role), applied at each sign-in."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from accounts.models import GroupMapping, Role, Tenant
from accounts.sso.selectors import group_mappings, recent_identities
from accounts.sso.services import GROUP_MAX_CHARS, group_mapping_create, group_mapping_delete
from config.errors import PolicyError
from frontend.access import admin_only, page


class MappingForm(forms.Form):
    group = forms.CharField(
        max_length=GROUP_MAX_CHARS,
        help_text="The group's name exactly as the provider's groups claim gives it.",
    )
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.order_by("slug"), to_field_name="slug", empty_label=None, label="Team"
    )
    role = forms.ChoiceField(choices=[(Role.MEMBER, "member"), (Role.MANAGER, "owner (manager)")])


@admin_only
def sso(request: HttpRequest) -> HttpResponse:
    form = MappingForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            mapping = group_mapping_create(actor=caller(request), **form.cleaned_data)
        except PolicyError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(
                request, f"Members of {mapping.group} join {mapping.tenant.name} at their next sign-in."
            )
            return redirect("frontend:console_sso")
    response = page(
        request,
        "frontend/console/sso.html",
        {
            "form": form,
            "mappings": group_mappings(),
            "identities": recent_identities(),
            "issuer": settings.OIDC_ISSUER,
            "groups_claim": settings.OIDC_GROUPS_CLAIM,
            "local_login": settings.LOCAL_LOGIN,
        },
    )
    if form.errors:
        response.status_code = 400
    return response


@admin_only
@require_POST
def sso_mapping_delete(request: HttpRequest, mapping_id: int) -> HttpResponse:
    mapping = GroupMapping.objects.select_related("tenant").filter(pk=mapping_id).first()
    if mapping is None:
        raise Http404("No such mapping.")
    group_mapping_delete(mapping=mapping, actor=caller(request))
    messages.success(request, f"{mapping.group} no longer maps to {mapping.tenant.name}.")
    return redirect("frontend:console_sso")
