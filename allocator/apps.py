from django.apps import AppConfig


class AllocatorConfig(AppConfig):
    """Registers the allocator's management commands; the allocator itself imports no Django."""

    name = "allocator"
    default_auto_field = "django.db.models.BigAutoField"
