"""STAND-IN until wt-versions lands (issue 27, part 1 builds the real PolicyVersion): the least a shadow round
needs of a policy version, a status and the PolicySnapshot it holds. Replaced by the merge."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class PolicyVersion(models.Model):
    class Status(models.TextChoices):
        PROPOSED = "proposed"
        ACTIVE = "active"
        RETIRED = "retired"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROPOSED)
    snapshot = models.JSONField()
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"version {self.pk}"
