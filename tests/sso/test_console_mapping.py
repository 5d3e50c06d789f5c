"""The console's group mapping page: admins only, form errors for bad input, changes audited, and the
mapping applied by the sign-in service (add, role, remove; teams no mapping names left alone)."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import AuditEvent, GroupMapping, Membership, Role
from accounts.sso.services import memberships_from_groups

pytestmark = pytest.mark.django_db


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def test_only_admins_see_the_page(world):
    assert _client(world.alice).get("/console/sso/").status_code in (403, 404)
    assert _client(world.admin).get("/console/sso/").status_code == 200


def test_admin_adds_and_deletes_a_mapping_audited(world):
    client = _client(world.admin)
    response = client.post("/console/sso/", {"group": " ml-team ", "tenant": "alpha", "role": "manager"})
    assert response.status_code == 302
    mapping = GroupMapping.objects.get()
    assert (mapping.group, mapping.tenant, mapping.role) == ("ml-team", world.alpha, Role.MANAGER)
    assert "ml-team" in client.get("/console/sso/").content.decode()
    assert client.post(f"/console/sso/{mapping.pk}/delete/").status_code == 302
    assert not GroupMapping.objects.exists()
    actions = list(
        AuditEvent.objects.filter(action__startswith="sso.mapping").values_list("action", flat=True)
    )
    assert sorted(actions) == ["sso.mapping.create", "sso.mapping.delete"]


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ({"group": "", "tenant": "alpha", "role": "member"}, "group", "required"),
        ({"group": "g" * 256, "tenant": "alpha", "role": "member"}, "group", "at most 255"),
        ({"group": "ml", "tenant": "nope", "role": "member"}, "tenant", "valid choice"),
        ({"group": "ml", "tenant": "alpha", "role": "boss"}, "role", "valid choice"),
    ],
)
def test_bad_input_is_a_form_error(world, form, field, message):
    response = _client(world.admin).post("/console/sso/", form)
    assert response.status_code == 400
    page = response.content.decode()
    assert f'id="id_{field}-error"' in page and message in page
    assert not GroupMapping.objects.exists()


def test_a_duplicate_mapping_is_a_form_error(world):
    GroupMapping.objects.create(group="ml", tenant=world.alpha, role=Role.MEMBER)
    response = _client(world.admin).post(
        "/console/sso/", {"group": "ml", "tenant": "alpha", "role": "manager"}
    )
    assert response.status_code == 400
    assert "already maps to alpha" in response.content.decode()


def test_deleting_someone_elses_mapping_needs_an_admin_and_a_post(world):
    mapping = GroupMapping.objects.create(group="ml", tenant=world.alpha, role=Role.MEMBER)
    assert _client(world.alice).post(f"/console/sso/{mapping.pk}/delete/").status_code in (403, 404)
    assert _client(world.admin).get(f"/console/sso/{mapping.pk}/delete/").status_code == 405
    assert _client(world.admin).post("/console/sso/999999/delete/").status_code == 404
    assert GroupMapping.objects.filter(pk=mapping.pk).exists()


def test_groups_decide_membership_in_mapped_teams_only(world):
    GroupMapping.objects.create(group="ml", tenant=world.alpha, role=Role.MEMBER)
    GroupMapping.objects.create(group="ml-leads", tenant=world.alpha, role=Role.MANAGER)
    GroupMapping.objects.create(group="bio", tenant=world.beta, role=Role.MEMBER)
    user = world.cara  # a member of gamma by hand; gamma is named by no mapping
    assert memberships_from_groups(user=user, groups=("ml", "ml-leads")) == ["alpha: manager"]
    assert Membership.objects.get(user=user, tenant=world.alpha).role == Role.MANAGER
    assert memberships_from_groups(user=user, groups=("ml", "ml-leads")) == []  # nothing changes twice
    assert memberships_from_groups(user=user, groups=("ml", "bio")) == ["alpha: member", "beta: member"]
    assert memberships_from_groups(user=user, groups=()) == ["alpha: removed", "beta: removed"]
    assert list(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True)) == ["gamma"]
