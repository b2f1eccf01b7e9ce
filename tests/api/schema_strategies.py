"""A small JSON-Schema → hypothesis strategy converter for the subset our OpenAPI document uses
(schemathesis is not a dependency): ``$ref`` into ``#/components/schemas``, ``object`` with
``properties``/``required`` (``additionalProperties: false`` — no extra keys), ``type``
string|integer|number|boolean|array|null (or a list of them), ``anyOf``/``oneOf``, ``enum``,
``const``, ``minLength``/``maxLength``, ``minItems``/``maxItems``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``. Anything else fails loudly, so a model change that
uses a new keyword is noticed here rather than silently fuzzed with the wrong data."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

IGNORED = {"title", "description", "default", "additionalProperties", "examples"}
MAX_STRING = 64  # unbounded strings are drawn up to this length
MAX_ITEMS = 12  # arrays are drawn up to min(maxItems, this)

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
ARBITRARY_JSON = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)


class UnsupportedSchema(ValueError):
    pass


def resolve(schema: Mapping[str, Any], document: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    prefix = "#/components/schemas/"
    if not isinstance(ref, str) or not ref.startswith(prefix):
        raise UnsupportedSchema(f"unsupported $ref: {ref!r}")
    return resolve(document["components"]["schemas"][ref[len(prefix) :]], document)


def from_schema(schema: Mapping[str, Any], document: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (whose ``$ref``s point into ``document``)."""
    schema = resolve(schema, document)
    unknown = (
        set(schema)
        - IGNORED
        - {
            "type",
            "properties",
            "required",
            "anyOf",
            "oneOf",
            "enum",
            "const",
            "maxLength",
            "minLength",
            "maxItems",
            "minItems",
            "items",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
        }
    )
    if unknown:
        raise UnsupportedSchema(f"unsupported keywords {sorted(unknown)} in {dict(schema)}")
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s, document) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, document) for k in kind])
    if kind == "object" or (kind is None and "properties" in schema):
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: from_schema(v, document) for k, v in props.items() if k in required},
            optional={k: from_schema(v, document) for k, v in props.items() if k not in required},
        )
    if kind == "string":
        return st.text(
            min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", MAX_STRING), MAX_STRING)
        )
    if kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if "exclusiveMinimum" in schema:
            lo = math.floor(schema["exclusiveMinimum"]) + 1
        if "exclusiveMaximum" in schema:
            hi = math.ceil(schema["exclusiveMaximum"]) - 1
        return st.integers(min_value=lo, max_value=hi)
    if kind == "number":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        exclude_min = exclude_max = False
        if "exclusiveMinimum" in schema:
            lo, exclude_min = schema["exclusiveMinimum"], True
        if "exclusiveMaximum" in schema:
            hi, exclude_max = schema["exclusiveMaximum"], True
        return st.floats(
            min_value=lo,
            max_value=hi,
            exclude_min=exclude_min and lo is not None,
            exclude_max=exclude_max and hi is not None,
            allow_nan=False,
            allow_infinity=False,
        ) | st.integers(
            min_value=math.floor(lo) + 1 if lo is not None else None,
            max_value=(math.ceil(hi) - 1 if exclude_max else math.floor(hi)) if hi is not None else None,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = from_schema(schema.get("items", {}), document) if schema.get("items") else ARBITRARY_JSON
        return st.lists(
            items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", MAX_ITEMS), MAX_ITEMS)
        )
    if kind is None and not (set(schema) - IGNORED):
        return ARBITRARY_JSON  # {} : anything
    raise UnsupportedSchema(f"unsupported schema {dict(schema)}")
