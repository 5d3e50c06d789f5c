"""Reads for single sign-on: the group mapping and who signed in with which groups."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts.models import GroupMapping, OidcIdentity


def group_mappings() -> QuerySet[GroupMapping]:
    return GroupMapping.objects.select_related("tenant").order_by("group", "tenant__slug")


def recent_identities(*, limit: int = 50) -> list[OidcIdentity]:
    """The last people to sign in through the provider, with the groups it named then."""
    return list(OidcIdentity.objects.select_related("user").order_by("-last_login_at", "-id")[:limit])
