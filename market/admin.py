"""Django admin: the ledger is visible but read-only (it changes only through market.services.ledger)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from config.errors import PolicyError
from market.models import Account, GpuType, Hold, JournalEntry, Posting
from market.services.gpu_types import gpu_type_save


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


class GpuTypeForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = GpuType
        fields = ["name", "memory_gb", "reserve_price", "max_price"]


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Prices are micro-credits per GPU-hour; saving goes through the service so it is checked and audited."""

    form = GpuTypeForm
    list_display = ["name", "memory_gb", "reserve_price", "max_price"]

    def save_model(self, request: Any, obj: GpuType, form: Any, change: bool) -> None:
        try:
            gpu_type_save(
                name=obj.name,
                memory_gb=obj.memory_gb,
                reserve_price=obj.reserve_price,
                max_price=obj.max_price,
                actor=request.user,
            )
        except PolicyError as exc:
            self.message_user(request, f"{exc.field}: {exc.message}", level="error")
