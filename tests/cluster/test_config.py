"""The ``cluster:`` section of the gateway YAML: ``${VAR}`` interpolation (the values are secrets:
registered for log redaction, never in a repr or an error), validation with file:line, and its
absence meaning one replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_reconciler.reconciler.config import ConfigError, load_config


def write(tmp: Path, cluster: str) -> Path:
    cfg = tmp / "gateway.yaml"
    cfg.write_text(f"sources: []\n{cluster}")
    return cfg


def test_store_url_is_interpolated_and_secret(tmp_path: Path) -> None:
    url = "redis://:pa55-w0rd-xyz@127.0.0.1:6390/0"
    loaded = load_config(
        write(tmp_path, "cluster:\n  store: ${REDIS_URL}\n  replica_id: ${REPLICA}\n  staleness_s: 2\n"),
        environ={"REDIS_URL": url, "REPLICA": "r1"},
    )
    assert loaded.cluster is not None
    assert loaded.cluster.store == url and loaded.cluster.replica_id == "r1" and loaded.cluster.staleness_s == 2
    assert url in loaded.secret_values  # redacted by value in every log line
    assert "pa55" not in repr(loaded.cluster) and "pa55" not in repr(loaded)


def test_absent_section_is_one_replica(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")).cluster is None


@pytest.mark.parametrize(
    ("cluster", "env", "expected"),
    [
        ("cluster:\n  store: http://x\n", {}, "gateway.yaml:3: cluster.store:"),
        ("cluster:\n  store: ${NOPE}\n", {}, "gateway.yaml:3: cluster.store:"),
        ("cluster:\n  store: ${URL}\n", {"URL": "ftp://secret-host"}, "gateway.yaml:3: cluster.store:"),
        ("cluster:\n  staleness_s: 0\n", {}, "gateway.yaml:3: cluster.staleness_s:"),
    ],
)
def test_invalid_cluster_sections_name_the_line(
    tmp_path: Path, cluster: str, env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, cluster), environ=env)
    text = str(caught.value)
    assert expected in text, text
    assert "secret-host" not in text
