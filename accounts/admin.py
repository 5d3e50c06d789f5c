"""The admin console's tenancy pages. Policy changes go through services so they are checked and audited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest

from accounts.models import ApiToken, AuditEvent, Membership, Tenant, User

admin.site.site_header = "gpumarket admin console"


class MembershipInline(admin.TabularInline):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    model = Membership
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    list_display = ["slug", "name", "weight", "active", "trusted", "created_at"]
    list_filter = ["active", "trusted"]  # trusted: may run on nodes without the job sandbox (docs/agent.md)
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    list_display = ["prefix", "name", "user", "tenant", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["user", "tenant", "name", "prefix", "digest", "created_at", "last_used_at"]
    list_filter = ["tenant"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a secret can only be shown once, which the API does


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    list_display = ["created_at", "action", "tenant", "actor"]
    list_filter = ["action", "tenant"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


admin.site.register(User, UserAdmin)
