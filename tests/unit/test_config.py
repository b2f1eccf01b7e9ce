"""reconciler.config: schema, drop-ins, interpolation, line-accurate problems, no leaked secrets."""

from __future__ import annotations

import json
import os
import pickle
import textwrap
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.config import (
    ConfigError,
    ConfigProblem,
    GatewaySettings,
    InterpolatedStr,
    check_config,
    display_transport,
    load_config,
)
from mcp_reconciler.reconciler.digest import canonical_json

SECRET = "s3cr3t-TOKEN-9f2e"
OLD_NS = 1_600_000_000 * 10**9


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    return path


def problems_of(path: Path, **kwargs: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, **kwargs)  # type: ignore[arg-type]
    return [str(p) for p in info.value.problems]


MAIN = """
sources:
  - name: notes
    stdio: {command: python, args: [-m, notes_server], cwd: ., env: {LEVEL: info}}
    watch: ["data/**/*.yml", "reports/*.xml"]
    prefix: null
    poll_seconds: 300
    timeouts: {connect_s: 5, call_s: 60}
  - name: search
    http: {url: "http://127.0.0.1:9000/mcp", headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}}
    prefix: ""
  - name: old
    sse: {url: "http://127.0.0.1:9001/sse"}
include: ["sources.d/*.yaml"]
gateway: {}
"""


# --------------------------------------------------------------------------- valid configs


