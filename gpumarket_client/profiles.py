"""Named profiles (server, team, token) in $XDG_CONFIG_HOME/gpumarket/profiles.json, readable by the user only.

A file of its own rather than a keyring: it works the same on a laptop, a login node and in CI, and mode 0600
in a 0700 directory is what ssh and the cloud command lines do with their credentials too."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from gpumarket_client.errors import ClientError, NotSignedIn

DEFAULT_PROFILE = "default"


@dataclass(frozen=True)
class Profile:
    name: str
    url: str
    token: str
    tenant: str  # the team the token is for (a token is scoped to one team)
    username: str = ""


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpumarket"


def profiles_path() -> Path:
    return config_dir() / "profiles.json"


def _read() -> dict[str, object]:
    path = profiles_path()
    if not path.exists():
        return {"default": None, "profiles": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ClientError(f"{path}: cannot be read ({exc}); fix it or remove it and log in again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise ClientError(f"{path}: not a gpumarket profiles file; remove it and log in again")
    return data


def _write(data: dict[str, object]) -> None:
    import tempfile  # only a login or logout writes: the other commands do not pay for it

    folder = config_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Written whole to a private temporary file and renamed, so a crash never leaves half a file and the
    # token is never readable by others, not even for a moment.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".profiles-", suffix=".json")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2, sort_keys=True)
        os.replace(tmp, profiles_path())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(name: str | None = None) -> Profile:
    """The named profile, else $GPUMARKET_PROFILE, else the default one. $GPUMARKET_URL, $GPUMARKET_TOKEN and
    $GPUMARKET_TENANT together stand in for a profile (CI jobs)."""
    env = {k: os.environ.get(f"GPUMARKET_{k.upper()}", "") for k in ("url", "token", "tenant")}
    if name is None and all(env.values()):
        return Profile("env", env["url"], env["token"], env["tenant"])
    data = _read()
    profiles = data["profiles"]
    assert isinstance(profiles, dict)
    chosen = name or os.environ.get("GPUMARKET_PROFILE") or data.get("default") or DEFAULT_PROFILE
    found = profiles.get(chosen)
    if not isinstance(found, dict):
        known = ", ".join(sorted(profiles)) or "none yet"
        raise NotSignedIn(f"profile {chosen!r}: not signed in (profiles: {known}); run `gpumarket login`")
    return Profile(
        name=str(chosen), **{k: str(found.get(k, "")) for k in ("url", "token", "tenant", "username")}
    )


def save(profile: Profile, *, make_default: bool) -> Path:
    data = _read()
    profiles = data["profiles"]
    assert isinstance(profiles, dict)
    fields = asdict(profile)
    fields.pop("name")
    profiles[profile.name] = fields
    if make_default or not data.get("default"):
        data["default"] = profile.name
    _write(data)
    return profiles_path()


def remove(name: str) -> bool:
    data = _read()
    profiles = data["profiles"]
    assert isinstance(profiles, dict)
    if profiles.pop(name, None) is None:
        return False
    if data.get("default") == name:
        data["default"] = next(iter(sorted(profiles)), None)
    _write(data)
    return True


def listing() -> tuple[str | None, list[Profile]]:
    data = _read()
    profiles = data["profiles"]
    assert isinstance(profiles, dict)
    default = data.get("default")
    return (
        str(default) if default else None,
        [
            Profile(name=n, **{k: str(v.get(k, "")) for k in ("url", "token", "tenant", "username")})
            for n, v in sorted(profiles.items())
            if isinstance(v, dict)
        ],
    )
