from django.apps import AppConfig


class NodeagentConfig(AppConfig):
    name = "nodeagent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from nodeagent.api import auth  # noqa: F401  (registers the agent scheme with drf-spectacular)
