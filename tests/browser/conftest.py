"""Playwright driving Debian's chromium (never a downloaded browser) against pytest-django's live server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The Celery worker process the browser tests clear rounds with: the integration tests' own fixtures.
from tests.integration.conftest import worker_env, worker_queue  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


# Per module, not per session: while Playwright's sync API is open its event loop counts as running in the
# main thread, and every later test in the same process (pytest-xdist mixes them) that reaches an async view
# through Django's test client fails ("You cannot use AsyncToSync in the same thread as an async event loop").
# A module's tests share one browser; a chromium launch costs about a second per module.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail("browser tests need Debian's chromium at /usr/bin/chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop; Django refuses ORM calls from a thread with one unless told.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()
