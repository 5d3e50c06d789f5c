from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def test_openapi_schema_generates_without_warnings(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    # --fail-on-warn turns drf-spectacular's guesses (untyped views, unknown fields) into failures.
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path) + "/schema.yml")


def test_schema_and_docs_are_served(client: Client) -> None:
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


def test_unknown_api_path_is_json_404(client: Client) -> None:
    resp = client.get("/api/v1/nope")
    assert resp.status_code == 404
    assert resp.json()["error"] == "not_found"
