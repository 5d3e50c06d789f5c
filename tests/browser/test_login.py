from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import PASSWORD, World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_shows_the_teams_and_their_balance(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/")
    assert "/login/" in page.url
    page.fill("#id_username", "alice")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("table.data")
    assert page.locator("h1").inner_text() == "Your teams"
    row = page.locator("table.data tbody tr")
    assert row.count() == 1
    assert "Alpha" in row.inner_text() and "manager" in row.inner_text()


def test_wrong_password_gives_a_form_error(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert "correct username and password" in page.locator("[role=alert]").inner_text()
    assert "/login/" in page.url


def test_api_docs_page_renders(world: World, live_server: Any, page: Any) -> None:
    page.goto(f"{live_server.url}/api/docs/")
    assert page.title()
