"""API tokens: create (shown once), authenticate, revoke. Only SHA-256 digests are stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from accounts.audit import audit
from accounts.models import ApiToken, Membership, Tenant, User
from config.dbretry import harmless_writes

TOKEN_PREFIX = "gpm_"
# Writing last_used on every request would turn each read into a write; a minute's precision is plenty.
LAST_USED_RESOLUTION = timedelta(seconds=60)


class TooManyTokens(Exception):
    code = "too_many_tokens"


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    secret: str


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def token_create(
    *, user: User, tenant: Tenant, name: str, actor: User | None = None, secret: str | None = None
) -> IssuedToken:
    """A new token. `secret` is only for the local demo, which keeps its token's secret under var/."""
    # The user's row lock serialises their token creations, so racing requests cannot pass the cap together.
    User.objects.select_for_update(no_key=True).filter(pk=user.pk).first()
    cap = settings.API_TOKENS_PER_USER
    if ApiToken.objects.filter(user=user, tenant=tenant, revoked_at__isnull=True).count() >= cap:
        raise TooManyTokens(
            f"{user.username} already has {cap} live tokens in {tenant.slug}; revoke one first."
        )
    secret = secret or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, tenant=tenant, name=name, prefix=secret[:12], digest=_digest(secret)
    )
    audit(actor=actor or user, tenant=tenant, action="token.create", detail={"token": token.pk, "name": name})
    return IssuedToken(token=token, secret=secret)


def token_authenticate(*, raw: str) -> ApiToken | None:
    """The live token for this secret whose user still belongs to its tenant, or None."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    member = Membership.objects.filter(user=OuterRef("user"), tenant=OuterRef("tenant"))
    token = (
        ApiToken.objects.select_related("user", "tenant")
        .filter(digest=_digest(raw), revoked_at__isnull=True, user__is_active=True, tenant__active=True)
        .annotate(is_member=Exists(member))  # one query per request, membership included
        .first()
    )
    if token is None:
        return None
    if not token.user.is_staff and not token.is_member:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        with harmless_writes():  # a retried request may write it again (config/dbretry.py)
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def tokens_visible(*, viewer: User, tenant: Tenant, manager: bool) -> QuerySet[ApiToken]:
    """The tenant's tokens the viewer may list and revoke: admins all, managers everyone's but platform
    admins' (an admin's token bound to the tenant is not the tenant's to see), members their own."""
    tokens = ApiToken.objects.filter(tenant=tenant).select_related("user")
    if viewer.is_staff:
        return tokens
    if manager:
        return tokens.filter(Q(user__is_staff=False) | Q(user=viewer))
    return tokens.filter(user=viewer)


def tokens_revoke_membership(*, user_id: int, tenant_id: int) -> int:
    """Revoke every live token of a user in a tenant (the membership is gone); returns how many."""
    return ApiToken.objects.filter(user_id=user_id, tenant_id=tenant_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


@transaction.atomic
def token_revoke(*, token: ApiToken, actor: User) -> ApiToken:
    """Revoking twice is harmless: the first revocation time stays."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit(actor=actor, tenant=token.tenant, action="token.revoke", detail={"token": token.pk})
    return token
