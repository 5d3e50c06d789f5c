"""Django admin pieces every app's admin uses."""

from __future__ import annotations

from typing import Any

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]  # generic only in django-stubs; the class takes no subscript at runtime
    """A page to look at rows that change only through their services (the ledger, the agents' reports)."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
