"""Small typed readers for settings from the environment.

Each one fails loudly (ImproperlyConfigured naming the variable) on a value it cannot read, instead of
quietly falling back: `DEBUG=yes please` is a mistake to report, not a False. Secrets may also come from
`NAME_FILE`, the path of a file holding the value (Docker and systemd credentials work that way).

A checkout's `.env` (written by `make run`) may fill in variables the environment leaves unset
(`read_dotenv`); a variable that is set, even to "", always wins, so a deployment's own settings are never
overridden by a file lying about.
"""

from __future__ import annotations

import os
import re
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
# `NAME=value`, optionally after `export `; the value optionally in single or double quotes.
_DOTENV_LINE = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)")
# Names the path of the `.env` to read; set to "" the settings read none (the test suite does: a developer's
# `.env` must not change what the tests see).
ENV_FILE_VARIABLE = "GPUMARKET_ENV_FILE"
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """The raw value of NAME, or of the file named by NAME_FILE, or the default."""
    value = os.environ.get(name)
    if value is not None:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r}: cannot read it ({exc.strerror})") from exc
    return default


def env_bool(name: str, default: bool = False) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number") from exc
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number}: must be at least {minimum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_port_range(name: str, default: tuple[int, int]) -> tuple[int, int]:
    """`LOW-HIGH`, two TCP ports (1024 to 65535, LOW <= HIGH), inclusive."""
    value = env_str(name)
    if value is None:
        return default
    low, sep, high = value.strip().partition("-")
    try:
        ports = (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r}: expected LOW-HIGH, e.g. 29500-29999") from exc
    if not 1024 <= ports[0] <= ports[1] <= 65535:
        raise ImproperlyConfigured(f"{name}={value!r}: ports must satisfy 1024 <= LOW <= HIGH <= 65535")
    return ports


def env_networks(name: str, default: list[str]) -> list[IPv4Network | IPv6Network]:
    """Comma-separated addresses or CIDR networks (`10.0.0.0/8,192.0.2.7`)."""
    networks = []
    for item in env_list(name, default):
        try:
            networks.append(ip_network(item, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or network") from exc
    return networks


def local_secret_key(path: Path) -> str:
    """A key generated once and kept under var/, so local sessions survive restarts without configuration."""
    if path.exists():
        return path.read_text().strip()
    from django.core.management.utils import get_random_secret_key

    path.parent.mkdir(parents=True, exist_ok=True)
    key = get_random_secret_key()
    path.write_text(key)
    path.chmod(0o600)
    return key


def dotenv_path(default: Path) -> Path | None:
    """The `.env` to read: GPUMARKET_ENV_FILE's path, none if that is set to "", else `default`."""
    override = os.environ.get(ENV_FILE_VARIABLE)
    if override is None:
        return default
    return Path(override) if override.strip() else None


def read_dotenv(path: Path | None) -> list[str]:
    """Set the variables `path` names that the environment does not: `NAME=value` lines, `#` comments and
    blank lines (values may be quoted; nothing is expanded). A missing file is no file; a line that is none
    of these stops the process naming the file and line. Returns the names it set."""
    if path is None or not path.is_file():
        return []
    filled = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _DOTENV_LINE.fullmatch(line)
        if match is None:
            raise ImproperlyConfigured(f"{path}:{number}: expected NAME=value, got {line[:40]!r}")
        name, value = match.group(1), match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if name not in os.environ:  # the environment wins, even a variable set to ""
            os.environ[name] = value
            filled.append(name)
    return filled


_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


def check_oidc_settings(*, issuer: str, client_id: str, cli_client_id: str, local_login: bool) -> None:
    """Single sign-on settings that cannot work together stop the process, naming the variable: an issuer
    without a client, a plain-HTTP issuer off this machine (its keys could be swapped on the way), or local
    accounts off with no provider (nobody could sign in)."""
    from urllib.parse import urlsplit

    if not issuer:
        if not local_login:
            raise ImproperlyConfigured("LOCAL_LOGIN=0 needs OIDC_ISSUER: otherwise nobody can sign in")
        return
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ImproperlyConfigured(f"OIDC_ISSUER={issuer!r}: expected an https:// URL")
    if parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0] not in _LOOPBACK_HOSTS:
        raise ImproperlyConfigured(f"OIDC_ISSUER={issuer!r}: must be https:// (plain http only on loopback)")
    if not client_id and not cli_client_id:
        raise ImproperlyConfigured("OIDC_ISSUER is set: set OIDC_CLIENT_ID (and OIDC_CLIENT_SECRET)")
