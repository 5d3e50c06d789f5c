"""Django admin: the ledger is visible but read-only (it changes only through market.services.ledger)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from market.models import Account, Hold, JournalEntry, Posting


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class PostingInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Posting
    fields = ["account", "amount"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "kind", "balance"]
    list_filter = ["kind"]
    search_fields = ["tenant__slug"]


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "kind", "tenant", "amount", "key", "actor"]
    list_filter = ["kind"]
    search_fields = ["key", "tenant__slug", "memo"]
    date_hierarchy = "created_at"
    inlines = [PostingInline]


@admin.register(Hold)
class HoldAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "key", "tenant", "amount", "state", "charged", "settled_at"]
    list_filter = ["state"]
    search_fields = ["key", "tenant__slug"]


@admin.register(Posting)
class PostingAdmin(ReadOnlyAdmin):
    list_display = ["id", "entry", "account", "amount"]
    list_select_related = ["entry", "account__tenant"]
