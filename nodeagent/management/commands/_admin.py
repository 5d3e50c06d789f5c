"""Shared by the node commands: who acts (the audit log names them)."""

from __future__ import annotations

from django.core.management.base import CommandError

from accounts.models import User


def acting_admin(username: str | None) -> User:
    """The named platform admin, or the first superuser when none is named."""
    qs = User.objects.filter(is_staff=True, is_active=True)
    user = qs.filter(username=username).first() if username else qs.order_by("-is_superuser", "pk").first()
    if user is None:
        raise CommandError(
            f"no active platform admin {username!r}"
            if username
            else "no platform admin exists: create one (manage.py createsuperuser) or name one with --as"
        )
    return user
