"""Server→client sampling through the gateway (I17): a request an upstream sends while serving
a call reaches the client that made the call — in every combination of eras, over stdio and
streamable HTTP — and only that client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.relay.conftest import (
    WAIT,
    Gated,
    RelayUpstreams,
    Sampler,
    client,
    gateway,
    payload,
    upstream,
    write_config,
)
from tests.support.calls import call_error
from tests.support.waits import until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("up_era", ["legacy", "both"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sampling_reaches_the_calling_client(
    mode: str, up_era: str, transport: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, transport, up_era)
    async with gateway(write_config(tmp_path, [src])) as served:
        sampler = Sampler()
        async with client(served, mode, sampling_callback=sampler) as c:
            res = await c.call_tool("up__sample", {"prompt": "hi"})
            assert payload(res) == {"sampled": "echo:hi", "model": "test-model"}
            assert sampler.prompts == ["hi"]


async def test_a_sealed_retry_answers_the_client(relay_upstreams: RelayUpstreams, tmp_path: Path) -> None:
    """A 2026 client and a 2026 upstream: the round trip is the call, then the client's retry with
    its input responses and the sealed ``request_state`` — both legs on the one path, twice in a
    row with the same answer."""
    src = await upstream(relay_upstreams, "http", "both")
    async with gateway(write_config(tmp_path, [src])) as served:
        results = []
        for _ in range(2):
            sampler = Sampler()
            async with client(served, "auto", sampling_callback=sampler) as c:
                res = await c.call_tool("up__sample", {"prompt": "hi"})
            assert sampler.prompts == ["hi"]
            results.append(res.model_dump(exclude={"meta"}))
        assert results[0] == results[1]
        assert payload(res) == {"sampled": "echo:hi", "model": "test-model"}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_concurrent_sessions_each_get_only_their_own_request(
    mode: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """I17: two sessions' calls in flight on one upstream connection at once; each relayed
    request reaches only the session whose call caused it (exact attribution on HTTP)."""
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        gate: list[anyio.Event | int] = [anyio.Event(), 0]
        sa, sb = Gated("A", gate), Gated("B", gate)
        results: dict[str, Any] = {}
        async with client(served, mode, sampling_callback=sa) as a, client(served, mode, sampling_callback=sb) as b:

            async def run(c: Any, key: str) -> None:
                results[key] = payload(await c.call_tool("up__sample", {"prompt": key}))

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run, a, "a")
                    tg.start_soon(run, b, "b")
        assert results == {
            "a": {"sampled": "A:a", "model": "test-model"},
            "b": {"sampled": "B:b", "model": "test-model"},
        }
        assert sa.prompts == ["a"] and sb.prompts == ["b"]


async def test_stdio_upstream_refuses_a_request_it_cannot_attribute(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """stdio does not say which call a request belongs to: with one call in flight it is that
    call's; with two, the upstream gets a clear error rather than a guess (never the wrong session)."""
    src = await upstream(relay_upstreams, "stdio", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        blocked = Sampler(block=True)
        second = Sampler()
        async with client(served, sampling_callback=blocked) as a, client(served, sampling_callback=second) as b:
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.call_tool, "up__sample", {"prompt": "first"})
                with anyio.fail_after(WAIT):
                    await blocked.started.wait()  # the first call's request reached its client
                out = payload(await b.call_tool("up__sample", {"prompt": "second"}))
                assert out["error"]["code"] == types.INVALID_REQUEST
                assert out["error"]["data"]["code"] == "not_attributable"
                assert second.prompts == []  # never asked: it might not have been its request
                tg.cancel_scope.cancel()
            with anyio.fail_after(WAIT):
                await blocked.cancelled.wait()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_sampling_gets_the_upstream_a_clear_error(
    mode: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        async with client(served, mode) as c:  # no sampling callback: no sampling capability
            out = payload(await c.call_tool("up__sample", {"prompt": "x"}))
        assert out["error"]["code"] == types.INVALID_REQUEST
        assert out["error"]["data"] == {"code": "capability_missing", "capability": "sampling"}
        assert "does not support sampling" in out["error"]["message"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_sampling_tools_is_refused_a_request_with_tools(
    mode: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        async with client(served, mode, sampling_callback=Sampler()) as c:
            out = payload(await c.call_tool("up__sample", {"prompt": "x", "tools": True}))
            assert out["error"]["data"] == {"code": "capability_missing", "capability": "sampling.tools"}
        caps = types.SamplingCapability(tools=types.SamplingToolsCapability())
        sampler = Sampler()
        async with client(served, mode, sampling_callback=sampler, sampling_capabilities=caps) as c:
            assert payload(await c.call_tool("up__sample", {"prompt": "y", "tools": True}))["sampled"] == "echo:y"


async def test_a_2026_upstream_asking_a_client_without_the_capability_fails_the_call_clearly(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """A 2026-era upstream asks in its result, where it has no error channel: the client's call
    fails with capability_missing (-32030), in both client eras."""
    src = await upstream(relay_upstreams, "http", "both")
    async with gateway(write_config(tmp_path, [src])) as served:
        for mode in ("legacy", "auto"):
            async with client(served, mode) as c:
                err = await call_error(c, "up__sample", {"prompt": "x"})
                assert err.code == -32030, (mode, err)
                assert err.error.data["capability"] == "sampling"


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_cancelling_the_call_cancels_the_relayed_request(
    transport: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, transport, "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        sampler = Sampler(block=True)
        async with client(served, sampling_callback=sampler) as c:
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(c.call_tool, "up__sample", {"prompt": "x"})
                    await sampler.started.wait()
                    tg.cancel_scope.cancel()  # the client abandons its call
                await sampler.cancelled.wait()  # ...and the gateway withdrew the request it relayed
            # The session still works: the next call is relayed normally.
            sampler.block = False
            assert payload(await c.call_tool("up__sample", {"prompt": "y"}))["sampled"] == "echo:y"
        await until(lambda: not served.front.relay._calls, what="the relay's call table emptied")


async def test_the_upstream_cancelling_its_request_cancels_it_downstream(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        sampler = Sampler(block=True)
        async with client(served, sampling_callback=sampler) as c:
            # The upstream gives up after 0.5 s and cancels its sampling request.
            out = payload(await c.call_tool("up__sample", {"prompt": "x", "timeout_s": 0.5}))
            assert out["error"]["code"] == types.REQUEST_TIMEOUT
            with anyio.fail_after(WAIT):
                await sampler.cancelled.wait()


async def test_a_request_on_the_standalone_stream_reaches_the_only_caller(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """What the conformance reference server does: no related request. With one call in
    flight on the connection, that call's client is the one to ask."""
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        sampler = Sampler()
        async with client(served, sampling_callback=sampler) as c:
            out = payload(await c.call_tool("up__sample", {"prompt": "s", "standalone": True}))
            assert out == {"sampled": "echo:s", "model": "test-model"}


async def test_a_sealed_request_state_works_only_for_the_session_it_was_given_to(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """A 2026-era upstream's InputRequiredResult passes through with its state sealed: the
    session that got it can retry with it; another session replaying it is refused (-32031)."""
    src = await upstream(relay_upstreams, "http", "both")
    async with gateway(write_config(tmp_path, [src])) as served:
        answer = types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="a"), model="m"
        )
        caps = {"sampling_callback": Sampler()}  # declares sampling
        async with client(served, "auto", **caps) as a, client(served, "auto", **caps) as b:
            first = await a.session.call_tool("up__sample", {"prompt": "p"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.request_state and first.request_state.startswith("gw1.s.")
            assert "asked:sample" not in first.request_state  # the upstream's state is not shown as is
            assert set(first.input_requests or {}) == {"q"}  # the upstream's request, unchanged
            stolen = await call_error(
                b, "up__sample", {"prompt": "p"}, input_responses={"q": answer}, request_state=first.request_state
            )
            assert stolen.code == -32031 and stolen.error.data["code"] == "invalid_request_state"
            done = await a.session.call_tool(
                "up__sample", {"prompt": "p"}, input_responses={"q": answer}, request_state=first.request_state
            )
            assert isinstance(done, types.CallToolResult) and payload(done)["sampled"] == "a"


@pytest.mark.parametrize("up_era", ["legacy", "both"])
async def test_the_gateway_declares_what_a_direct_client_declares(
    up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """Upstream servers see sampling (with tools), elicitation (form and URL) and roots
    (listChanged), so they enable those features."""
    src = await upstream(relay_upstreams, "http", up_era)
    async with gateway(write_config(tmp_path, [src])) as served, client(served) as c:
        caps = payload(await c.call_tool("up__state", {}))["capabilities"]
    assert caps["sampling"] == {"tools": {}}
    assert caps["elicitation"] == {"form": {}, "url": {}}
    assert caps["roots"] == {"listChanged": True}


class Reporting(Sampler):
    """A sampler that reports progress on the request it answers (under the token it was given)."""

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        token = (context.meta or {}).get("progressToken") or (context.meta or {}).get("progress_token")
        assert token is not None, "the relayed request carries the session's own progress token"
        notification = types.ProgressNotification(
            params=types.ProgressNotificationParams(progress_token=token, progress=1, total=2, message="half")
        )
        await context.session.send_notification(notification)
        return await super().__call__(context, params)


async def test_the_clients_progress_on_a_relayed_request_reaches_the_upstream(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        async with client(served, sampling_callback=Reporting()) as c:
            out = payload(await c.call_tool("up__sample", {"prompt": "p", "progress": True}))
    assert out["sampled"] == "echo:p"
    assert out["progress"] == [[1.0, 2.0, "half"]]
