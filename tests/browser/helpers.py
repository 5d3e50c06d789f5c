"""What every browser test does: sign in through the login page, and save a full-page screenshot (kept in
docs/screenshots/ where the docs show it)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.conftest import PASSWORD

DOCS_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def login(page: Any, url: str, username: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("main button[type=submit]")
    page.wait_for_load_state()


def shot(page: Any, tmp_path: Path, name: str, *, docs: bool = False) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if docs:
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_SHOTS / f"{name}.png")
    return path
