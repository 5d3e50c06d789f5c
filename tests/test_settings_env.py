from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import ENV_FILE_VARIABLE, dotenv_path, env_bool, env_int, env_list, env_str, read_dotenv


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


def test_secret_from_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "s"
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


# The checkout's .env (`make run` writes it): it fills only what the environment leaves unset.


def _setup_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup()"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def _env_without_debug(tmp_path: Path, env_file: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "TLS"}}
    env["GPUMARKET_VAR_DIR"] = str(tmp_path / "var")
    env[ENV_FILE_VARIABLE] = str(env_file) if env_file else ""
    return env


def test_read_dotenv_fills_only_unset_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(
        "# made by make run\n\nX_DOT_A=1\nexport X_DOT_B = 'two words'\nX_DOT_SET=from-file\n"
        'X_DOT_EMPTY_SET=from-file\nX_DOT_QUOTED="a # b"\nX_DOT_BLANK=\n'
    )
    for name in ("X_DOT_A", "X_DOT_B", "X_DOT_QUOTED", "X_DOT_BLANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("X_DOT_SET", "from-environment")
    monkeypatch.setenv("X_DOT_EMPTY_SET", "")  # set, though empty: it wins too
    filled = read_dotenv(path)
    assert sorted(filled) == ["X_DOT_A", "X_DOT_B", "X_DOT_BLANK", "X_DOT_QUOTED"]
    assert os.environ["X_DOT_A"] == "1"
    assert os.environ["X_DOT_B"] == "two words"
    assert os.environ["X_DOT_QUOTED"] == "a # b"
    assert os.environ["X_DOT_BLANK"] == ""
    assert os.environ["X_DOT_SET"] == "from-environment"
    assert os.environ["X_DOT_EMPTY_SET"] == ""
    for name in filled:
        monkeypatch.delenv(name)


def test_read_dotenv_without_a_file_does_nothing(tmp_path: Path) -> None:
    assert read_dotenv(tmp_path / "missing") == []
    assert read_dotenv(None) == []


def test_read_dotenv_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("X_DOT_OK=1\nthis is not a setting\n")
    with pytest.raises(ImproperlyConfigured, match=r"\.env:2: expected NAME=value"):
        read_dotenv(path)


def test_dotenv_path_default_override_and_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_FILE_VARIABLE, raising=False)
    assert dotenv_path(tmp_path / ".env") == tmp_path / ".env"
    monkeypatch.setenv(ENV_FILE_VARIABLE, str(tmp_path / "other.env"))
    assert dotenv_path(tmp_path / ".env") == tmp_path / "other.env"
    monkeypatch.setenv(ENV_FILE_VARIABLE, "")
    assert dotenv_path(tmp_path / ".env") is None


def test_the_suite_never_reads_a_developers_env_file() -> None:
    # pyproject's pytest env turns the file off, so a `.env` left by `make run` (DEBUG=1) changes no test.
    assert os.environ[ENV_FILE_VARIABLE] == ""
    assert dotenv_path(Path("/anywhere/.env")) is None


def test_settings_take_debug_from_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=1\nTLS=0\n")  # what `make run` writes, less the local database
    proc = _setup_settings(_env_without_debug(tmp_path, env_file))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_settings_environment_wins_over_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("DEBUG=1\n")
    env = _env_without_debug(tmp_path, env_file) | {"DEBUG": "0"}
    proc = _setup_settings(env)
    assert proc.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in proc.stderr


def test_settings_without_an_env_file_behave_as_before(tmp_path: Path) -> None:
    proc = _setup_settings(_env_without_debug(tmp_path, tmp_path / "no-such.env"))
    assert proc.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in proc.stderr


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ({"DEBUG": "1"}, "django.core.mail.backends.console.EmailBackend"),
        ({"SECRET_KEY": "x"}, "django.core.mail.backends.smtp.EmailBackend"),
        (
            {"SECRET_KEY": "x", "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend"},
            "django.core.mail.backends.locmem.EmailBackend",
        ),
    ],
)
def test_email_backend_from_the_environment(tmp_path: Path, extra: dict[str, str], want: str) -> None:
    """Spend alerts' mail (docs/alerts.md): console with DEBUG (`make run`), SMTP in production, or as set."""
    env = _env_without_debug(tmp_path, None) | extra
    if "EMAIL_BACKEND" not in extra:
        env.pop("EMAIL_BACKEND", None)
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; django.setup(); "
        "from django.conf import settings; print(settings.EMAIL_BACKEND)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == want


def test_env_port_range_reads_low_high_and_refuses_junk(monkeypatch: pytest.MonkeyPatch) -> None:
    from config.env import env_port_range

    assert env_port_range("X_PORTS", (29500, 29999)) == (29500, 29999)
    monkeypatch.setenv("X_PORTS", "31000-31099")
    assert env_port_range("X_PORTS", (1, 2)) == (31000, 31099)
    monkeypatch.setenv("X_PORTS", "31000")
    assert env_port_range("X_PORTS", (1, 2)) == (31000, 31000)
    for junk in ("a-b", "2000-1999", "80-90", "30000-70000", "1-2-3"):
        monkeypatch.setenv("X_PORTS", junk)
        with pytest.raises(ImproperlyConfigured, match="X_PORTS"):
            env_port_range("X_PORTS", (1, 2))
