"""References the database does not check (docs/deploy.md §Integrity).

A few foreign keys are declared with `db_constraint=False`: the round commit writes leases, their GPUs, commands
and bid outcomes in bulk, and a constraint there costs each row a lookup in the referenced table. Nothing then
stops a row pointing at nothing except the code that writes it, so this module checks that afterwards, for
every such key the models declare (the list follows the models: a key added or given its constraint back needs
no edit here). `manage.py orphan_check` runs it; the integration tests run it after the ledger check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db.models import Exists, ForeignKey, Model, OuterRef


@dataclass(frozen=True)
class Orphans:
    """Rows of `table` whose `column` names a `target` row that does not exist."""

    table: str
    column: str
    target: str
    count: int
    sample: list[int]  # a few of the orphans' primary keys, to start looking

    @property
    def what(self) -> str:
        ids = ", ".join(str(pk) for pk in self.sample)
        return (
            f"{self.table}.{self.column}: {self.count} row(s) point at no {self.target} row (e.g. id {ids})"
        )


def unchecked_keys() -> list[tuple[type[Model], ForeignKey[Any, Any]]]:
    """Every foreign key of an installed model that the database does not enforce."""
    return [
        (model, field)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, ForeignKey) and not field.db_constraint  # type: ignore[attr-defined]  # django-stubs have it only as an argument
    ]


def orphans(sample: int = 5) -> list[Orphans]:
    """Each unenforced key with rows pointing at nothing: one anti-join (NOT EXISTS) per key."""
    found = []
    for model, field in unchecked_keys():
        target = field.related_model
        if isinstance(target, str):  # "self": the registry has resolved it to the model by now
            target = model
        exists = target._default_manager.filter(**{field.target_field.attname: OuterRef(field.attname)})
        lost = (
            model._default_manager.filter(**{f"{field.attname}__isnull": False})
            .exclude(Exists(exists))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        count = lost.count()
        if count:
            found.append(
                Orphans(model._meta.db_table, field.column, target._meta.db_table, count, list(lost[:sample]))
            )
    return found
