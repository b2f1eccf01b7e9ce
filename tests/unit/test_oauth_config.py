"""The ``oauth:`` section and per-source ``oauth`` client credentials in the config file:
parsed, validated with ``file:line: field`` problems, secrets interpolated and never shown."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.config import ConfigError, InterpolatedStr, display_transport, load_config
from mcp_reconciler.reconciler.oauth_config import DEFAULT_ALGORITHMS, MAX_ISSUERS

SECRET = "cc-s3cr3t-7d1a"
OLD_NS = 1_600_000_000 * 10**9


def write(tmp: Path, text: str) -> Path:
    path = tmp / "gateway.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    os.utime(path, ns=(OLD_NS, OLD_NS))
    return path


def problems(path: Path, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, environ=environ or {})
    return [str(p).removeprefix(f"{path.parent}/") for p in info.value.problems]


VALID = """
sources:
  - name: search
    http:
      url: https://search.example.com/mcp
      oauth:
        token_url: https://idp.example.com/oauth/token
        client_id: gateway
        client_secret: ${SEARCH_SECRET}
        scopes: [search.read]
        resource: https://search.example.com/mcp
oauth:
  resource: https://gateway.example.com/mcp
  resource_name: Example gateway
  issuers:
    - issuer: https://idp.example.com
    - issuer: http://127.0.0.1:9000/realms/dev
      algorithms: [ES256]
      introspection: {url: "http://127.0.0.1:9000/introspect", client_id: gw, client_secret: "${INTRO_SECRET}"}
  roles: {required_scopes: [mcp], operator_scopes: ["mcp:admin"], operator_claims: {groups: [platform-admins]}}
  grants: {policy: explicit, scope_prefix: "tool:"}
  jwks: {refresh_interval_s: 60, max_stale_s: 600}
"""


def test_a_full_oauth_config_loads_with_secrets_interpolated(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path, VALID), environ={"SEARCH_SECRET": SECRET, "INTRO_SECRET": "intro-" + SECRET})
    oauth = loaded.oauth
    assert oauth is not None
    assert oauth.resource == "https://gateway.example.com/mcp" and oauth.expected_audience == oauth.resource
    assert [i.issuer for i in oauth.issuers] == ["https://idp.example.com", "http://127.0.0.1:9000/realms/dev"]
    assert oauth.issuers[0].algorithms == DEFAULT_ALGORITHMS
    intro = oauth.issuers[1].introspection
    assert intro is not None and intro.client_secret == "intro-" + SECRET
    assert isinstance(intro.client_secret, InterpolatedStr) and SECRET not in repr(oauth)
    assert oauth.grants.policy == "explicit" and oauth.jwks.max_stale_s == 600
    spec = loaded.specs[0]
    upstream = spec.transport["oauth"]
    assert upstream["client_secret"] == SECRET and tuple(upstream["scopes"]) == ("search.read",)
    assert SECRET not in repr(spec)
    shown = display_transport(spec.transport)
    assert shown["oauth"]["client_secret"] == "${SEARCH_SECRET}" and shown["oauth"]["client_id"] == "gateway"
    # A rotated secret changes the spec digest: the source reconnects with the new credentials.
    other = load_config(write(tmp_path, VALID), environ={"SEARCH_SECRET": "rotated", "INTRO_SECRET": "x"})
    assert other.specs[0].digest != spec.digest


def test_no_oauth_section_means_none(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "sources: []\n"), environ={}).oauth is None


def test_literal_client_secret_is_masked_when_displayed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          - name: s
            sse:
              url: http://127.0.0.1:9/sse
              oauth: {token_url: "http://127.0.0.1:9/token", client_id: gw, client_secret: pasted-secret}
        """,
    )
    shown = display_transport(load_config(path, environ={}).specs[0].transport)
    assert shown["oauth"]["client_secret"] == "***"


