"""Django admin for the inventory (/admin/inventory/...): nodes and GPUs are read-only here, since registration,
heartbeats, drain and retire change them (nodeagent's services). GPU types are registered from market.admin:
their price bounds are market policy, saved as a policy version (their URL stays /admin/inventory/gputype/)."""

from __future__ import annotations

from django.contrib import admin

from config.admin import ReadOnlyAdmin
from inventory.models import Gpu, Node


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
