"""One request digest for both doors (config/idempotency.py, issue 26 §4): what each door stored before still
matches a retry from that door, and the portal's retried form replays, conflicts and names the job as before."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client

from config.idempotency import form_digest_before_issue_26, request_digest
from config.parsers import JsonNumber, canonical_json
from market.models import Job
from tests.conftest import World
from tests.frontend.conftest import login

pytestmark = pytest.mark.django_db

FORM = {
    "name": "train",
    "command": "python train.py",
    "gpus": "2",
    "max_hours": "1.5",
    "bids-0-gpu_type": "H100",
    "bids-0-limit": "3",
    "nonce": "n1",
}
# What the portal's submit view builds from FORM: the form's text values, as the API's JSON.
FORM_BODY = {
    "name": "train",
    "command": "python train.py",
    "gpus": "2",
    "max_hours": "1.5",
    "bids": [{"gpu_type": "H100", "limit": "3"}],
}


def test_the_api_digest_is_what_the_api_stored_before() -> None:
    """market/api/jobs.py digested sha256(canonical_json(body)) before; the helper must give the same bytes,
    or every stored API key would refuse its own retry."""
    body = {
        "name": "ü",
        "gpus": 2,
        "max_hours": JsonNumber("3.0"),
        "bids": [{"gpu_type": "H100", "limit": 2.5}],
    }
    assert request_digest(body) == hashlib.sha256(canonical_json(body).encode()).hexdigest()
    assert request_digest({"max_hours": 3}) == request_digest({"max_hours": JsonNumber("3e0")})
    assert request_digest({"max_hours": 3}) != request_digest({"max_hours": "3"})
    # Pinned, so that a change to the canonical form shows here before it refuses stored keys.
    assert (
        request_digest({"b": [1, "x"], "a": JsonNumber("2.50")})
        == hashlib.sha256(b'{"a":2.5,"b":[1,"x"]}').hexdigest()
    )


def test_the_old_form_digest_is_what_the_portal_stored_before() -> None:
    assert (
        form_digest_before_issue_26(FORM_BODY)
        == hashlib.sha256(json.dumps(FORM_BODY, sort_keys=True).encode()).hexdigest()
    )
    assert form_digest_before_issue_26(FORM_BODY) != request_digest(FORM_BODY)  # why the fallback exists


def test_the_portal_stores_the_one_digest(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    assert login(Client(), world.amy).post("/t/alpha/jobs/new/", FORM).status_code == 302
    job = Job.objects.get()
    assert (job.idempotency_key, job.request_digest) == ("portal:n1", request_digest(FORM_BODY))


def test_a_form_posted_before_the_change_and_again_after_it_replays(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    client = login(Client(), world.amy)
    first = client.post("/t/alpha/jobs/new/", FORM)
    Job.objects.update(request_digest=form_digest_before_issue_26(FORM_BODY))  # as the old view stored it
    again = client.post("/t/alpha/jobs/new/", FORM)
    assert first.status_code == again.status_code == 302 and first["Location"] == again["Location"]
    assert Job.objects.count() == 1


def test_a_form_resent_with_other_values_is_refused_naming_the_job(world: World) -> None:
    world.nodes(world.h100, 1, size=8)
    client = login(Client(), world.amy)
    client.post("/t/alpha/jobs/new/", FORM)
    job = Job.objects.get()
    refused = client.post("/t/alpha/jobs/new/", {**FORM, "gpus": "1"})
    assert refused.status_code == 200 and Job.objects.count() == 1
    assert (
        f"Idempotency-Key &#x27;portal:n1&#x27; was already used for a different request (job {job.pk})."
        in refused.content.decode()
    )
