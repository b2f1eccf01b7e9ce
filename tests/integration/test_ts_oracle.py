"""The TypeScript SDK's clients as an oracle (issue 26): the same request sequence, sent by the
TS SDK's clients to an SDK (Python) server directly and to the same server through a served
gateway process, gets equal answers apart from what the gateway adds.

The upstream is ``tests/support/relay_server`` over streamable HTTP on 127.0.0.1 (tools with a
success, an ``isError`` result and an unknown name; resources, templates, prompts, completion,
logging). The gateway is ``mcp-reconciler serve --port 0`` in its own process
(``test_plane_wire.served``), whichever data plane serves its ``/mcp``.
``tests/ts_oracle/oracle.mjs`` runs the sequence with three clients —
the v1 SDK (``@modelcontextprotocol/sdk``, 2025-11-25), the v2 client
(``@modelcontextprotocol/client``) pinned to 2025-11-25 and pinned to 2026-07-28 — one node
process per direction, and prints what each client's API returned or threw.

Equal means equal after :func:`normal`: the gateway's ``_meta`` keys, the ``serverInfo`` stamp and
the ``up__`` prefix taken out (the normalisation of ``test_plane_oracle``), and, on the handshake
and ``server/discover``, the gateway's own ``instructions`` and ``listChanged`` (a gateway
announces catalog changes whatever its upstream does). Two answers are the gateway's own by
design and are asserted exactly instead: an unknown tool or prompt name is refused by the gateway
(it forwards only names in its catalog), with ``INVALID_PARAMS`` and ``data.code`` =
``unknown_name``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.test_plane_oracle import strip_gateway
from tests.integration.test_plane_wire import PREFIX, served
from tests.relay.conftest import RelayUpstreams
from tests.relay.conftest import relay_upstreams as relay_upstreams  # the fixture
from tests.support import ts_oracle

pytestmark = pytest.mark.anyio

#: The oracle's clients (as ``oracle.mjs`` tags them) and the version each one negotiates.
CLIENTS = {
    "sdk-v1 2025-11-25": "2025-11-25",
    "client-v2 2025-11-25": "2025-11-25",
    "client-v2 2026-07-28": "2026-07-28",
}
#: Steps the gateway answers itself (it never forwards a name outside its catalog).
UNKNOWN_NAMES = {"tools/call unknown tool": "unknown tool: up__nope", "prompts/get unknown": "unknown prompt: up__nope"}
INVALID_PARAMS = -32602


@pytest.fixture(scope="session")
def oracle_script() -> Path:
    return ts_oracle.installed()


def normal(step: str, outcome: dict[str, Any]) -> Any:
    """``outcome`` without what the gateway adds (see the module docstring)."""
    value = strip_gateway(outcome, PREFIX)
    result = value.get("result")
    if step in ("connect", "server/discover") and isinstance(result, dict):
        result.pop("instructions", None)
        for capability in (result.get("capabilities") or {}).values():
            if isinstance(capability, dict):
                capability.pop("listChanged", None)
    return value


async def test_ts_clients_get_the_sdk_servers_answers_through_the_gateway(
    oracle_script: Path, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    async with served(tmp_path, relay_upstreams) as s:
        runs: dict[str, ts_oracle.Outcomes] = {}

        async def run(name: str, url: str, prefix: str) -> None:
            runs[name] = await ts_oracle.run(oracle_script, url, prefix)

        async with anyio.create_task_group() as tg:  # one node process per direction, side by side
            tg.start_soon(run, "direct", s.direct, "")
            tg.start_soon(run, "gateway", s.gateway.url, PREFIX)
    direct, through = runs["direct"], runs["gateway"]

    assert direct.keys() == through.keys()
    assert {client for client, _ in direct} == set(CLIENTS)
    for client, version in CLIENTS.items():  # every client connected, in the era it asked for
        for outcomes in (direct, through):
            assert outcomes[(client, "connect")]["result"]["protocolVersion"] == version
    compared = 0
    for (client, step), theirs in direct.items():
        ours = through[(client, step)]
        if step in UNKNOWN_NAMES:
            assert ours["error"]["code"] == INVALID_PARAMS, (client, step, ours)
            # v1 puts "MCP error -32602: " before the message
            assert ours["error"]["message"].endswith(UNKNOWN_NAMES[step]), (client, step, ours)
            assert ours["error"]["data"]["code"] == "unknown_name", (client, step, ours)
            continue
        assert normal(step, ours) == normal(step, theirs), (client, step)
        compared += 1
    # What was compared carries answers, not only errors: results, an isError result, a
    # protocol error from the SDK itself, and the gateway's stamp and revision on them.
    modern = "client-v2 2026-07-28"
    assert through[(modern, "tools/call error result")]["result"]["isError"] is True
    assert direct[("sdk-v1 2025-11-25", "tools/call unknown tool")]["error"]["code"] == INVALID_PARAMS
    echo = through[(modern, "tools/call echo")]["result"]
    assert echo["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-reconciler"
    assert isinstance(echo["_meta"]["io.mcp-reconciler/revision"], int)
    # 15 steps per 2025-era client (connect, ping, logging/setLevel, 12 requests), 14 for the
    # 2026-era one (server/discover instead of ping and setLevel, which it does not send).
    assert len(direct) == 44 and compared == len(direct) - len(CLIENTS) * len(UNKNOWN_NAMES)
