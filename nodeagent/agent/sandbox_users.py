"""Each tenant's jobs run as that tenant's own Unix user (docs/agent.md §The sandbox).

The user is `gm-<slug>` with a uid (and a group of the same number) from the range the agent is given,
made with useradd on the tenant's first job on this node. The passwd database is the record: the same tenant
gets the same uid on every later job and after a restart, so its checkpoint directories on shared storage
are its own in the file system too, and two tenants' jobs never share a uid.
"""

from __future__ import annotations

import grp
import hashlib
import pwd
import re
import subprocess

SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
NAME_MAX = 32  # useradd's limit on a user name


class NoTenantUser(Exception):
    """The tenant's user cannot be had (bad slug, range full, useradd failed); the bind is refused."""


def user_name(slug: str) -> str:
    if not SLUG.match(slug):
        raise NoTenantUser(f"tenant slug {slug!r} is not a-z, 0-9, '-' and '_'")
    name = f"gm-{slug}"
    if len(name) > NAME_MAX:  # cut, and kept apart from another long slug with the same start by a hash
        name = f"{name[: NAME_MAX - 9]}-{hashlib.sha256(slug.encode()).hexdigest()[:8]}"
    return name


def tenant_user(slug: str, uids: range) -> tuple[int, int]:
    """(uid, gid) of the tenant's user, made on first use with the lowest free uid of the range."""
    name = user_name(slug)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return _make(name, uids)
    if entry.pw_uid not in uids:
        raise NoTenantUser(f"user {name} exists with uid {entry.pw_uid}, outside the tenants' range")
    return entry.pw_uid, entry.pw_gid


def _make(name: str, uids: range) -> tuple[int, int]:
    """Made with the lowest free uid. Two agents on one machine (the demo) may race for it: the loser finds
    the user made by the other, or takes the next uid."""
    error = ""
    for _attempt in range(3):
        taken = {e.pw_uid for e in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
        free = next((u for u in uids if u not in taken), None)
        if free is None:
            raise NoTenantUser(f"no free uid left in {uids.start}-{uids.stop - 1} for {name}")
        error = _add(name, free)
        if not error:
            return free, free
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid in uids:
            return entry.pw_uid, entry.pw_gid
    raise NoTenantUser(error)


def _add(name: str, free: int) -> str:
    """groupadd and useradd; "" when both succeed, else what failed (a half-made group is removed)."""
    steps = [
        ["groupadd", "--gid", str(free), name],
        ["useradd", "--uid", str(free), "--gid", str(free), "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", name],
    ]  # fmt: skip
    for i, step in enumerate(steps):
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            if i:
                subprocess.run(["groupdel", name], capture_output=True, check=False)
            return f"{step[0]} {name}: {done.stderr.strip() or done.returncode}"
    return ""
