"""The lock-mode rule of docs/rounds.md §Lock order, checked over the source: every row lock the services
take is `FOR NO KEY UPDATE` (`select_for_update(no_key=True)`), and no service calls `update_or_create` on a
model other rows point to (Django's takes a plain `FOR UPDATE`). A plain `FOR UPDATE` on a parent row makes
every child's foreign-key check (`FOR KEY SHARE`, at COMMIT) wait for it, which is how concurrent writes
deadlocked at COMMIT (issue 38; tests/test_parent_locks.py shows it with two real services)."""

from __future__ import annotations

import ast
from pathlib import Path

from django.apps import apps
from django.db.models import ForeignKey

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("config", "accounts", "inventory", "market", "nodeagent", "ops", "whatif", "frontend")


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == name
                ):
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return found


def test_every_row_lock_is_no_key() -> None:
    def no_key(call: ast.Call) -> bool:
        return any(
            k.arg == "no_key" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )

    calls = _calls("select_for_update")
    assert len(calls) > 20  # the walk found the services
    assert [where for where, call in calls if not no_key(call)] == []


def _below(call: ast.Call) -> list[ast.Call]:
    """The calls of a chain from `call` down: `a.b().c()` from c() gives c() and b()."""
    chain: list[ast.Call] = []
    node: ast.AST = call
    while isinstance(node, ast.Call | ast.Attribute):
        if isinstance(node, ast.Call):
            chain.append(node)
            node = node.func
        else:
            node = node.value
    return chain


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def test_a_row_lock_with_joined_rows_locks_only_its_own() -> None:
    """select_related under a row lock joins the parents into the FOR ... UPDATE: without of=("self",) the
    tenant or user rows would be locked too (tests/faults/test_bank.py saw that deadlock)."""
    offenders = []
    for name in ("select_for_update", "select_related"):
        for where, call in _calls(name):
            chain = _below(call)
            locks = [c for c in chain if _name(c) == "select_for_update"]
            joins = any(_name(c) == "select_related" for c in chain)
            if joins and any(not any(k.arg == "of" for k in lock.keywords) for lock in locks):
                offenders.append(where)
    assert offenders == []


def test_no_update_or_create_on_a_parent_model() -> None:
    parents = {
        field.related_model.__name__
        for model in apps.get_models()
        for field in model._meta.get_fields()
        # Only references the database checks: leases, their GPUs and commands carry none (db_constraint=False).
        if isinstance(field, ForeignKey)
        and getattr(field, "db_constraint", True)  # the stubs lack it
        and isinstance(field.related_model, type)
    }
    offenders = []
    for where, call in _calls("update_or_create"):
        manager = call.func.value if isinstance(call.func, ast.Attribute) else None
        model = manager.value if isinstance(manager, ast.Attribute) else None
        name = model.id if isinstance(model, ast.Name) else "?"
        if name in parents or name == "?":
            offenders.append(f"{where} {name}")
    assert offenders == []
