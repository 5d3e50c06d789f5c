"""Django admin for the inventory (/admin/inventory/...): GPU types are edited through their service; nodes and
GPUs are read-only here, since registration, heartbeats, drain and retire change them (nodeagent's services)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from config.admin import ReadOnlyAdmin
from config.errors import PolicyError
from inventory.models import Gpu, GpuType, Node
from inventory.services.gpu_types import gpu_type_save


class GpuTypeForm(forms.ModelForm):  # type: ignore[type-arg]  # django-stubs make it generic in its model; left unparametrised
    class Meta:
        model = GpuType
        fields = ["name", "memory_gb", "reserve_price", "max_price"]


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # django-stubs make it generic in its model; left unparametrised
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


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "gpu_type", "topology_domain", "state", "last_heartbeat", "agent_version"]
    list_filter = ["state", "gpu_type"]
    search_fields = ["name"]


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    list_display = ["uuid", "node", "index", "model", "healthy", "absent"]
    list_filter = ["healthy", "absent"]
    list_select_related = ["node"]
    search_fields = ["uuid", "node__name"]
