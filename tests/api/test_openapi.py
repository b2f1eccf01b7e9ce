"""The committed OpenAPI document (API compatibility) and fuzzing the live API against it.

The fuzzer is hypothesis plus a small schema → strategy converter (``schema_strategies``):
for every operation in ``api/openapi.json`` it sends schema-valid bodies, arbitrary JSON and
garbage bytes, random path and query parameters, with and without a valid token, to one real
gateway on 127.0.0.1, and checks: no 5xx; every status is documented for the operation; every
body matches the documented schema (errors: ``ErrorOut``); no error body echoes a token."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx2
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_reconciler.api import openapi
from mcp_reconciler.api.routes import EVENTS_PATH, ROUTES
from mcp_reconciler.sdk import wire
from tests.api.conftest import (
    ALICE,
    ALL_TOKENS,
    OPERATOR_TOKEN,
    assert_error_shape,
    served_gateway,
    write_config,
)
from tests.api.schema_strategies import ARBITRARY_JSON, from_schema

COMMITTED = Path(__file__).resolve().parents[2] / "api" / "openapi.json"
DOCUMENT: dict[str, Any] = json.loads(COMMITTED.read_text())
FUZZ_EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "200"))  # in total, over all operations
METHODS = ("get", "post", "put", "patch", "delete")


def test_committed_openapi_matches_the_code() -> None:
    rendered = openapi.render()
    committed = COMMITTED.read_text()
    assert rendered == committed, (
        "api/openapi.json is out of date with the route table and wire models "
        "(api/control.py ROUTES, sdk/wire.py). If the change is intended, regenerate it:\n\n"
        "    python -m mcp_reconciler.api.openapi > api/openapi.json\n\n"
        "and review the diff: removing or renaming a path, field or enum value breaks API clients."
    )


def test_document_covers_every_route() -> None:
    ops = {(path, method) for path, item in DOCUMENT["paths"].items() for method in item if method in METHODS}
    assert {(r.path, r.method.lower()) for r in ROUTES} | {
        ("/healthz", "get"),
        ("/readyz", "get"),
        (EVENTS_PATH, "get"),
    } == ops
    ids = [op["operationId"] for item in DOCUMENT["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A response/request schema made self-contained (its ``$ref``s resolve in ``components``)."""
    return {**schema, "components": DOCUMENT["components"]}


REQUEST_MODELS = {r.request.__name__: r.request for r in ROUTES if r.request is not None}


@pytest.mark.parametrize("name", sorted(REQUEST_MODELS))
@settings(max_examples=25, deadline=None, database=None)
@given(data=st.data())
def test_schema_valid_bodies_are_accepted(name: str, data: st.DataObject) -> None:
    """The converter draws documented-valid values, and the wire models accept every one of
    them: the document does not promise more than the server takes."""
    schema = {"$ref": f"#/components/schemas/{name}"}
    value = data.draw(from_schema(schema, DOCUMENT))
    jsonschema.validate(value, _schema(schema))
    REQUEST_MODELS[name].model_validate_json(json.dumps(value))


# -- fuzzing --------------------------------------------------------------------------------------


def _streams(op: dict[str, Any]) -> bool:
    """A streaming operation (``GET /v1/events``): an answer never ends, so it is not fuzzed here
    but tested on its own (``tests/api/test_events.py``)."""
    return "text/event-stream" in op["responses"].get("200", {}).get("content", {})


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in sorted(DOCUMENT["paths"].items())
        for method, op in sorted(item.items())
        if method in METHODS and not _streams(op)
    ]


def _param_strategy(param: dict[str, Any], known: dict[str, list[str]]) -> st.SearchStrategy[str]:
    text = st.text(min_size=1, max_size=24).filter(lambda s: s not in (".", ".."))
    if param["schema"].get("type") == "integer":
        return st.one_of(st.sampled_from(known["revision"]), st.integers().map(str), text)
    return st.one_of(st.sampled_from(known.get(param["name"], ["x"])), text)


