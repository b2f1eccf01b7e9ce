"""Untrusted metadata through the engine (I20), with real stdio upstreams on a config file:
the fixture servers of ``tests.support.poisoned_server`` (attack shapes, benign multilingual
text, and the ``mail`` source the shadowing text names).

What is checked: what each entry serves (projected text, contracts byte for byte), its
provenance ``_meta``, the digest (the upstream's original definition: I10), the diagnostics
status shows (with field paths), the quarantine policy, operator overrides, and that a change of
trust re-reads the source."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from mcp_reconciler.reconciler.digest import canonical_json, digest_bytes
from mcp_reconciler.reconciler.gateway import Gateway
from mcp_reconciler.reconciler.metadata import PROVENANCE_META
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.projection import TRUNCATION_MARK, Budgets
from mcp_reconciler.reconciler.status import EngineStatus
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from tests.support import poisoned_server as fx

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0


def source(name: str, variant: str, **extra: Any) -> dict[str, Any]:
    """A stdio source running a fixture variant (``python`` is the gateway's interpreter)."""
    args = ["-m", "tests.support.poisoned_server", "--variant", variant]
    return {"name": name, "stdio": {"command": "python", "args": args, "cwd": str(REPO)}, **extra}


def write_config(tmp: Path, *, metadata: dict[str, Any] | None = None, poison: dict[str, Any] | None = None) -> Path:
    cfg = tmp / "gateway.yaml"
    gateway: dict[str, Any] = {"cooldown_s": 0.05}
    if metadata is not None:
        gateway["metadata"] = metadata
    sources = [
        source("mail", "mail"),  # stdio: trusted by default
        source("poison", "poisoned", trust="untrusted", **(poison or {})),
        source("benign", "benign", trust="untrusted"),
    ]
    cfg.write_text(json.dumps({"gateway": gateway, "sources": sources}))
    return cfg


def served(entry: CatalogEntry) -> dict[str, Any]:
    return dict(json.loads(entry.raw))


def provenance(entry: CatalogEntry) -> dict[str, Any]:
    return dict(served(entry)["_meta"][PROVENANCE_META])


def upstream_digest(name: str) -> str:
    """The digest of the definition exactly as the upstream lists it (what I10 compares)."""
    spec = fx.POISONED_TOOLS[name]
    tool = types.Tool(name=name, description=spec["description"], input_schema=spec["inputSchema"])
    return digest_bytes(canonical_json(tool.model_dump(mode="json", by_alias=True, exclude_none=True)))


def diagnostics(status: EngineStatus, name: str) -> list[tuple[str, str | None, str]]:
    assert status.diagnostics_total == len(status.diagnostics)  # none cut by the status bound
    return [(d.code, d.path, d.message) for d in status.diagnostics if d.name == name]


async def test_I20_flag_policy_serves_projected_text_with_provenance_and_diagnostics(tmp_path: Path) -> None:
    async with Gateway(write_config(tmp_path), watch_interval_s=0.05) as gw:
        gen = gw.rec.runtime.current.generation  # type: ignore[union-attr]
        tools = gen.tools
        status = await gw.engine.status()

        assert {s.name: s.trust for s in status.sources} == {
            "mail": "trusted",
            "poison": "untrusted",
            "benign": "untrusted",
        }

        # The hidden <IMPORTANT> block: flagged, served (flag is the default policy), digest of the original.
        add = tools["poison__add"]
        assert served(add)["description"] == fx.HIDDEN_BLOCK
        assert add.digest == upstream_digest("add")
        prov = provenance(add)
        assert prov["trust"] == "untrusted" and prov["digest"] == add.digest and prov["projected"] is False
        assert {(f["path"], f["rule"]) for f in prov["findings"]} == {
            ("description", "hidden_block"),
            ("description", "sensitive_reference"),
            ("description", "conceal_from_user"),
        }
        assert {(c, p) for c, p, _m in diagnostics(status, "poison__add")} == {("metadata_finding", "description")}

        # Tag-character smuggling: removed, counted, decoded into a finding.
        search = tools["poison__search"]
        assert served(search)["description"] == "Search the web for a query."
        assert search.digest == upstream_digest("search")  # drift sees the smuggled text
        assert provenance(search)["changes"] == [{"path": "description", "removed": {"tag": len(fx.SMUGGLED)}}]
        found = diagnostics(status, "poison__search")
        assert ("metadata_projected", "description") in {(c, p) for c, p, _ in found}
        smuggled = next(m for c, _p, m in found if "smuggled_text" in m)
        assert "Ignore all previous instructions" in smuggled

        # Zero-width splits: removed, and the joined trigger words are found.
        fetch = tools["poison__fetch"]
        assert "\u200b" not in served(fetch)["description"] and "Ignore previous" in served(fetch)["description"]
        assert {f["rule"] for f in provenance(fetch)["findings"]} >= {"override_instructions", "conceal_from_user"}

        # Bidi override: removed (the reversed text is served in logical order, visibly odd).
        translate = served(tools["poison__translate"])["description"]
        assert "\u202e" not in translate and fx.BIDI_VISIBLE[::-1] in translate

        # Shadowing another source's tool: found when sources are merged.
        shadow = provenance(tools["poison__calculator"])
        assert {"path": "description", "rule": "cross_source_reference"} in shadow["findings"]
        cross = [m for c, _p, m in diagnostics(status, "poison__calculator") if "cross_source_reference" in m]
        assert cross and "'send_email'" in cross[0] and "'mail'" in cross[0]

        # A 1 MB description is over the 8 KiB ingestion bound: rejected (I13), never projected.
        assert "poison__huge" not in tools
        invalid = [d for d in gen.source_state("poison").diagnostics if d.code == "invalid_entry"]  # type: ignore[union-attr]
        assert [d.name for d in invalid] == ["huge"] and "8192-byte bound" in invalid[0].message

        # Poisoned schema property descriptions: found at their path; the 100 KB one is cut.
        lookup = served(tools["poison__lookup"])["inputSchema"]
        assert lookup["properties"]["path"]["description"] == fx.POISONED_PATH
        notes = lookup["properties"]["notes"]["description"]
        assert len(notes) == Budgets().schema and notes.endswith(TRUNCATION_MARK) and "\u200b" not in notes
        assert lookup["required"] == ["path"]
        paths = {p for _c, p, _m in diagnostics(status, "poison__lookup")}
        assert {"inputSchema.properties.path.description", "inputSchema.properties.notes.description"} <= paths

        # An enum with zero-width characters is contract: kept byte for byte, and reported.
        set_mode = served(tools["poison__set_mode"])["inputSchema"]["properties"]["mode"]
        assert set_mode["enum"] == fx.ZW_ENUM
        assert ("metadata_finding", "inputSchema.properties.mode.enum[0]") in {
            (c, p) for c, p, _ in diagnostics(status, "poison__set_mode")
        }

        # Prompts and resources are projected too.
        prompt = served(gen.routes[EntryKind.PROMPT]["poison__summarize"])
        assert "\u202e" not in prompt["arguments"][0]["description"]
        assert prompt["arguments"][0]["name"] == "document"
        resource = served(gen.routes[EntryKind.RESOURCE]["file:///reports/q3.txt"])
        assert resource["name"] == "Quarterly report" and resource["uri"] == "file:///reports/q3.txt"

        # Benign multilingual text passes untouched; only the over-budget description is cut.
        for name, text in fx.BENIGN_TEXTS.items():
            out = served(tools[f"benign__{name}"])["description"]
            if name == "convert_units":
                assert out == text[: Budgets().description - len(TRUNCATION_MARK)] + TRUNCATION_MARK
            else:
                assert out == text, name
                assert provenance(tools[f"benign__{name}"]) == {
                    "source": "benign",
                    "trust": "untrusted",
                    "digest": tools[f"benign__{name}"].digest,
                    "projected": False,
                }
        assert [(c, p) for c, p, _ in diagnostics(status, "benign__convert_units")] == [
            ("metadata_projected", "description")
        ]
        assert not [d for d in status.diagnostics if d.source == "benign" and d.name != "benign__convert_units"]

        # The trusted source is served verbatim, and says so.
        mail = tools["mail__send_email"]
        assert served(mail)["description"] == "Send an email."
        assert provenance(mail) == {"source": "mail", "trust": "trusted", "digest": mail.digest, "projected": False}

        # Diagnostics are bounded (I12/bounds) and carry no invisible characters.
        for d in status.diagnostics:
            assert len(d.message.encode()) <= 512
            assert not any(ch in d.message for ch in ("\u200b", "\u202e", "\U000e0049"))


async def test_I20_quarantine_withholds_entries_with_findings(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, metadata={"findings": "quarantine"})
    async with Gateway(cfg, watch_interval_s=0.05) as gw:
        gen = gw.rec.runtime.current.generation  # type: ignore[union-attr]
        status = await gw.engine.status()
        withheld = {"add", "search", "fetch", "calculator", "lookup", "set_mode"}
        assert not {f"poison__{n}" for n in withheld} & set(gen.tools)
        # Projected but without findings: served.
        assert {"poison__translate", "poison__mutate"} <= set(gen.tools)
        assert "poison__summarize" not in gen.routes[EntryKind.PROMPT]
        quarantined = {d.name for d in status.diagnostics if d.code == "metadata_quarantined"}
        assert quarantined == {f"poison__{n}" for n in withheld} | {"poison__summarize", "file:///reports/q3.txt"}
        # Benign and trusted sources are untouched by the policy.
        assert {f"benign__{n}" for n in fx.BENIGN_TEXTS} | {"mail__send_email"} <= set(gen.tools)


async def test_I20_override_pins_text_and_drift_is_still_detected(tmp_path: Path) -> None:
    pinned = "Adds two integers a and b."
    poison = {"overrides": {"add": {"description": pinned}, "no_such_tool": {"title": "x"}}}
    cfg = write_config(tmp_path, metadata={"findings": "quarantine"}, poison=poison)
    async with Gateway(cfg, watch_interval_s=0.05) as gw:
        live = gw.rec.runtime.current
        assert live is not None
        add = live.generation.tools["poison__add"]  # pinned text: its upstream findings no longer apply
        assert served(add)["description"] == pinned
        assert add.digest == upstream_digest("add")
        prov = provenance(add)
        assert prov["overridden"] == ["description"] and prov["projected"] is True and "findings" not in prov
        status = await gw.engine.status()
        unused = [d for d in status.diagnostics if d.code == "metadata_override_unused"]
        assert [d.name for d in unused] == ["no_such_tool"]

        # The upstream changes the description under the pin: a new digest (drift, I10) ...
        conn = live.generation.source_state("poison").connection  # type: ignore[union-attr]
        assert isinstance(conn, UpstreamConnection)
        before = live.revision
        async with live.operation():
            await conn.send(
                types.CallToolRequest(params=types.CallToolRequestParams(name="mutate", arguments={"text": "Adds."})),
                types.CallToolResult,
            )
        with anyio.fail_after(WAIT):
            while (gw.rec.runtime.current_revision or 0) <= before:
                await gw.engine.refresh(["poison"], timeout_s=WAIT)
        after = gw.rec.runtime.current.generation.tools["poison__add"]  # type: ignore[union-attr]
        assert after.digest != add.digest
        assert served(after)["description"] == pinned  # ... while the pinned text is still what is served


async def test_I20_a_change_of_trust_re_reads_the_source(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with Gateway(cfg, watch_interval_s=0.05) as gw:
        search = gw.rec.runtime.current.generation.tools["poison__search"]  # type: ignore[union-attr]
        assert served(search)["description"] == "Search the web for a query."
        before = gw.rec.runtime.current_revision or 0
        text = json.loads(cfg.read_text())
        text["sources"][1]["trust"] = "trusted"
        cfg.write_text(json.dumps(text))
        with anyio.fail_after(WAIT):
            while (gw.rec.runtime.current_revision or 0) <= before:
                await gw.engine.refresh(timeout_s=WAIT)
        gen = gw.rec.runtime.current.generation  # type: ignore[union-attr]
        trusted = gen.tools["poison__search"]
        assert served(trusted)["description"] == fx.TAG_SMUGGLING  # verbatim: the operator said so
        assert trusted.digest == search.digest  # same upstream definition, same digest
        assert provenance(trusted)["trust"] == "trusted"
        # Only the ingestion bound's rejection (I13) is left: no projection, no findings.
        left = [(d.code, d.name) for d in (await gw.engine.status()).diagnostics if d.source == "poison"]
        assert left == [("invalid_entry", "huge")]
