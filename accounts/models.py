"""Tenants, users, memberships and roles, API tokens, tenant policy and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """A person. Platform admins are staff users; tenant roles come from memberships."""


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=50, unique=True)
    weight = models.PositiveIntegerField(
        default=1, help_text="Share of the excess relative to other tenants."
    )
    active = models.BooleanField(default=True)
    # An admin's mark: its jobs may run on nodes whose agent cannot sandbox them (docs/agent.md §The sandbox).
    trusted = models.BooleanField(
        default=False, help_text="May run on nodes without the job sandbox (an admin's decision)."
    )
    guardrail = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Most one round may hold for this tenant, micro-credits (empty: none).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=models.Q(weight__gte=1), name="tenant_weight_positive")
        ]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    MANAGER = "manager", "Manager"


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class ApiToken(models.Model):
    """A bearer token for one user acting in one tenant. Only its SHA-256 is stored.

    The secret is 256 random bits, so a fast hash is enough: nothing can be brute-forced, and the lookup by
    digest stays one indexed query per request.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class AuditEvent(models.Model):
    """One row per change made through a service: who, in which tenant, what, with what figures."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    tenant = models.ForeignKey(Tenant, null=True, on_delete=models.SET_NULL, related_name="audit_events")
    action = models.CharField(max_length=64)
    detail = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class OidcIdentity(models.Model):
    """A person's account at the organisation's identity provider: the provider's issuer and its stable
    subject identifier, never the e-mail address (an address can be reassigned; `sub` never is)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The groups the provider named at the last sign-in, to show why someone is or is not in a team.
    groups = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class GroupMapping(models.Model):
    """A provider group that makes its members members of a team, with a role. A team named by any mapping
    is the mapping's: at each sign-in its membership follows the groups (docs/sso.md)."""

    group = models.CharField(max_length=255)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="group_mappings")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "tenant__slug"]
        constraints = [models.UniqueConstraint(fields=["group", "tenant"], name="group_mapping_unique")]

    def __str__(self) -> str:
        return f"{self.group} -> {self.tenant} ({self.role})"
