from django.apps import AppConfig


class MarketConfig(AppConfig):
    name = "market"
    default_auto_field = "django.db.models.BigAutoField"
