from django.apps import AppConfig


class NodeagentConfig(AppConfig):
    name = "nodeagent"
    default_auto_field = "django.db.models.BigAutoField"
