"""The API's schema generator: drf-spectacular's, stating three rules its defaults leave out, so that the
schema says exactly what the API takes (docs/reliability.md §The schema):

- a field with a `schema_pattern` (config/fields.py: decimal strings, text, instants) documents it in requests;
  a decimal field (config/fields.DecimalStringField) takes a JSON number too: oneOf its string with the
  pattern, or a number with the same bounds and multipleOf its smallest step;
- a body that refuses unknown names (config/api.BodySerializer.refuse_unknown) says additionalProperties: false;
- a list that may not be empty (a ListSerializer with allow_empty=False, such as a job's bids) says minItems: 1.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi
from drf_spectacular.plumbing import is_list_serializer


class AutoSchema(openapi.AutoSchema):
    def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False) -> Any:
        schema = super()._map_serializer_field(field, direction, bypass_extensions)  # type: ignore[no-untyped-call]  # drf-spectacular leaves it unannotated
        pattern = getattr(field, "schema_pattern", None)
        if direction == "request" and pattern and isinstance(schema, dict) and not field.read_only:
            schema.setdefault("pattern", pattern)  # a validator's own pattern (a username's) says more
            number_schema = getattr(field, "number_schema", None)
            if number_schema is not None:
                string = {"type": schema.pop("type"), "pattern": schema.pop("pattern")}
                schema = {"oneOf": [string, number_schema()], **schema}
        return schema

    def _map_basic_serializer(self, serializer: Any, direction: Any) -> Any:
        schema = super()._map_basic_serializer(serializer, direction)  # type: ignore[no-untyped-call]  # drf-spectacular leaves it unannotated
        if direction == "request" and getattr(serializer, "refuse_unknown", False):
            schema["additionalProperties"] = False
        return schema

    def _unwrap_list_serializer(self, serializer: Any, direction: Any) -> Any:
        schema = super()._unwrap_list_serializer(serializer, direction)
        if schema and is_list_serializer(serializer) and not serializer.allow_empty:
            schema["minItems"] = 1
        return schema
