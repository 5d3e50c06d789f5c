"""Rules that must hold however a row changes (API, admin console, shell)."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete
from django.dispatch import receiver

from accounts.models import Membership
from accounts.tokens import tokens_revoke_membership


@receiver(post_delete, sender=Membership, dispatch_uid="membership-removed-revokes-tokens")
def _membership_removed(sender: type[Membership], instance: Membership, **kwargs: Any) -> None:
    """A removed member's tokens in that tenant are revoked for good: adding the user back later must not
    bring them back to life (token_authenticate alone only checks membership at request time)."""
    tokens_revoke_membership(user_id=instance.user_id, tenant_id=instance.tenant_id)
