from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import PASSWORD, World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_lands_on_the_teams_dashboard(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_selector("[data-field=available]")
    assert page.url.endswith("/t/alpha/")
    assert page.locator("h1").inner_text() == "Alpha"
    assert page.locator("header .role").inner_text() == "owner"
    assert page.locator("[data-field=available]").inner_text() == "0.00"


def test_wrong_password_gives_a_form_error(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("main button[type=submit]")
    assert "correct username and password" in page.locator("[role=alert]").inner_text()
    assert "/login/" in page.url


def test_api_docs_page_renders(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/api/docs/")
    assert page.title()
