"""deploy/kubernetes/: the kustomize base and the Redis overlay render with ``kubectl kustomize``
and every object validates, strictly (no unknown field), against the Kubernetes schemas that
``kubernetes-validate`` ships (offline), for the oldest and the newest version it knows; and the
rendered objects keep the promises of README "Deploy": probes, a non-root read-only container,
a grace period longer than the gateway's, a config the gateway loads, N replicas on Redis."""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from mcp_reconciler.api.host_check import allowed
from mcp_reconciler.reconciler.config import load_config
from tests.deploy.tools import require
from tests.support.readme import REPO_ROOT, block

KUSTOMIZE = REPO_ROOT / "deploy" / "kubernetes"
TREES = ("base", "overlays/redis")
#: The oldest Kubernetes the manifests are checked against, and the newest kubernetes-validate knows.
VERSIONS = ("1.30.0", latest_version())


def render(tree: str | Path) -> list[dict[str, Any]]:
    kubectl = require("kubectl", "kubernetes-client", in_ci=True)
    proc = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE / tree)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def gateway_config(docs: list[dict[str, Any]], tmp: Path, environ: dict[str, str] | None = None) -> Any:
    """The gateway.yaml of the ConfigMap the gateway's Deployment mounts, loaded as the gateway does."""
    deployment = one(docs, "Deployment", "mcp-reconciler")
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    config_map = one(docs, "ConfigMap", volume["configMap"]["name"])
    path = tmp / "gateway.yaml"
    path.write_text(config_map["data"]["gateway.yaml"])
    return load_config(path, environ=environ or {})


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_render_and_validate(tree: str, version: str) -> None:
    docs = render(tree)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any schema error


def test_the_validation_is_strict() -> None:
    """The check above can fail: a misspelt field and a wrong type are both refused."""
    deployment = one(render("base"), "Deployment")
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 45
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "three"
    for bad in (typo, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_base_objects(tmp_path: Path) -> None:
    docs = render("base")
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service"]
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for selecting in (one(docs, "Service")["spec"]["selector"], one(docs, "PodDisruptionBudget")["spec"]["selector"]):
        selector = selecting.get("matchLabels", selecting)
        assert selector.items() <= labels.items()
    (container,) = pod["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {"requests", "limits"} <= container["resources"].keys()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # The only writable place is /tmp (TMPDIR in the image), the config is mounted read-only.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/etc/mcp-reconciler", "/tmp"}
    assert mounts["/etc/mcp-reconciler"]["readOnly"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MCP_RECONCILER_CONFIG"] == "/etc/mcp-reconciler/gateway.yaml"
    # The tokens come from the Secret the base ships (empty: /v1 closed until they are set).
    (source,) = container["envFrom"]
    secret = one(docs, "Secret", source["secretRef"]["name"])
    assert set(secret["stringData"]) == {"MCP_RECONCILER_OPERATOR_TOKENS", "MCP_RECONCILER_OWNER_TOKENS"}
    assert not any(secret["stringData"].values())
    # The kubelet's SIGKILL comes after preStop + the gateway's whole grace, with room for the upstreams.
    settings = gateway_config(docs, tmp_path).settings
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] >= float(pre_stop[1]) + settings.shutdown_grace_s + 10
    # The Service's in-cluster names pass the Host check (421 otherwise); other names do not.
    service = one(docs, "Service")
    port = service["spec"]["ports"][0]["port"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert container["ports"][0]["containerPort"] == port == int(env["MCP_RECONCILER_PORT"])
    for host in ("mcp-reconciler", f"mcp-reconciler:{port}", f"mcp-reconciler.default.svc.cluster.local:{port}"):
        assert allowed(host, settings.allowed_hosts), host
    assert not allowed(f"evil.example:{port}", settings.allowed_hosts)
    assert settings.anonymous is None  # /mcp needs a session token in a cluster


def test_redis_overlay(tmp_path: Path) -> None:
    docs = render("overlays/redis")
    deployment = one(docs, "Deployment", "mcp-reconciler")
    assert deployment["spec"]["replicas"] > 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    url_ref = env["REDIS_URL"]["valueFrom"]["secretKeyRef"]
    url = one(docs, "Secret", url_ref["name"])["stringData"][url_ref["key"]]
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    config = gateway_config(docs, tmp_path, {"REDIS_URL": url, "POD_NAME": "mcp-reconciler-abc"})
    assert config.cluster is not None
    assert (config.cluster.store, config.cluster.replica_id) == (url, "mcp-reconciler-abc")
    # The URL names the Redis the overlay runs for trying it.
    redis_service = one(docs, "Service", "mcp-reconciler-redis")
    m = re.fullmatch(r"redis://([^:/]+):(\d+)/\d+", url)
    assert m and m.group(1) == redis_service["metadata"]["name"]
    assert int(m.group(2)) == redis_service["spec"]["ports"][0]["port"]
    redis = one(docs, "Deployment", "mcp-reconciler-redis")
    assert redis["spec"]["template"]["metadata"]["labels"].items() >= redis_service["spec"]["selector"].items()
    # Only the gateway's pods count against its disruption budget.
    pdb = one(docs, "PodDisruptionBudget")
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    # The overlay's config is the base's plus the cluster section.
    overlay_config = yaml.safe_load((KUSTOMIZE / "overlays" / "redis" / "gateway.yaml").read_text())
    assert overlay_config.pop("cluster")
    assert overlay_config == yaml.safe_load((KUSTOMIZE / "base" / "gateway.yaml").read_text())
    # Everything else is the base's.
    base = {(d["kind"], d["metadata"]["name"]) for d in render("base") if d["kind"] != "ConfigMap"}
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in docs}


def test_readme_kubernetes_block() -> None:
    """Each README line is a kubectl command on one of deploy/kubernetes/'s trees; ``apply -k`` is
    checked as what it applies (``kubectl kustomize`` of the same tree, rendered above)."""
    trees: set[str] = set()
    for line in block("deploy-kubernetes").lines():
        argv = shlex.split(line.split("#", 1)[0])
        assert argv[0] == "kubectl", line
        (tree,) = [a for a in argv if a.startswith("deploy/kubernetes/")]
        assert (REPO_ROOT / tree / "kustomization.yaml").is_file(), line
        assert ("apply" in argv and "-k" in argv) or argv[1] == "kustomize", line
        trees.add(tree.removeprefix("deploy/kubernetes/").rstrip("/"))
    assert trees == set(TREES)


def test_readme_allowed_hosts_block(tmp_path: Path) -> None:
    """The README's allow-list loads, and admits what its comments say (and nothing else)."""
    path = tmp_path / "gateway.yaml"
    path.write_text("sources: []\n" + block("deploy-allowed-hosts").text)
    hosts = load_config(path, environ={}).settings.allowed_hosts
    for host in ("mcp.example.com", "mcp.example.com:443", "mcp-reconciler:8765"):
        assert allowed(host, hosts), host
    for host in ("mcp.example.com.evil:443", "evil.example", "mcp-reconciler"):
        assert not allowed(host, hosts), host
