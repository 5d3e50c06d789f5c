"""Django admin: the ledger is visible but read-only (it changes only through market.services.ledger)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from accounts.access import caller
from config.admin import ReadOnlyAdmin
from config.errors import PolicyError
from inventory.models import GpuType
from market.models import Account, Guarantee, Hold, JournalEntry, Posting
from market.services.gpu_type_prices import gpu_type_policy_save
from market.services.guarantees import guarantee_check, guarantee_set


class PostingInline(admin.TabularInline):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    model = Posting
    readonly_fields = fields = ("account", "amount")
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


# Saving a guarantee goes through market.services.guarantees, which keeps a type's guarantees within the
# cluster's GPUs of it (/admin/market/guarantee/).
class GuaranteeForm(forms.ModelForm):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    class Meta:
        model = Guarantee
        fields = ["tenant", "gpu_type", "gpus"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("tenant") and data.get("gpu_type") and data.get("gpus") is not None:
            try:
                guarantee_check(tenant=data["tenant"], gpu_type=data["gpu_type"], gpus=data["gpus"])
            except PolicyError as exc:
                self.add_error(exc.field, exc.message)
        return data


@admin.register(Guarantee)
class GuaranteeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    form = GuaranteeForm
    list_display = ["tenant", "gpu_type", "gpus"]
    list_filter = ["gpu_type"]

    def save_model(self, request: HttpRequest, obj: Guarantee, form: Any, change: bool) -> None:
        guarantee_set(tenant=obj.tenant, gpu_type=obj.gpu_type, gpus=obj.gpus, actor=caller(request))


class GpuTypeForm(forms.ModelForm):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    class Meta:
        model = GpuType
        fields = ["name", "memory_gb", "reserve_price", "max_price"]


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    """Prices are micro-credits per GPU-hour; saving goes through the service so it is checked, audited and recorded
    as a policy version."""

    form = GpuTypeForm
    list_display = ["name", "memory_gb", "reserve_price", "max_price"]

    def save_model(self, request: Any, obj: GpuType, form: Any, change: bool) -> None:
        try:
            gpu_type_policy_save(
                name=obj.name,
                memory_gb=obj.memory_gb,
                reserve_price=obj.reserve_price,
                max_price=obj.max_price,
                actor=caller(request),
            )
        except PolicyError as exc:
            self.message_user(request, f"{exc.field}: {exc.message}", level="error")