def test_insecure_or_dangerous_settings_are_refused_with_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        sources:
          - name: up
            http:
              url: http://127.0.0.1:9/mcp
              oauth: {token_url: "http://idp.example.com/token", client_id: gw, client_secret: s}
        oauth:
          resource: http://gateway.example.com/mcp
          issuers:
            - issuer: https://idp.example.com
              algorithms: [RS256, HS256, none]
          jwks: {max_keys: 0}
          grants: {policy: explicit}
          roles: {operator_scopes: ["has space"]}
        """,
    )
    assert problems(path) == [
        "gateway.yaml:5: sources[0].http.oauth.token_url: must be https:// (plain http:// only on loopback)",
        "gateway.yaml:7: oauth.resource: must be https:// (plain http:// only on loopback)",
        "gateway.yaml:10: oauth.issuers[0].algorithms: not allowed: HS256, none "
        "(asymmetric only; 'none' and HS* are never accepted)",
        "gateway.yaml:11: oauth.jwks.max_keys: input should be greater than or equal to 1",
        "gateway.yaml:12: oauth.grants: policy 'explicit' needs scope_prefix or claim (where the names come from)",
        "gateway.yaml:13: oauth.roles.operator_scopes: a scope is a non-empty token without spaces, quotes or "
        "backslashes",
    ]
    path = write(
        tmp_path,
        """
        sources:
          - name: up
            http:
              url: http://127.0.0.1:9/mcp
              headers: {Authorization: "Bearer x"}
              oauth: {token_url: "https://idp.example.com/token", client_id: gw, client_secret: s}
        oauth:
          resource: https://gateway.example.com/mcp
          issuers: [{issuer: "https://idp.example.com"}, {issuer: "https://idp.example.com"}]
          jwks: {refresh_interval_s: 600, max_stale_s: 60}
        """,
    )
    assert problems(path) == [
        "gateway.yaml:3: sources[0].http: an Authorization header and oauth are both set; keep one of them",
        "gateway.yaml:9: oauth.issuers: an issuer is listed twice",
        "gateway.yaml:10: oauth.jwks: max_stale_s must be at least refresh_interval_s",
    ]


def test_issuer_list_bounds_and_duplicates(tmp_path: Path) -> None:
    def config(issuers: list[str], *, introspect: int = 0) -> Path:
        lines = []
        for i, issuer in enumerate(issuers):
            lines.append(f"    - issuer: {issuer}")
            if i < introspect:
                lines.append(f"      introspection: {{url: 'https://i{i}.test/i', client_id: c, client_secret: s}}")
        body = "\n".join(lines)
        return write(tmp_path, f"oauth:\n  resource: https://gw.test/mcp\n  issuers:\n{body}\n")

    assert load_config(config([f"https://i{i}.test" for i in range(MAX_ISSUERS)]), environ={}).oauth is not None
    too_many = problems(config([f"https://i{i}.test" for i in range(MAX_ISSUERS + 1)]))
    assert too_many == [f"gateway.yaml:3: oauth.issuers: list 1 to {MAX_ISSUERS} issuers"]
    assert problems(config([])) == ["gateway.yaml:3: oauth.issuers: expected a list"]  # "issuers:" alone is null
    assert "listed twice" in problems(config(["https://a.test", "https://a.test"]))[0]
    assert (
        "at most one issuer may configure introspection"
        in problems(config(["https://a.test", "https://b.test"], introspect=2))[0]
    )


def test_unset_secret_variables_are_named_not_shown(tmp_path: Path) -> None:
    found = problems(write(tmp_path, VALID), environ={})
    assert found == [
        "gateway.yaml:8: sources[0].http.oauth.client_secret: environment variable SEARCH_SECRET is not set "
        "(export SEARCH_SECRET before starting the gateway, or write $${ for a literal ${)",
        "gateway.yaml:18: oauth.issuers[1].introspection.client_secret: environment variable INTRO_SECRET is not set "
        "(export INTRO_SECRET before starting the gateway, or write $${ for a literal ${)",
    ]


def test_unknown_keys_get_suggestions(tmp_path: Path) -> None:
    text = "oauth:\n  resource: https://gw.test/mcp\n  issuers: [{issuer: 'https://a.test', jwks_uri: x}]\n"
    path = write(tmp_path, text)
    assert problems(path) == ["gateway.yaml:3: oauth.issuers[0].jwks_uri: unknown key (did you mean 'jwks_url'?)"]
