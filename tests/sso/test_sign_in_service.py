"""The sign-in service: one user per issuer and subject, even when first sign-ins race (real threads on
PostgreSQL); never matched by e-mail or username."""

from __future__ import annotations

import pytest

from accounts.models import OidcIdentity, User
from accounts.sso.services import sso_sign_in
from accounts.sso.verify import IdClaims
from tests.concurrency import run_together


def _claims(sub: str, **over: object) -> IdClaims:
    base = {
        "issuer": "https://idp.example.org",
        "subject": sub,
        "username": "sam",
        "email": "sam@example.org",
        "name": "Sam",
        "groups": (),
        "expires_at": 0,
        "audience": "web",
    }
    return IdClaims(**(base | over))  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_racing_first_sign_ins_make_one_user():
    results = run_together(lambda i: sso_sign_in(claims=_claims("s-1")).pk, n=8)
    assert all(isinstance(r, int) for r in results), results
    assert len(set(results)) == 1
    assert OidcIdentity.objects.filter(subject="s-1").count() == 1


@pytest.mark.django_db
def test_same_email_or_name_at_another_subject_is_another_user():
    first = sso_sign_in(claims=_claims("s-1"))
    second = sso_sign_in(claims=_claims("s-2"))
    other_issuer = sso_sign_in(claims=_claims("s-1", issuer="https://other.example.org"))
    assert len({first.pk, second.pk, other_issuer.pk}) == 3
    assert first.username == "sam" and second.username.startswith("sam-")
    assert sso_sign_in(claims=_claims("s-1", email="new@example.org")).pk == first.pk
    assert User.objects.get(pk=first.pk).email == "new@example.org"