def test_valid_config_with_drop_ins(tmp_path: Path) -> None:
    cfg = write(tmp_path / "gateway.yaml", MAIN)
    write(tmp_path / "sources.d" / "b.yaml", "name: bravo\nhttp: {url: 'https://b.example/mcp'}\n")
    write(tmp_path / "sources.d" / "a.yaml", "name: alpha\nstdio: {command: ./s, cwd: sub}\nwatch: [in.txt]")
    write(tmp_path / "sources.d" / "ignored.txt", "not yaml at all: [")

    loaded = load_config(cfg, environ={"SEARCH_TOKEN": SECRET})

    assert loaded.path == cfg
    assert [s.name for s in loaded.specs] == ["notes", "search", "old", "alpha", "bravo"]
    assert loaded.files == (cfg, tmp_path / "sources.d" / "a.yaml", tmp_path / "sources.d" / "b.yaml")
    assert loaded.include_globs == (str(tmp_path / "sources.d" / "*.yaml"),)
    assert loaded.settings == GatewaySettings()

    notes = loaded.specs[0]
    assert dict(notes.transport) == {
        "kind": "stdio",
        "command": "python",
        "args": ("-m", "notes_server"),
        "cwd": str(tmp_path),
        "env": {"LEVEL": "info"},
        "timeouts": {"connect_s": 5.0, "call_s": 60.0},
    }
    assert notes.watch == (str(tmp_path / "data/**/*.yml"), str(tmp_path / "reports/*.xml"))
    assert notes.prefix is None and notes.effective_prefix == "notes__"
    assert notes.poll_seconds == 300

    search = loaded.specs[1]
    assert search.transport["kind"] == "http"
    assert search.transport["url"] == "http://127.0.0.1:9000/mcp"
    assert search.transport["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert search.transport["timeouts"] == {"connect_s": 10.0, "call_s": 300.0}  # defaults
    assert search.prefix == "" and search.effective_prefix == ""

    assert loaded.specs[2].transport["kind"] == "sse"
    # Relative cwd and watch resolve against the *declaring* file's directory.
    alpha = loaded.specs[3]
    assert alpha.transport["cwd"] == str(tmp_path / "sources.d" / "sub")
    assert alpha.watch == (str(tmp_path / "sources.d" / "in.txt"),)


def test_gateway_settings_overrides_and_bounds(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources: []
        gateway: {host: 0.0.0.0, port: 9999, cooldown_s: 0.5, retiring_max: 2,
                  operation_deadline_s: 30, expose_control_tools: true}
        """,
    )
    settings = load_config(cfg).settings
    assert settings == GatewaySettings(
        host="0.0.0.0",
        port=9999,
        cooldown_s=0.5,
        retiring_max=2,
        operation_deadline_s=30,
        expose_control_tools=True,
    )
    bounds = settings.bounds()
    assert (bounds.cooldown_s, bounds.retiring_max, bounds.operation_deadline_s) == (0.5, 2, 30)


def test_null_sections_mean_empty(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources:\ninclude:\ngateway:\n")
    loaded = load_config(cfg)
    assert loaded.specs == () and loaded.settings == GatewaySettings()


def test_stdio_without_cwd_runs_in_the_declaring_files_directory(tmp_path: Path) -> None:
    cfg = write(tmp_path / "conf" / "g.yaml", "sources: [{name: a, stdio: {command: x}}]\n")
    assert load_config(cfg).specs[0].transport["cwd"] == str(tmp_path / "conf")


def test_absolute_cwd_and_watch_are_kept(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        "sources: [{name: a, stdio: {command: x, cwd: /opt/srv}, watch: [/var/data/*.json]}]\n",
    )
    spec = load_config(cfg).specs[0]
    assert spec.transport["cwd"] == "/opt/srv" and spec.watch == ("/var/data/*.json",)


def test_drop_in_matched_by_two_globs_is_read_once_and_main_file_never_included(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "include: ['*.yaml', 'd/*.yaml', 'd/a.*']\n")
    write(tmp_path / "d" / "a.yaml", "name: a\nsse: {url: 'http://h/sse'}\n")
    loaded = load_config(cfg)
    assert [s.name for s in loaded.specs] == ["a"]
    assert loaded.files == (cfg, tmp_path / "d" / "a.yaml")


# --------------------------------------------------------------------------- interpolation


def test_env_interpolation_everywhere_in_transport(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: a
            stdio: {command: "${BIN}", args: ["--root=${ROOT}", plain, "$${LITERAL}", "$HOME"],
                    cwd: "${ROOT}", env: {K: "${VAL}", EMPTY: "${EMPTY}"}}
          - name: b
            http: {url: "http://${HOST}:9000/mcp", headers: {X-Key: "${VAL}"}}
        """,
    )
    env = {"BIN": "/usr/bin/srv", "ROOT": "/srv/root", "VAL": SECRET, "EMPTY": "", "HOST": "10.0.0.1"}
    a, b = load_config(cfg, environ=env).specs
    assert a.transport["command"] == "/usr/bin/srv"
    assert a.transport["args"] == ("--root=/srv/root", "plain", "${LITERAL}", "$HOME")
    assert a.transport["cwd"] == "/srv/root"
    assert a.transport["env"] == {"K": SECRET, "EMPTY": ""}
    assert b.transport["url"] == "http://10.0.0.1:9000/mcp"
    assert b.transport["headers"] == {"X-Key": SECRET}


def test_missing_variable_is_an_error_naming_it_at_its_line(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: search
            http:
              url: "http://127.0.0.1:9000/mcp"
              headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
        """,
    )
    assert problems_of(cfg, environ={}) == [
        f"{cfg}:5: sources[0].http.headers.Authorization: environment variable SEARCH_TOKEN is not set "
        "(export SEARCH_TOKEN before starting the gateway, or write $${ for a literal ${)"
    ]


def test_malformed_references_are_errors(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources: [{name: a, stdio: {command: x, args: ['${OPEN', '${1X}']}}]\n")
    problems = problems_of(cfg, environ={})
    assert problems[0].startswith(f"{cfg}:1: sources[0].stdio.args[0]: unterminated ${{")
    assert problems[1].startswith(f"{cfg}:1: sources[0].stdio.args[1]: invalid variable reference")


def test_interpolated_value_is_real_for_the_engine_but_repr_shows_the_template() -> None:
    value = InterpolatedStr(f"Bearer {SECRET}", "Bearer ${TOKEN}")
    real = f"Bearer {SECRET}"
    assert value == real and str(value) == real and f"{value}" == real
    assert repr(value) == "'Bearer ${TOKEN}'"
    assert json.loads(canonical_json({"h": value})) == {"h": f"Bearer {SECRET}"}
    clone = pickle.loads(pickle.dumps(value))
    assert clone == value and repr(clone) == repr(value)


def test_changed_secret_changes_the_spec_digest(tmp_path: Path) -> None:
    """A rotated secret must respawn the connection, so the digest covers real values."""
    cfg = write(tmp_path / "g.yaml", "sources: [{name: a, http: {url: 'http://h/m', headers: {A: '${T}'}}}]")
    one = load_config(cfg, environ={"T": "one"}).specs[0]
    two = load_config(cfg, environ={"T": "two"}).specs[0]
    assert one.digest != two.digest


# --------------------------------------------------------------------------- secrets


def test_secrets_never_appear_in_reprs(tmp_path: Path) -> None:
    cfg = write(tmp_path / "gateway.yaml", MAIN)
    loaded = load_config(cfg, environ={"SEARCH_TOKEN": SECRET})
    assert loaded.specs[1].transport["headers"]["Authorization"] == f"Bearer {SECRET}"
    for text in (repr(loaded), str(loaded), repr(loaded.specs), repr(loaded.specs[1].transport)):
        assert SECRET not in text
    assert "Bearer ${SEARCH_TOKEN}" in repr(loaded.specs[1])


def test_secrets_never_appear_in_errors(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: a
            http: {url: "ftp://user:${TOKEN}@host/x", headers: {A: "${TOKEN}${MISSING}"}}
          - name: b
            stdio: {command: x, env: {K: "${TOKEN}", L: 7}}
          - name: a
            sse: {url: "http://${TOKEN}/sse"}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(cfg, environ={"TOKEN": SECRET})
    rendered = str(info.value)
    assert len(info.value.problems) == 4  # bad URL, MISSING, L not a string, duplicate name
    for text in (rendered, repr(info.value), repr(info.value.problems), repr(info.value.args)):
        assert SECRET not in text
    assert "MISSING" in rendered


def test_invalid_url_is_reported_without_its_value(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources: [{name: a, http: {url: 'ftp://${TOKEN}@host/x'}}]\n")
    problems = problems_of(cfg, environ={"TOKEN": SECRET})
    assert problems == [
        f"{cfg}:1: sources[0].http.url: not an http:// or https:// URL (e.g. http://127.0.0.1:9000/mcp)"
    ]


def test_yaml_syntax_error_does_not_quote_the_offending_line(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", f"sources:\n  - name: a\n    http: {{url: x, headers: {{A: {SECRET}: b")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert SECRET not in str(info.value)


def test_display_transport_masks_values(tmp_path: Path) -> None:
    cfg = write(tmp_path / "gateway.yaml", MAIN)
    specs = load_config(cfg, environ={"SEARCH_TOKEN": SECRET}).specs
    shown = display_transport(specs[1].transport)
    assert shown["headers"] == {"Authorization": "Bearer ${SEARCH_TOKEN}"}
    assert display_transport(specs[0].transport)["env"] == {"LEVEL": "***"}
    assert SECRET not in json.dumps(shown)


# --------------------------------------------------------------------------- error classes


def test_exactly_one_transport(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "gateway.yaml",
        """
        sources:
          - name: none
            watch: [x]
          - name: two
            http: {url: "http://a/mcp"}
            sse: {url: "http://a/sse"}
          - name: three
            stdio: {command: x}
            http: {url: "http://a/mcp"}
            sse: {url: "http://a/sse"}
        """,
    )
    hint = "(each source needs exactly one of stdio, http, sse)"
    assert problems_of(cfg) == [
        f"{cfg}:2: sources[0]: exactly one of stdio, http, sse is required, found none {hint}",
        f"{cfg}:4: sources[1]: exactly one of stdio, http, sse is required, found 2: http, sse {hint}",
        f"{cfg}:7: sources[2]: exactly one of stdio, http, sse is required, found 3: stdio, http, sse {hint}",
    ]


def test_missing_field_reports_file_line_and_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        tmp_path / "gateway.yaml",
        """
        # gateway config
        sources:
          - name: notes
            stdio:
              command: python
          - name: search
            http: {headers: {A: b}}
        """,
    )
    monkeypatch.chdir(tmp_path)
    problems = check_config("gateway.yaml")
    assert [str(p) for p in problems] == [
        "gateway.yaml:7: sources[1].http.url: field required (give the server's MCP endpoint URL)"
    ]
    assert problems[0] == ConfigProblem(
        "gateway.yaml", 7, "sources[1].http.url", "field required", "give the server's MCP endpoint URL"
    )


def test_missing_name(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources:\n  - sse: {url: 'http://a/sse'}\n")
    assert problems_of(cfg) == [f"{cfg}:2: sources[0].name: field required (every source needs a unique name)"]


def test_unknown_keys_with_did_you_mean(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: a
            stdio: {command: x, arg: [y]}
            wacth: [z]
            colour: blue
        gateway:
          prot: 1
        sourcez: []
        """,
    )
    assert problems_of(cfg) == [
        f"{cfg}:3: sources[0].stdio.arg: unknown key (did you mean 'args'?)",
        f"{cfg}:4: sources[0].wacth: unknown key (did you mean 'watch'?)",
        f"{cfg}:5: sources[0].colour: unknown key "
        "(allowed keys: name, stdio, http, sse, watch, prefix, uri_prefix, poll_seconds, timeouts, trust, "
        "overrides, prefix_verbatim, tools, resources, resource_templates, prompts, roots)",
        f"{cfg}:7: gateway.prot: unknown key (did you mean 'port'?)",
        f"{cfg}:8: sourcez: unknown key (did you mean 'sources'?)",
    ]


def test_yaml_syntax_error_reports_file_and_line(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources:\n  - name: a\n    http: {url: 'http://a/mcp'\n  - name: b\n")
    [problem] = check_config(cfg)
    assert problem.file == str(cfg) and problem.line == 4 and problem.message.startswith("YAML syntax:")


def test_yaml_syntax_error_in_drop_in_reports_the_drop_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "gateway.yaml", "include: [sources.d/*.yaml]\n")
    write(tmp_path / "sources.d" / "bad.yaml", "name: x\nhttp:\n  url: [unclosed\n")
    monkeypatch.chdir(tmp_path)
    [problem] = check_config("gateway.yaml")
    assert str(problem).startswith("sources.d/bad.yaml:4: YAML syntax:")


def test_multiple_documents_are_a_syntax_error(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources: []\n---\nsources: []\n")
    [problem] = check_config(cfg)
    assert problem.line == 2 and "single document" in problem.message


def test_duplicate_source_names_across_files_report_both_locations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path / "gateway.yaml",
        """
        sources:
          - name: notes
            stdio: {command: x}
          - name: notes
            stdio: {command: y}
        include: [sources.d/*.yaml]
        """,
    )
    write(tmp_path / "sources.d" / "dup.yaml", "# another notes\nname: notes\nsse: {url: 'http://a/sse'}\n")
    monkeypatch.chdir(tmp_path)
    assert [str(p) for p in check_config("gateway.yaml")] == [
        "gateway.yaml:4: sources[1].name: duplicate source name 'notes' (also declared at gateway.yaml:2)",
        "sources.d/dup.yaml:2: name: duplicate source name 'notes' (also declared at gateway.yaml:2)",
    ]


def test_duplicate_yaml_keys_are_errors(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "sources:\n  - name: a\n    name: b\n    sse: {url: 'http://a/sse'}\n")
    assert problems_of(cfg) == [
        f"{cfg}:3: sources[0].name: duplicate key (first set at line 2; YAML would silently keep only the last)"
    ]


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = write(tmp_path / "g.yaml", "# nothing yet\n")
    assert problems_of(empty) == [f"{empty}:1: config file is empty (write `sources: []` for none)"]
    missing = tmp_path / "nope.yaml"
    assert problems_of(missing) == [f"{missing}: file not found"]


def test_drop_in_must_be_one_source_mapping(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "include: ['d/*.yaml']\n")
    write(tmp_path / "d" / "1.yaml", "")
    write(tmp_path / "d" / "2.yaml", "- name: a\n")
    write(tmp_path / "d" / "3.yaml", "name: c\nsources: []\nsse: {url: 'http://a/sse'}\n")
    problems = check_config(cfg)
    d = tmp_path / "d"
    assert [str(p) for p in problems] == [
        f"{d}/1.yaml:1: drop-in file is empty (a drop-in holds one source mapping)",
        f"{d}/2.yaml:1: expected a mapping",
        f"{d}/3.yaml:2: sources: unknown key "
        "(a drop-in holds one source mapping (name, stdio/http/sse, ...), not a sources: list)",
    ]


def test_root_must_be_a_mapping_and_sources_a_list(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "- a\n")
    assert problems_of(cfg) == [f"{cfg}:1: expected a mapping"]
    cfg2 = write(tmp_path / "h.yaml", "sources: {name: a}\n")
    assert problems_of(cfg2) == [f"{cfg2}:1: sources: expected a list"]


def test_field_value_errors(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: "bad name!"
            stdio: {command: x, env: {LEVEL: 3}}
            prefix: "a/b"
            poll_seconds: 0.1
            timeouts: {connect_s: 0}
        gateway: {port: 70000}
        """,
    )
    assert problems_of(cfg) == [
        f"{cfg}:2: sources[0].name: a source name is 1..64 characters of A-Z a-z 0-9 _ . -",
        f"{cfg}:3: sources[0].stdio.env.LEVEL: expected a string "
        "(quote values YAML would read as numbers, booleans or null)",
        f"{cfg}:4: sources[0].prefix: a prefix is at most 64 characters of A-Z a-z 0-9 _ . -",
        f"{cfg}:5: sources[0].poll_seconds: input should be greater than or equal to 1",
        f"{cfg}:6: sources[0].timeouts.connect_s: input should be greater than 0",
        f"{cfg}:7: gateway.port: input should be less than or equal to 65535",
    ]


def test_name_length_limit(tmp_path: Path) -> None:
    ok = write(tmp_path / "ok.yaml", f"sources: [{{name: {'n' * 64}, sse: {{url: 'http://a/sse'}}}}]\n")
    assert check_config(ok) == []
    bad = write(tmp_path / "bad.yaml", f"sources: [{{name: {'n' * 65}, sse: {{url: 'http://a/sse'}}}}]\n")
    assert len(check_config(bad)) == 1


def test_non_utf8_file(tmp_path: Path) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_bytes(b"sources: []\n# caf\xe9\n")
    assert [str(p) for p in check_config(cfg)] == [f"{cfg}:2: file is not valid UTF-8"]


def test_one_broken_source_does_not_hide_problems_of_others(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: a
          - name: b
            sse: {url: "${NOPE}"}
        """,
    )
    problems = check_config(cfg, environ={})
    assert [(p.line, p.field) for p in problems] == [(2, "sources[0]"), (4, "sources[1].sse.url")]


def test_source_bound_at_n_and_n_plus_one(tmp_path: Path) -> None:
    def config(n: int) -> Path:
        items = "".join(f"  - {{name: s{i}, sse: {{url: 'http://a/sse'}}}}\n" for i in range(n))
        return write(tmp_path / f"g{n}.yaml", f"sources:\n{items}")

    assert len(load_config(config(128)).specs) == 128
    problems = problems_of(config(129))
    assert problems == [
        f"{tmp_path}/g129.yaml:130: sources[128]: too many sources: 129 declared, the limit is 128 "
        "(remove sources or split them across gateways)"
    ]
    assert len(load_config(config(3), max_sources=3).specs) == 3


def test_view_bound_at_n_and_n_plus_one(tmp_path: Path) -> None:
    """DESIGN §6: views are bounded to 64 (a search index and a view table each per publication)."""

    def config(n: int) -> Path:
        items = "".join(f"  - {{name: v{i}}}\n" for i in range(n))
        return write(tmp_path / f"v{n}.yaml", f"sources: [{{name: s, sse: {{url: 'http://a/sse'}}}}]\nviews:\n{items}")

    assert len(load_config(config(64)).curation.views) == 64
    assert problems_of(config(65)) == [
        f"{tmp_path}/v65.yaml:2: views: tuple should have at most 64 items after validation, not 65"
    ]


def test_config_error_carries_discovered_inputs(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", "include: ['d/*.yaml']\nsources: [{name: a}]\n")
    write(tmp_path / "d" / "x.yaml", "name: x\nsse: {url: 'http://a/sse'}\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert info.value.files == (cfg, tmp_path / "d" / "x.yaml")
    assert info.value.include_globs == (str(tmp_path / "d" / "*.yaml"),)


def test_problem_rendering_variants() -> None:
    assert str(ConfigProblem("f.yaml", 3, "a.b", "msg", "hint")) == "f.yaml:3: a.b: msg (hint)"
    assert str(ConfigProblem("f.yaml", None, "", "msg")) == "f.yaml: msg"
    assert str(ConfigProblem("f.yaml", 1, "", "msg", "h")) == "f.yaml:1: msg (h)"
    error = ConfigError([ConfigProblem("a", 1, "x", "m"), ConfigProblem("b", 2, "y", "n")])
    assert str(error) == "a:1: x: m\nb:2: y: n"


def test_check_config_is_empty_for_a_valid_config(tmp_path: Path) -> None:
    cfg = write(tmp_path / "gateway.yaml", MAIN)
    assert check_config(cfg, environ={"SEARCH_TOKEN": "x"}) == []


def test_models_are_frozen(tmp_path: Path) -> None:
    settings = GatewaySettings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError subtype
        settings.port = 1


def test_name_with_trailing_newline_is_rejected(tmp_path: Path) -> None:
    # A "$"-anchored regex would accept "abc\n"; names must match in full.
    cfg = write(tmp_path / "g.yaml", 'sources: [{name: "abc\\n", sse: {url: "http://a/sse"}}]\n')
    assert [p.field for p in check_config(cfg)] == ["sources[0].name"]


def test_anonymous_access_and_declared_sessions(tmp_path: Path) -> None:
    long_secret = SECRET * 2  # ≥ 16 characters
    cfg = write(
        tmp_path / "g.yaml",
        """
        gateway:
          anonymous: {grant_policy: follow, sources: [up]}
        sources:
          - name: up
            stdio: {command: x}
        sessions:
          - {name: ci, token: "${CI}", grant_policy: explicit, names: [up__a]}
          - {name: me, token: "${ME}", grant_policy: follow, sources: [up], control_tools: true}
        """,
    )
    loaded = load_config(cfg, environ={"CI": long_secret, "ME": long_secret + "x"})
    anonymous = loaded.settings.anonymous
    assert anonymous is not None and anonymous.grant_policy == "follow" and anonymous.sources == ("up",)
    ci, me = loaded.sessions
    assert (ci.name, ci.policy, ci.names, ci.token) == ("ci", "explicit", ("up__a",), long_secret)
    assert (me.policy, me.sources, me.control_tools) == ("follow", ("up",), True)
    assert long_secret not in repr(loaded) and long_secret not in repr(ci)  # a token is a secret
    # Absent: no anonymous access, no sessions.
    plain = load_config(write(tmp_path / "p.yaml", "sources: []\n"))
    assert plain.settings.anonymous is None and plain.sessions == ()


def test_anonymous_and_session_problems_never_show_tokens(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        gateway:
          anonymous: {grant_policy: follow, sources: [nope]}
        sources:
          - name: up
            stdio: {command: x}
        sessions:
          - {name: a, token: "${SHORT}", grant_policy: none}
          - {name: b, token: "${TOK}", grant_policy: follow, sources: [upp]}
          - {name: b, token: "${TOK}", grant_policy: current}
          - {name: c, token: "${UNSET}", grant_policy: current}
        """,
    )
    found = [p[p.index("g.yaml") :] for p in problems_of(cfg, environ={"SHORT": "short", "TOK": SECRET * 2})]
    assert found == [
        "g.yaml:2: gateway.anonymous.sources[0]: no source named 'nope'",
        "g.yaml:7: sessions[0].token: the token must be at least 16 characters"
        " (generate one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')",
        "g.yaml:8: sessions[1].sources[0]: no source named 'upp' (did you mean 'up'?)",
        "g.yaml:9: sessions[2].name: duplicate session name 'b' (each session needs its own name)",
        "g.yaml:9: sessions[2].token: the same token as sessions[1] (every session needs its own token)",
        "g.yaml:10: sessions[3].token: environment variable UNSET is not set"
        " (export UNSET before starting the gateway, or write $${ for a literal ${)",
    ], found
    assert not any(SECRET in p or "'short'" in p for p in found)
    # Policy-specific keys, and anonymous access must name its policy.
    bad = write(
        tmp_path / "b.yaml",
        """
        gateway:
          anonymous: {sources: [up]}
        sessions:
          - {name: x, token: "0123456789abcdefgh", grant_policy: current, names: [a]}
        """,
    )
    found = problems_of(bad)
    assert any("gateway.anonymous.grant_policy: field required" in p for p in found), found
    assert any("sessions[0]: names go with grant_policy: explicit" in p for p in found), found
