"""/api/docs/ loads Swagger UI from the installed drf-spectacular-sidecar, never from the internet."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

pytestmark = pytest.mark.django_db


def test_swagger_ui_assets_are_local_files() -> None:
    html = Client().get("/api/docs/").content.decode()
    assert "cdn" not in html.lower() and "unpkg" not in html
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert any("swagger-ui-bundle.js" in a for a in assets), html
    for asset in assets:
        assert finders.find(asset.removeprefix("/static/")), asset
