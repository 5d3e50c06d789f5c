"""`gpumarket-client` alone (clients/python/pyproject.toml): the wheel a laptop installs holds only
gpumarket_client and oidc_device, and installed in an empty virtual environment it brings click, rich, httpx and PyYAML and no
server package, and runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# slow: builds a wheel and a virtual environment and installs into it (half a minute).
@pytest.mark.slow
def test_the_client_wheel_installs_alone_and_runs(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    leftovers = [ROOT / "gpumarket_client.egg-info", ROOT / "clients" / "python" / "build"]
    existed = [p.exists() for p in leftovers]
    try:
        built = subprocess.run(
            [*pip, "wheel", "--no-deps", "-w", str(tmp_path), str(ROOT / "clients" / "python")],
            capture_output=True,
            text=True,
        )
    finally:  # setuptools writes these beside the sources: leave the checkout as it was
        for path, was in zip(leftovers, existed, strict=True):
            if not was:
                shutil.rmtree(path, ignore_errors=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("gpumarket_client-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # gpumarket_client and the device-flow client it signs in with (oidc_device, httpx only; docs/sso.md).
    packages = {"gpumarket_client", "oidc_device", wheel.name.split("-py3")[0] + ".dist-info"}
    assert {n.split("/")[0] for n in names} == packages
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "laptop")], check=True)
    python = tmp_path / "laptop" / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    probe = "import importlib.util as u; print([m for m in ('django', 'celery', 'numpy', 'rest_framework') if u.find_spec(m)])"
    assert subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"
    helped = subprocess.run(
        [str(tmp_path / "laptop" / "bin" / "gpumarket"), "--help"], capture_output=True, text=True
    )
    assert helped.returncode == 0 and "submit" in helped.stdout


def test_the_client_pins_what_the_project_pins() -> None:
    """Two lists of the same four pins: a bump in one must be a bump in both."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    client = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    assert set(client["dependencies"]) <= set(project)
    assert {d.split("==")[0] for d in client["dependencies"]} == {"click", "rich", "httpx", "pyyaml"}