def _request_strategy(path: str, op: dict[str, Any], known: dict[str, list[str]]) -> st.SearchStrategy[Any]:
    params = op.get("parameters", [])
    path_params = {p["name"]: _param_strategy(p, known) for p in params if p["in"] == "path"}
    query_params = {
        p["name"]: st.one_of(st.sampled_from(known["revision"]), st.integers().map(str), st.text(max_size=12))
        for p in params
        if p["in"] == "query"
    }
    garbage = st.binary(max_size=512)
    as_json = ARBITRARY_JSON.map(lambda v: json.dumps(v).encode())
    if "requestBody" in op:
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        valid = from_schema(schema, DOCUMENT).map(lambda v: json.dumps(v).encode())
        body = st.one_of(valid, valid, as_json, garbage, st.none())
    else:
        body = st.one_of(st.none(), as_json, garbage)
    token = st.one_of(
        st.just(OPERATOR_TOKEN),
        st.sampled_from([None, ALICE, "not-a-token", f"{OPERATOR_TOKEN}x"]),
    )
    return st.fixed_dictionaries(
        {
            "path": st.fixed_dictionaries(path_params),
            "query": st.fixed_dictionaries({}, optional=query_params),
            "body": body,
            "token": token,
        }
    )


def _check_response(path: str, method: str, op: dict[str, Any], request: dict[str, Any], r: httpx2.Response) -> None:
    where = f"{method.upper()} {r.request.url} token={request['token'] is not None} body={request['body']!r:.200}"
    if r.status_code == 504 and op["operationId"] == "post_refresh":
        # The one 5xx the API means: the caller's own timeout_s ran out before the cycle ended.
        assert r.json()["error"]["code"] == "refresh_timeout", f"{where} → {r.text[:300]}"
    else:
        assert r.status_code < 500, f"{where} → {r.status_code} {r.text[:500]}"
    documented = op["responses"].get(str(r.status_code)) or op["responses"].get("default")
    assert documented is not None, f"{where} → undocumented status {r.status_code}: {r.text[:300]}"
    if r.status_code == 204:
        assert r.content == b"", where
        return
    assert r.headers.get("content-type", "").startswith("application/json"), f"{where} → {r.headers} {r.text[:300]}"
    body = r.json()
    schema = documented["content"]["application/json"]["schema"]
    try:
        jsonschema.validate(body, _schema(schema))
    except jsonschema.ValidationError as exc:
        raise AssertionError(f"{where} → {r.status_code} body does not match its schema: {exc.message}") from None
    if not 200 <= r.status_code < 300 and path.startswith("/v1/"):
        wire.ErrorOut.model_validate(body)
        assert_error_shape(body, forbidden=ALL_TOKENS)


def _fuzz_operation(
    http: httpx2.Client,
    path: str,
    method: str,
    op: dict[str, Any],
    known: dict[str, list[str]],
    examples: int,
    seen: dict[str, int],
) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(request=_request_strategy(path, op, known))
    def one(request: dict[str, Any]) -> None:
        url = path
        for name, value in request["path"].items():
            url = url.replace("{" + name + "}", quote(value, safe=""))
        headers = {}
        if request["token"] is not None:
            headers["Authorization"] = f"Bearer {request['token']}"
        if request["body"] is not None:
            headers["Content-Type"] = "application/json"
        r = http.request(method.upper(), url, params=request["query"] or None, content=request["body"], headers=headers)
        seen[op["operationId"]] = seen.get(op["operationId"], 0) + 1
        _check_response(path, method, op, request, r)

    one()


@pytest.mark.anyio
async def test_fuzz_every_operation_against_the_document(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision
        mine = served.front.authority.create("operator::operator1", None)
        alices = served.front.authority.create("owner::alice", None)
        hold = served.control.holds.create(rev or 0, 600, owner="owner::alice") if served.control else None
        known = {
            "revision": [str(rev), "0", "-1"],
            "name": ["up"],
            "id": [mine.id, alices.id, *([hold.id] if hold else [])],
        }
        operations = _operations()
        per_op = max(1, FUZZ_EXAMPLES // len(operations))
        seen: dict[str, int] = {}

        def fuzz() -> None:
            with httpx2.Client(base_url=served.base_url, timeout=30.0) as http:
                for path, method, op in operations:
                    _fuzz_operation(http, path, method, op, known, per_op, seen)

        with anyio.fail_after(max(90.0, FUZZ_EXAMPLES * 0.1)):
            await anyio.to_thread.run_sync(fuzz)
        assert set(seen) == {op["operationId"] for _, _, op in operations}
        assert sum(seen.values()) >= FUZZ_EXAMPLES * 0.9

        # The gateway survived and still answers normally.
        async with httpx2.AsyncClient(
            base_url=served.base_url, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        ) as http:
            status = await http.get("/v1/status")
            assert status.status_code == 200 and status.json()["state"] == "ready"
