"""README.md's fenced blocks, each named by the ``<!-- readme-test: NAME -->`` line before it.

A test that executes or checks a block finds it with :func:`block`; ``tests/docs/test_readme.py``
fails when a block has no name or a name has no test (:data:`CHECKED` lists who checks what)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
_MARKER = re.compile(r"^<!-- readme-test: ([a-z0-9-]+) -->$")

#: Every named block and the test that executes or checks it.
CHECKED = {
    "make-targets": "tests/docs/test_readme.py::test_make_targets",
    "wheel-install": "tests/packaging/test_wheel.py (slow)",
    "operator-workflow": "tests/docs/test_readme.py::test_operator_workflow_and_sdk_example",
    "sdk-example": "tests/docs/test_readme.py::test_operator_workflow_and_sdk_example",
    "embedded-engine": "tests/docs/test_readme.py::test_embedded_engine_example",
    "demo-output": "tests/docs/test_readme.py::test_demo_output",
    "config-commands": "tests/docs/test_readme.py::test_config_commands",
    "config-example": "tests/docs/test_readme.py::test_config_example",
    "curation-config": "tests/docs/test_readme_curation.py::test_two_views_for_two_agents_as_the_readme_says",
    "curation-names": "tests/docs/test_readme_curation.py::test_two_views_for_two_agents_as_the_readme_says",
    "search-config": "tests/docs/test_readme_search.py::test_search_mode_demo_prints_what_the_readme_says",
    "search-demo": "tests/docs/test_readme_search.py::test_search_mode_demo_prints_what_the_readme_says",
    "search-output": "tests/docs/test_readme_search.py::test_search_mode_demo_prints_what_the_readme_says",
    "approvals-config": "tests/docs/test_readme_approvals.py::test_approvals_config_block",
    "approvals-cli": "tests/docs/test_readme_approvals.py::test_approvals_cli_block",
    "anonymous-config": "tests/docs/test_readme.py::test_security_blocks",
    "anonymous-warning": "tests/docs/test_readme.py::test_security_blocks",
    "sessions-config": "tests/docs/test_readme.py::test_security_blocks",
    "oauth-config": "tests/docs/test_readme_oauth.py::test_oauth_config_block_loads",
    "oauth-challenge": "tests/docs/test_readme_oauth.py::test_oauth_challenge_and_call_blocks",
    "oauth-call": "tests/docs/test_readme_oauth.py::test_oauth_challenge_and_call_blocks",
    "metadata-config": "tests/docs/test_readme_metadata.py::test_metadata_config_example",
    "metadata-served": "tests/docs/test_readme_metadata.py::test_I20_readme_served_definition_and_diagnostics",
    "metadata-status": "tests/docs/test_readme_metadata.py::test_I20_readme_served_definition_and_diagnostics",
    "limits-defaults": "tests/docs/test_readme.py::test_limits_defaults",
    "limits-config": "tests/docs/test_readme_limits.py::test_limits_config_and_error_as_the_readme_says",
    "limits-error": "tests/docs/test_readme_limits.py::test_limits_config_and_error_as_the_readme_says",
    "failure-config": "tests/docs/test_readme_failures.py::test_failure_config_and_output",
    "failure-output": "tests/docs/test_readme_failures.py::test_failure_config_and_output",
    "sessions-cli": "tests/docs/test_readme_failures.py::test_sessions_cli_block",
    "import-cli": "tests/docs/test_readme_failures.py::test_import_blocks",
    "import-output": "tests/docs/test_readme_failures.py::test_import_blocks",
    "source-keys": "tests/docs/test_readme_failures.py::test_source_keys_block",
    "schema-line": "tests/docs/test_config_reference.py::test_readme_schema_line_points_at_the_schema",
    "env-settings": "tests/docs/test_readme_failures.py::test_env_settings_block",
    "source-timeouts": "tests/docs/test_readme_failures.py::test_source_timeouts_block",
    "quota-refusal": "tests/docs/test_readme.py::test_quota_blocks",
    "session-expiry": "tests/docs/test_readme.py::test_quota_blocks",
    "upstream-message-error": "tests/e2e/test_upstream_bounds.py::test_an_oversized_answer_is_refused",
    "cluster-config": "tests/cluster/test_readme_cluster.py::test_cluster_config_block",
    "cluster-recipe": "tests/cluster/test_readme_cluster.py::test_recipe_and_haproxy_stickiness (slow)",
    "cluster-haproxy": "tests/cluster/test_readme_cluster.py::test_recipe_and_haproxy_stickiness (slow)",
    "deploy-allowed-hosts": "tests/deploy/test_kubernetes.py::test_readme_allowed_hosts_block",
    "deploy-image": "tests/deploy/test_image.py (slow: podman runs the lines, `make image-test`)",
    "deploy-layer": "tests/deploy/test_image.py::test_readme_layer_block",
    "deploy-kubernetes": "tests/deploy/test_kubernetes.py::test_readme_kubernetes_block",
    "deploy-systemd": "tests/deploy/test_systemd.py::test_readme_systemd_block",
    "telemetry-listen-config": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
    "prometheus-scrape": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
    "otel-collector": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
    "audit-config": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
    "audit-record": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
    "audit-tail": "tests/docs/test_readme_telemetry.py::test_observe_it_blocks",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its marker name (``None`` if unmarked), info string, body and line."""

    name: str | None
    info: str
    text: str
    line: int

    def lines(self) -> list[str]:
        """Non-empty lines of the body."""
        return [line for line in self.text.splitlines() if line.strip()]


def blocks(path: Path = README) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        info, start = lines[i][3:].strip(), i
        prev = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = _MARKER.match(prev.strip())
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.append(Block(marker.group(1) if marker else None, info, "\n".join(lines[i + 1 : end]) + "\n", start + 1))
        i = end + 1
    return out


def block(name: str) -> Block:
    (found,) = [b for b in blocks() if b.name == name]
    return found
