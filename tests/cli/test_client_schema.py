"""The Python client's types against the server's OpenAPI schema (drf-spectacular, as `manage.py spectacular`
writes it): a field the client reads that the schema lacks, a required field a COMPLETE class lacks, or a type
that differs fails here, before a user meets it as a KeyError or a wrong table."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from gpumarket_client import models
from gpumarket_client.models import ApiObject

CLASSES = [
    c
    for c in vars(models).values()
    if isinstance(c, type) and issubclass(c, ApiObject) and c is not ApiObject and dataclasses.is_dataclass(c)
]
# The schema's types, as Python's.
KINDS = {"integer": int, "string": str, "boolean": bool, "array": list, "number": float, "object": dict}


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return dict(schema["components"]["schemas"])


def api_fields(cls: type[ApiObject]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("api") is not False]  # type: ignore[arg-type]


def resolve(prop: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A property with its $ref or single allOf (how drf-spectacular writes enums and nested serializers)
    replaced by the component it names, keeping `nullable`."""
    ref = prop.get("$ref") or (prop.get("allOf") or [{}])[0].get("$ref")
    if ref is None:
        return prop
    found = dict(components[ref.rsplit("/", 1)[1]])
    found.setdefault("type", "object")
    return found | {"nullable": prop.get("nullable", False)}


def python_types(cls: type[ApiObject], name: str) -> tuple[set[type], bool]:
    """The field's types (a list as list, a nested class as dict) and whether it may be None."""
    # Client is imported for type checking only; no API field is one.
    hint = typing.get_type_hints(cls, {**vars(models), "Client": object})[name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds = set()
    for arg in args:
        origin = typing.get_origin(arg) or arg
        if origin is type(None):
            continue
        kinds.add(dict if isinstance(origin, type) and issubclass(origin, ApiObject) else origin)
    return kinds, type(None) in args


def test_every_class_names_a_component_of_the_schema(components: dict[str, Any]) -> None:
    assert len(CLASSES) >= 15
    for cls in CLASSES:
        for name in (cls.COMPONENT, *cls.ALSO):
            assert name in components, f"{cls.__name__}: the schema has no component {name}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_client_fields_exist_in_the_schema_with_its_types(
    cls: type[ApiObject], components: dict[str, Any]
) -> None:
    props: dict[str, Any] = {}
    for name in reversed((cls.COMPONENT, *cls.ALSO)):
        props |= components[name]["properties"]
    for f in api_fields(cls):
        assert f.name in props, f"{cls.__name__}.{f.name}: not in {cls.COMPONENT} {cls.ALSO or ''}"
        prop = resolve(props[f.name], components)
        kinds, optional = python_types(cls, f.name)
        if Any in kinds or "type" not in prop:
            continue  # a free-form value (a policy diff's old and new)
        assert KINDS[prop["type"]] in kinds, f"{cls.__name__}.{f.name}: schema {prop['type']}, client {kinds}"
        if prop.get("nullable"):
            assert optional, (
                f"{cls.__name__}.{f.name}: the schema says it may be null; the client's type does not"
            )
        nested = cls.NESTED.get(f.name)
        if nested is not None:
            item = resolve(prop["items"], components) if prop["type"] == "array" else prop
            assert item["properties"].keys() >= {
                g.name for g in api_fields(nested) if g.name in item["properties"]
            }


@pytest.mark.parametrize("cls", [c for c in CLASSES if c.COMPLETE], ids=lambda c: c.__name__)
def test_complete_classes_read_every_required_field(cls: type[ApiObject], components: dict[str, Any]) -> None:
    required = set(components[cls.COMPONENT].get("required", []))
    mine = {f.name for f in api_fields(cls)}
    assert required <= mine, f"{cls.__name__} lacks {sorted(required - mine)} of {cls.COMPONENT}"


def test_nested_classes_match_the_components_they_are_nested_as(components: dict[str, Any]) -> None:
    """A nested class (a job's leases) reads the component the parent's property points at."""
    for cls in CLASSES:
        props: dict[str, Any] = {}
        for name in (cls.COMPONENT, *cls.ALSO):
            props |= components[name]["properties"]
        for field_name, nested in cls.NESTED.items():
            prop = props[field_name]
            ref = (prop.get("items") or prop).get("$ref") or (prop.get("allOf") or [{}])[0].get("$ref")
            if ref is not None:
                target = ref.rsplit("/", 1)[1]
                assert target in (nested.COMPONENT, *nested.ALSO), f"{cls.__name__}.{field_name}: {target}"
