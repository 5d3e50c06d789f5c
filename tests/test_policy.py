from __future__ import annotations

import pytest

from accounts.models import AuditEvent
from config.errors import PolicyError
from inventory.models import Gpu, Node
from market.models import Guarantee
from market.services.guarantees import guarantee_set
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _node(world: World, name: str, gpus: int) -> Node:
    node = Node.objects.create(name=name, gpu_type=world.h100)
    for i in range(gpus):
        Gpu.objects.create(node=node, index=i, uuid=f"GPU-{name}-{i}")
    return node


def test_guarantees_are_free_until_nodes_exist(world: World) -> None:
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=1000)
    assert Guarantee.objects.get(tenant=world.alpha).gpus == 1000


def test_guarantees_may_not_exceed_cluster_gpus_of_the_type(world: World) -> None:
    _node(world, "n1", 8)
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=5)
    guarantee_set(tenant=world.beta, gpu_type=world.h100, gpus=3)
    with pytest.raises(PolicyError, match="would total 9 GPUs but the cluster has 8") as err:
        guarantee_set(tenant=world.gamma, gpu_type=world.h100, gpus=1)
    assert err.value.field == "gpus"
    guarantee_set(tenant=world.alpha, gpu_type=world.h100, gpus=4)  # lowering one's own is fine
    guarantee_set(tenant=world.gamma, gpu_type=world.h100, gpus=1)
    assert AuditEvent.objects.filter(action="guarantee.set").count() == 4


def test_zero_removes_and_negative_is_refused(world: World) -> None:
    guarantee_set(tenant=world.alpha, gpu_type=world.a100, gpus=2)
    assert guarantee_set(tenant=world.alpha, gpu_type=world.a100, gpus=0) is None
    assert not Guarantee.objects.filter(tenant=world.alpha).exists()
    with pytest.raises(PolicyError):
        guarantee_set(tenant=world.alpha, gpu_type=world.a100, gpus=-1)
