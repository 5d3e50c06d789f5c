"""The base fixture: three tenants, each with an owner (manager) and a member, plus a platform admin.

For tenant alpha, bob (a member of beta) is the outsider; every endpoint is tested against him (he must get
404) and against an anonymous caller (401).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Django is imported lazily so the pure suites (allocator, simulator) also run with `-p no:django`.
if TYPE_CHECKING:
    from rest_framework.test import APIClient

    from accounts.models import Tenant, User
    from inventory.models import GpuType

PASSWORD = "correct horse battery staple"


@dataclass
class World:
    alpha: Tenant
    beta: Tenant
    gamma: Tenant
    alice: User  # alpha's owner (manager)
    amy: User  # alpha's member
    bob: User  # beta's owner: the outsider for alpha
    bea: User  # beta's member
    carl: User  # gamma's owner
    cara: User  # gamma's member
    admin: User
    h100: GpuType
    a100: GpuType

    def client(self, user: User | None = None, *, tenant: Tenant | None = None) -> APIClient:
        """An API client with a bearer token for user in tenant (their first tenant by default)."""
        from rest_framework.test import APIClient

        from accounts.models import Tenant
        from accounts.tokens import token_create

        client = APIClient()
        if user is not None:
            tenant = tenant or Tenant.objects.filter(memberships__user=user).first() or self.alpha
            issued = token_create(user=user, tenant=tenant, name="test")
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
        return client

    def nodes(
        self, gpu_type: GpuType, count: int, *, size: int = 8, domain: str = "d0", prefix: str = ""
    ) -> list[Any]:
        """`count` up nodes of `size` GPUs of `gpu_type` in topology `domain` (simulated GPU UUIDs)."""
        from inventory.models import Gpu, Node

        prefix = prefix or f"{gpu_type.name.lower()}-{domain}-"
        start = Node.objects.filter(name__startswith=prefix).count()
        made = []
        for i in range(start, start + count):
            node = Node.objects.create(name=f"{prefix}{i}", gpu_type=gpu_type, topology_domain=domain)
            Gpu.objects.bulk_create(
                Gpu(node=node, index=s, uuid=f"GPU-{node.name}-{s}", model=gpu_type.name, memory_mb=81920)
                for s in range(size)
            )
            made.append(node)
        return made

    def fund(self, tenant: Tenant, credits: int) -> None:
        """Top up `tenant` with whole credits (as the platform admin)."""
        from market.services.ledger import ledger_topup

        ledger_topup(
            tenant=tenant,
            amount=credits * 1_000_000,
            key=f"fund:{tenant.slug}:{credits}:{id(object())}",
            actor=self.admin,
        )


def _user(username: str, *, staff: bool = False) -> User:
    from accounts.models import User

    return User.objects.create_user(
        username=username, password=PASSWORD, is_staff=staff, email=f"{username}@ex.org"
    )


BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/browser/ is marked `browser` (so `make check` can leave them all out).

    The test marked pg_restart restarts the PostgreSQL server it runs on: it runs only when the marker
    expression names it (`-m pg_restart`, as tests/faults/test_private_postgres.py does against a private
    cluster of its own), and shows as deselected otherwise."""
    for item in items:
        if BROWSER_TESTS in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.browser)
    if "pg_restart" in (config.getoption("markexpr") or ""):
        return
    chosen: list[pytest.Item] = []
    left: list[pytest.Item] = []
    for item in items:
        (left if item.get_closest_marker("pg_restart") else chosen).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = chosen


@pytest.fixture(autouse=True)
def _private_cache(request: pytest.FixtureRequest) -> None:
    """Each test gets an empty in-process cache: the shared Redis would carry cached reads (the largest gang
    per GPU type, throttle counts) from one test, or one xdist worker, into another."""
    import uuid

    if not request.config.pluginmanager.hasplugin("django"):  # the pure suites, run with -p no:django
        return
    settings = request.getfixturevalue("settings")
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"test-{uuid.uuid4().hex}",
        }
    }
    # Rate-limit counters go to Redis itself (config/ratelimit.py): give each test its own keys.
    settings.RATE_LIMIT_PREFIX = f"test-rl-{uuid.uuid4().hex}"


@pytest.fixture
def world(db: None, settings: Any) -> World:
    # Seven users hashed with Argon2 cost ~1.4 s per test; the hasher itself is checked in test_accounts_api.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from accounts.models import Membership, Role, Tenant
    from inventory.models import GpuType

    tenants = [
        Tenant.objects.create(name=n.title(), slug=n, weight=w)
        for n, w in [("alpha", 1), ("beta", 2), ("gamma", 3)]
    ]
    people: dict[str, User] = {}
    for tenant, (owner, member) in zip(
        tenants, [("alice", "amy"), ("bob", "bea"), ("carl", "cara")], strict=True
    ):
        people[owner] = _user(owner)
        people[member] = _user(member)
        Membership.objects.create(user=people[owner], tenant=tenant, role=Role.MANAGER)
        Membership.objects.create(user=people[member], tenant=tenant, role=Role.MEMBER)
    alpha, beta, gamma = tenants
    return World(
        alpha,
        beta,
        gamma,
        alice=people["alice"],
        amy=people["amy"],
        bob=people["bob"],
        bea=people["bea"],
        carl=people["carl"],
        cara=people["cara"],
        admin=_user("root", staff=True),
        h100=GpuType.objects.create(name="H100", memory_gb=80, reserve_price=2_000_000, max_price=20_000_000),
        a100=GpuType.objects.create(name="A100", memory_gb=80, reserve_price=1_200_000, max_price=12_000_000),
    )
