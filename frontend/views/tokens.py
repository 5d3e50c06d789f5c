"""API tokens: create (the secret is shown once), list, revoke. accounts/tokens.py does the work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from accounts.access import caller
from accounts.models import ApiToken
from accounts.tokens import token_create, token_revoke, tokens_visible
from frontend.access import Seat, page, seat

NAME_MAX = 100


def _visible(request: HttpRequest, s: Seat) -> QuerySet[ApiToken]:
    """The API's rule (accounts.tokens.tokens_visible): admins see every token of the team, owners everyone's
    but platform admins', members their own."""
    return tokens_visible(viewer=caller(request), tenant=s.tenant, manager=s.manages)


@login_required
def tokens(request: HttpRequest, slug: str) -> HttpResponse:
    s = seat(request, slug)
    error, secret = "", None
    if request.method == "POST":
        name = request.POST.get("name", "").strip()
        if not name:
            error = "Give the token a name, e.g. the machine or script that will use it."
        elif len(name) > NAME_MAX:
            error = f"At most {NAME_MAX} characters."
        else:
            secret = token_create(user=caller(request), tenant=s.tenant, name=name).secret
    return page(
        request, "frontend/tokens.html", {"tokens": _visible(request, s), "error": error, "secret": secret}, s
    )


@login_required
@require_POST
def token_revoke_view(request: HttpRequest, slug: str, token_id: int) -> HttpResponse:
    s = seat(request, slug)
    token = _visible(request, s).filter(pk=token_id).first()
    if token is None:
        raise Http404("No such token.")
    token_revoke(token=token, actor=caller(request))
    messages.success(request, f"Token {token.prefix}… revoked.")
    return redirect("frontend:tokens", slug=s.tenant.slug)
