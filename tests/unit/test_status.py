"""The typed status snapshot (I11): frozen all the way down, rejected entries listed (bounded,
with the total), control characters scrubbed, and the wire mapping field for field."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_reconciler.api.views import status_json, status_out
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.desired import DesiredState, StaticDesiredState
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.model import Diagnostic, SourceSpec, SourceState
from mcp_reconciler.reconciler.reconcile import Reconciler
from mcp_reconciler.reconciler.status import EngineStatus, build_status
from mcp_reconciler.sdk import wire
from tests.support.fakes import FakeReader, spec

pytestmark = pytest.mark.anyio
WAIT = 10.0


class RejectingReader(FakeReader):
    """A FakeReader whose listing of each source also rejected ``rejected[source]`` entries."""

    def __init__(self, tools: dict[str, list[str]], rejected: dict[str, int]) -> None:
        super().__init__(tools)
        self.rejected = rejected

    async def read(self, spec: SourceSpec, previous: SourceState | None, *, inputs_digest: str) -> SourceState:
        state = await super().read(spec, previous, inputs_digest=inputs_digest)
        diags = tuple(
            Diagnostic(
                code="invalid_entry", source=spec.name, name=f"bad\n{i}\x1b[0m", message=f"tool rejected\r\n#{i}"
            )
            for i in range(self.rejected.get(spec.name, 0))
        )
        return dataclasses.replace(state, diagnostics=diags, digest="")


async def snapshot(rejected: dict[str, int], *, limit: int = 5) -> EngineStatus:
    reader = RejectingReader({name: ["x"] for name in rejected}, rejected)
    bounds = Bounds(cooldown_s=0.0, status_diagnostics=limit)
    async with Reconciler(StaticDesiredState([spec(n) for n in rejected]), reader, bounds=bounds) as rec:
        await rec.refresh(timeout_s=WAIT)
        return build_status(rec)


@pytest.mark.parametrize(("rejected", "listed"), [(5, 5), (6, 5)])
async def test_I11_rejected_entries_are_listed_up_to_the_bound_and_the_total_is_exact(
    rejected: int, listed: int
) -> None:
    st = await snapshot({"a": rejected - 2, "b": 2}, limit=5)
    assert st.diagnostics_total == rejected
    assert len(st.diagnostics) == listed
    assert [d.source for d in st.diagnostics] == (["a"] * (rejected - 2) + ["b"] * 2)[:listed]  # config order
    assert {s.name: s.diagnostics for s in st.sources} == {"a": rejected - 2, "b": 2}


async def test_I12_diagnostic_texts_are_scrubbed_of_control_characters() -> None:
    st = await snapshot({"a": 1})
    (d,) = st.diagnostics
    assert d.name == "bad 0 [0m" and d.message == "tool rejected #0"
    assert d.code == "invalid_entry" and d.source == "a"


async def test_the_snapshot_is_frozen_all_the_way_down() -> None:
    st = await snapshot({"a": 1, "b": 0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.revision = 99  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.sources[0].state = "failed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.diagnostics[0].message = "patched"  # type: ignore[misc]
    for f in dataclasses.fields(st):
        value = getattr(st, f.name)
        assert not isinstance(value, list | dict | set), f.name  # tuples only: nothing to mutate in place
    assert hash(st.sources) == hash(st.sources)  # hashable: immutable


async def test_the_wire_model_maps_the_snapshot_field_for_field() -> None:
    st = await snapshot({"a": 2})
    out = status_out(st)
    assert isinstance(out, wire.StatusOut)
    # Every snapshot field is on the wire under the same name (additions to the API only).
    assert {f.name for f in dataclasses.fields(EngineStatus)} <= set(wire.StatusOut.model_fields)
    body = status_json(st)
    assert body["diagnostics_total"] == 2 and len(body["diagnostics"]) == 2
    assert body["diagnostics"][0] == {
        "code": "invalid_entry",
        "source": "a",
        "name": "bad 0 [0m",
        "path": None,
        "message": "tool rejected #0",
    }
    assert body["revision"] == st.revision and body["state"] == st.state == "ready"
    assert body["inputs_changed_since_build"] is None and body["holds"] == 0 and body["sessions"] == 0


class ChangingInputs(StaticDesiredState):
    """A desired state whose watched inputs report a change on the next stat sweep."""

    def __init__(self, specs: list[SourceSpec]) -> None:
        super().__init__(specs)
        self.pending: set[str] = set()

    async def poll(self) -> set[str]:
        out, self.pending = self.pending, set()
        return out


async def test_I11_status_says_when_inputs_changed_since_the_build_and_readiness_reports_config_errors() -> None:
    desired = ChangingInputs([spec("a")])
    reader = FakeReader({"a": ["x"]})
    async with Reconciler(desired, reader, bounds=Bounds(cooldown_s=0.0)) as rec:
        async with Engine(rec, inputs=desired.poll, watch_interval_s=None) as engine:
            await engine.refresh(timeout_s=WAIT)
            assert (await engine.status()).inputs_changed_since_build is None
            desired.pending = {"a"}
            st = await engine.status()
            assert st.inputs_changed_since_build == ("a",) and st.reconciling  # never presented as current
            assert engine.readiness().ready
            desired.set(DesiredState(specs=(spec("a"),), config_error="gateway.yaml:3: bad"))
            await engine.refresh(timeout_s=WAIT)
            ready = engine.readiness()
            # Ready means "can serve" (issue 10, item 13): the last good config serves, so the
            # invalid edit is a named condition, never unreadiness.
            assert ready.ready and ready.conditions == ("config_invalid",) and ready.revision is not None
            st = await engine.status()
            assert st.state == "error"
            assert [(c.type, c.reason) for c in st.conditions] == [("config_invalid", "last_good_config_serving")]
            assert "gateway.yaml" not in st.conditions[0].message  # conditions name no paths
