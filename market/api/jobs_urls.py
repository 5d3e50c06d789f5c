"""Job and bid routes (mounted under /api/v1/)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
