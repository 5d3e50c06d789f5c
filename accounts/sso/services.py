"""Writes for single sign-on: the user behind an ID token, team memberships from groups, and the group
mapping the console edits. Keyword-only, atomic, audited."""

from __future__ import annotations

import hashlib
import re

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.audit import audit
from accounts.models import GroupMapping, Membership, OidcIdentity, Role, Tenant, User
from accounts.sso.verify import IdClaims
from config.errors import PolicyError

# Manager outranks member: someone in a team's member group and its manager group is its manager.
_RANK = {Role.MEMBER.value: 1, Role.MANAGER.value: 2}
_USERNAME_CHARS = re.compile(r"[^\w.@+-]")
GROUP_MAX_CHARS = 255


class SignInRefused(Exception):
    """The provider vouches for the person, but this platform will not sign them in (account disabled)."""


def _free_username(claims: IdClaims) -> str:
    """The provider's preferred name where no one has it yet, else that name with a suffix from the subject:
    an existing local account of the same name is never taken over."""
    base = _USERNAME_CHARS.sub("", claims.username or claims.email.split("@")[0])[:120] or "user"
    if not User.objects.filter(username=base).exists():
        return base
    tag = hashlib.sha256(f"{claims.issuer} {claims.subject}".encode()).hexdigest()
    for width in (6, 12, 24):
        candidate = f"{base}-{tag[:width]}"
        if not User.objects.filter(username=candidate).exists():
            return candidate
    raise SignInRefused("no free username for this account")


def _identity(claims: IdClaims) -> OidcIdentity:
    found = (
        OidcIdentity.objects.select_for_update(no_key=True, of=("self",))
        .select_related("user")
        .filter(issuer=claims.issuer, subject=claims.subject)
        .first()
    )
    if found is not None:
        return found
    try:
        with transaction.atomic():  # a savepoint: another first sign-in of the same person may race this one
            user = User.objects.create(
                username=_free_username(claims), email=claims.email, first_name=claims.name[:150]
            )
            user.set_unusable_password()
            user.save(update_fields=["password"])
            identity = OidcIdentity.objects.create(user=user, issuer=claims.issuer, subject=claims.subject)
    except IntegrityError as exc:
        # The other sign-in committed first (we waited on its row): it made the user, so use it.
        winner = OidcIdentity.objects.select_related("user").filter(
            issuer=claims.issuer, subject=claims.subject
        )
        if (found := winner.first()) is not None:
            return found
        raise SignInRefused("another sign-in took this username at the same moment; sign in again") from exc
    audit(
        actor=None,
        tenant=None,
        action="sso.user.create",
        detail={"user": user.username, "issuer": claims.issuer, "subject": claims.subject},
    )
    return identity


def _wanted_roles(groups: tuple[str, ...]) -> dict[int, str]:
    """tenant id -> the highest role any of these groups maps to."""
    wanted: dict[int, str] = {}
    for tenant_id, role in GroupMapping.objects.filter(group__in=groups).values_list("tenant_id", "role"):
        if _RANK[role] > _RANK.get(wanted.get(tenant_id, ""), 0):
            wanted[tenant_id] = role
    return wanted


def memberships_from_groups(*, user: User, groups: tuple[str, ...]) -> list[str]:
    """Make the user's memberships in every team the mapping names follow their groups: added, role changed,
    or removed (their tokens for that team stop working with it). Teams no mapping names are left alone.
    Returns one line per change."""
    wanted = _wanted_roles(groups)
    managed = set(GroupMapping.objects.values_list("tenant_id", flat=True))
    current = {m.tenant_id: m for m in Membership.objects.filter(user=user, tenant_id__in=managed)}
    slugs = dict(Tenant.objects.filter(pk__in=managed).values_list("pk", "slug"))
    changes = []
    for tenant_id, role in sorted(wanted.items()):
        had = current.get(tenant_id)
        if had is not None and had.role == role:
            continue
        Membership.objects.update_or_create(user=user, tenant_id=tenant_id, defaults={"role": role})
        action = "sso.membership.set"
        detail = {
            "user": user.username,
            "role": role,
            "was": had.role if had else None,
            "groups": list(groups),
        }
        audit(actor=None, tenant=Tenant(pk=tenant_id), action=action, detail=detail)
        changes.append(f"{slugs[tenant_id]}: {role}")
    for tenant_id, membership in sorted(current.items()):
        if tenant_id not in wanted:
            membership.delete()
            detail = {"user": user.username, "was": membership.role, "groups": list(groups)}
            audit(actor=None, tenant=Tenant(pk=tenant_id), action="sso.membership.remove", detail=detail)
            changes.append(f"{slugs[tenant_id]}: removed")
    return changes


@transaction.atomic
def sso_sign_in(*, claims: IdClaims) -> User:
    """The user an accepted ID token speaks for, matched by issuer and subject (created at the first sign-in),
    with their team memberships brought in line with the token's groups."""
    identity = _identity(claims)
    user = identity.user
    if not user.is_active:
        raise SignInRefused(f"the account {user.username} is disabled here")
    memberships_from_groups(user=user, groups=claims.groups)
    identity.groups = list(claims.groups)
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["groups", "last_login_at"])
    if claims.email and user.email != claims.email:
        user.email = claims.email
        user.save(update_fields=["email"])
    return user


@transaction.atomic
def group_mapping_create(*, group: str, tenant: Tenant, role: str, actor: User) -> GroupMapping:
    group = group.strip()
    if not group:
        raise PolicyError("group", "name the provider's group")
    if len(group) > GROUP_MAX_CHARS:
        raise PolicyError("group", f"at most {GROUP_MAX_CHARS} characters")
    if role not in Role.values:
        raise PolicyError("role", f"must be one of {', '.join(Role.values)}")
    try:
        with transaction.atomic():
            mapping = GroupMapping.objects.create(group=group, tenant=tenant, role=role)
    except IntegrityError as exc:
        raise PolicyError("group", f"{group!r} already maps to {tenant.slug}; delete that first") from exc
    audit(actor=actor, tenant=tenant, action="sso.mapping.create", detail={"group": group, "role": role})
    return mapping


@transaction.atomic
def group_mapping_delete(*, mapping: GroupMapping, actor: User) -> None:
    """Existing memberships stay until each person's next sign-in, when the mapping no longer grants them."""
    audit(
        actor=actor,
        tenant=mapping.tenant,
        action="sso.mapping.delete",
        detail={"group": mapping.group, "role": mapping.role},
    )
    mapping.delete()
