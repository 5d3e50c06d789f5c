from django.apps import AppConfig


class WhatifConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "whatif"
    verbose_name = "What-if replays"
