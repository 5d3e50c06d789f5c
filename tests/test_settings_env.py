from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_int, env_list, env_str


@pytest.mark.parametrize(
    ("raw", "want"), [("1", True), ("yes", True), ("On", True), ("0", False), ("false", False)]
)
def test_env_bool_reads_plain_values(monkeypatch: pytest.MonkeyPatch, raw: str, want: bool) -> None:
    monkeypatch.setenv("X_FLAG", raw)
    assert env_bool("X_FLAG") is want


def test_env_bool_rejects_junk_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", "yes please")
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG")


def test_env_int_rejects_junk_and_small_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_N", "ten")
    with pytest.raises(ImproperlyConfigured, match="X_N='ten'"):
        env_int("X_N", 1)
    monkeypatch.setenv("X_N", "3")
    with pytest.raises(ImproperlyConfigured, match="at least 5"):
        env_int("X_N", 10, minimum=5)
    assert env_int("X_UNSET", 7) == 7


def test_secret_from_file(monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "s"  # type: ignore[operator]
    path.write_text("s3cret\n")
    monkeypatch.delenv("X_SECRET", raising=False)
    monkeypatch.setenv("X_SECRET_FILE", str(path))
    assert env_str("X_SECRET") == "s3cret"
    monkeypatch.setenv("X_SECRET_FILE", str(path) + ".missing")
    with pytest.raises(ImproperlyConfigured, match="X_SECRET_FILE"):
        env_str("X_SECRET")


def test_env_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_HOSTS", "a.example, b.example,,")
    assert env_list("X_HOSTS", []) == ["a.example", "b.example"]


def test_settings_refuse_missing_secret_key_without_debug(tmp_path: pytest.TempPathFactory) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    env["GPUMARKET_VAR_DIR"] = str(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in proc.stderr
