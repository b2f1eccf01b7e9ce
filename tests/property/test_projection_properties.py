"""Property tests of the metadata projection (I20): for generated JSON Schemas — nested objects,
arrays, combinators, ``$defs``/``$ref``, enums — with adversarial strings in descriptions *and*
in enum values, property names, patterns and defaults, the projected schema accepts exactly the
instances the original accepts (checked with ``jsonschema`` on generated instances, valid and
invalid), and projecting twice changes nothing.

Instances are drawn from the schema itself (enum members, required keys, nested values) mixed
with arbitrary JSON, so both sides of every ``enum``/``required``/``pattern`` decision are hit."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from mcp_reconciler.reconciler.digest import thaw
from mcp_reconciler.reconciler.projection import Budgets, project

# Characters the projection cares about, and the ones attacks use.
SPECIAL = [
    "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202e", "\u202a", "\u2066", "\u2069", "\u200e",
    "\u200f", "\x00", "\x07", "\x1b", "\x85", "\ufe0f", "\U000e0100", "\U000e0041", "\U000e0069",
    "\u00ad", "\u0645", "\u0646", "漢", "\n", "\t", "\\", '"', "<", ">", "$", ".", " ",
]  # fmt: skip
WORDS = ["<IMPORTANT>", "ignore previous instructions", "~/.ssh/id_rsa", "send_email", "description", "title"]
ADVERSARIAL = st.lists(
    st.one_of(st.sampled_from(SPECIAL), st.sampled_from(WORDS), st.text(max_size=4)), max_size=12
).map("".join)
NAMES = st.one_of(st.sampled_from(["description", "title", "$comment", "enum", "a", "b.c"]), ADVERSARIAL)
BUDGETS = Budgets(title=64, description=64, schema=64)  # small, so truncation happens too


def annotated(schema: dict[str, Any], draw: Any) -> dict[str, Any]:
    if draw(st.booleans()):
        schema["description"] = draw(ADVERSARIAL) * draw(st.integers(1, 12))
    if draw(st.booleans()):
        schema["title"] = draw(ADVERSARIAL)
    if draw(st.booleans()):
        schema["$comment"] = draw(ADVERSARIAL)
    return schema


@st.composite
def leaf(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["enum", "const", "string", "pattern", "integer", "boolean", "null"]))
    if kind == "enum":
        schema: dict[str, Any] = {
            "enum": draw(st.lists(st.one_of(ADVERSARIAL, st.integers(-3, 3)), min_size=1, max_size=4))
        }
    elif kind == "const":
        schema = {"const": draw(ADVERSARIAL)}
    elif kind == "string":
        schema = {"type": "string", "maxLength": draw(st.integers(0, 6))}
        if draw(st.booleans()):
            schema["default"] = draw(ADVERSARIAL)
    elif kind == "pattern":
        schema = {"type": "string", "pattern": re.escape(draw(ADVERSARIAL))}
    elif kind == "integer":
        schema = {"type": "integer", "minimum": draw(st.integers(-2, 2))}
    else:
        schema = {"type": kind}
    if draw(st.booleans()):
        schema["examples"] = [draw(ADVERSARIAL)]
    return annotated(schema, draw)


def compound(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        kind = draw(st.sampled_from(["object", "array", "anyOf", "oneOf", "allOf", "not"]))
        if kind == "object":
            props = draw(st.dictionaries(NAMES, children, max_size=4))
            schema: dict[str, Any] = {"type": "object", "properties": props}
            if props:
                schema["required"] = draw(st.lists(st.sampled_from(sorted(props)), unique=True, max_size=len(props)))
            if draw(st.booleans()):
                schema["additionalProperties"] = draw(st.one_of(st.booleans(), children))
        elif kind == "array":
            schema = {"type": "array", "items": draw(children), "maxItems": draw(st.integers(0, 3))}
            if draw(st.booleans()):
                schema["prefixItems"] = draw(st.lists(children, min_size=1, max_size=2))
        elif kind == "not":
            schema = {"not": draw(children)}
        else:
            schema = {kind: draw(st.lists(children, min_size=1, max_size=3))}
        return annotated(schema, draw)

    return build()


SCHEMAS = st.recursive(leaf(), compound, max_leaves=12)


@st.composite
def tool_schemas(draw: Any) -> dict[str, Any]:
    """A tool inputSchema: an object at the top, optionally with ``$defs`` used through ``$ref``."""
    root = draw(compound(SCHEMAS).filter(lambda s: s.get("type") == "object"))
    if draw(st.booleans()):
        name = draw(st.sampled_from(["d1", "with space", "x\u200by"]))
        root["$defs"] = {name: draw(SCHEMAS)}
        pointer = name.replace("~", "~0").replace("/", "~1")
        root.setdefault("properties", {})["viaRef"] = {"$ref": f"#/$defs/{pointer}", "description": draw(ADVERSARIAL)}
    return root


def candidates(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped by ``schema`` (so enums, required keys and patterns are exercised on both sides)."""
    arbitrary = st.recursive(
        st.none() | st.booleans() | st.integers(-3, 3) | ADVERSARIAL,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(NAMES, c, max_size=3),
        max_leaves=6,
    )
    if not isinstance(schema, dict) or depth > 6:
        return arbitrary
    options: list[st.SearchStrategy[Any]] = [arbitrary]
    if "enum" in schema:
        options.append(st.sampled_from(schema["enum"]))
    if "const" in schema:
        options.append(st.just(schema["const"]))
    if "default" in schema:
        options.append(st.just(schema["default"]))
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        options.append(
            st.fixed_dictionaries(
                {k: candidates(v, depth + 1) for k, v in props.items() if k in required},
                optional={k: candidates(v, depth + 1) for k, v in props.items() if k not in required},
            )
        )
    if schema.get("type") == "array":
        options.append(st.lists(candidates(schema.get("items"), depth + 1), max_size=3))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            options.append(candidates(sub, depth + 1))
    return st.one_of(options)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_I20_projected_schema_validates_exactly_the_same_instances(data: st.DataObject) -> None:
    schema = data.draw(tool_schemas())
    Draft202012Validator.check_schema(schema)
    projection = project(
        "tool", {"name": "t", "description": data.draw(ADVERSARIAL), "inputSchema": schema}, budgets=BUDGETS
    )
    projected = thaw(projection.definition)["inputSchema"]
    Draft202012Validator.check_schema(projected)
    before, after = Draft202012Validator(schema), Draft202012Validator(projected)
    instances = data.draw(st.lists(candidates(schema), min_size=1, max_size=12))
    for instance in instances:
        assert before.is_valid(instance) == after.is_valid(instance), instance
    # The contract positions are identical objects' worth of data: every enum/const/default/required/
    # pattern value and every property name survives byte for byte.
    assert contract(projected) == contract(schema)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=tool_schemas(), description=ADVERSARIAL, title=ADVERSARIAL)
def test_I20_projection_is_idempotent(schema: dict[str, Any], description: str, title: str) -> None:
    definition = {"name": "t", "title": title, "description": description * 9, "inputSchema": schema}
    once = project("tool", definition, budgets=BUDGETS)
    twice = project("tool", thaw(once.definition), budgets=BUDGETS)
    assert thaw(twice.definition) == thaw(once.definition)
    assert twice.changes == ()
    # and nothing but text lengths and invisible characters were touched
    for change in once.changes:
        assert change.removed or change.truncated


def contract(schema: Any) -> Any:
    """Everything in a schema but the projected text keywords (title, description, $comment at
    schema positions — here: any key of that name whose value is a string, outside data)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k in ("enum", "const", "default", "examples", "required", "pattern"):
                out[k] = v  # data: verbatim
            elif k in ("title", "description", "$comment") and isinstance(v, str):
                continue
            elif k in ("properties", "$defs"):
                out[k] = {name: contract(sub) for name, sub in v.items()}
            else:
                out[k] = contract(v)
        return out
    if isinstance(schema, list):
        return [contract(v) for v in schema]
    return schema
