"""The sessions overlay in deploy/kubernetes/sessions/ (docs/kubernetes.md#sessions), checked without a
cluster: its manifests validate in strict mode; kustomize builds it into the base with the Deployment
replaced by a StatefulSet of the very same pod (but for the replica's name in its environment), a
headless Service for the pods' names, and an nginx router whose configuration nginx itself accepts and
whose routing is deploy/nginx/sessions.conf's, which tests/deploy/test_proxy_routing.py runs for real.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.deploy.test_kubernetes import KUBERNETES_VERSIONS, documents, validate

BASE = REPO / "deploy" / "kubernetes" / "base"
OVERLAY = REPO / "deploy" / "kubernetes" / "sessions"
MANIFESTS = sorted(path for path in OVERLAY.glob("*.yaml") if path.name != "kustomization.yaml")
NGINX = "/usr/sbin/nginx"


def one(path: Path, kind: str) -> dict[str, Any]:
    [found] = [document for document in documents(path) if document["kind"] == kind]
    return found


def built() -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    done = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=[path.name for path in MANIFESTS])
def test_every_manifest_of_the_overlay_validates_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    for document in documents(path):
        validate(document, version)


def test_kustomize_builds_the_base_with_a_statefulset_in_the_deployment_s_place_and_a_router() -> None:
    objects = built()
    for document in objects:
        validate(document, KUBERNETES_VERSIONS[-1])
    names = {(document["kind"], document["metadata"]["name"]) for document in objects}
    assert ("StatefulSet", "python-runner-mcp") in names
    assert ("Deployment", "python-runner-mcp") not in names, "the StatefulSet replaces it"
    assert {("Deployment", "python-runner-mcp-router"), ("Service", "python-runner-mcp-router")} <= names
    assert ("Service", "python-runner-mcp-pods") in names
    [hpa] = [document for document in objects if document["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "python-runner-mcp",
    }
    assert set(
        Path(item).name for item in yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())["resources"]
    ) == {
        "base",
        *(path.name for path in MANIFESTS),
    }


def test_the_statefulset_runs_the_deployment_s_pod_field_for_field_but_for_its_replica_name() -> None:
    deployment = one(BASE / "deployment.yaml", "Deployment")
    statefulset = one(OVERLAY / "statefulset.yaml", "StatefulSet")
    pod = copy.deepcopy(statefulset["spec"]["template"])
    [container] = pod["spec"]["containers"]
    [replica] = [item for item in container["env"] if item["name"] == "RUNNER_HTTP_REPLICA"]
    assert replica["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    container["env"].remove(replica)
    assert pod == deployment["spec"]["template"], "the same pod: a change to one must be made to the other"
    assert statefulset["spec"]["selector"] == deployment["spec"]["selector"]
    assert statefulset["spec"]["serviceName"] == "python-runner-mcp-pods"


def test_the_headless_service_names_the_statefulset_s_pods() -> None:
    service = one(OVERLAY / "pods-service.yaml", "Service")
    statefulset = one(OVERLAY / "statefulset.yaml", "StatefulSet")
    assert service["metadata"]["name"] == statefulset["spec"]["serviceName"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]


def router_conf() -> str:
    text: str = one(OVERLAY / "router-configmap.yaml", "ConfigMap")["data"]["nginx.conf"]
    return text


def test_the_router_routes_a_handle_to_the_pod_it_names_and_the_rest_to_the_service() -> None:
    conf = router_conf()
    statefulset = one(OVERLAY / "statefulset.yaml", "StatefulSet")
    name = statefulset["metadata"]["name"]
    pattern = re.search(r'"~\^s-\(\?<name>([^)]*)\)\\\.', conf)
    assert pattern, "the map that takes the replica's name out of the handle"
    handle = f"s-{name}-3.2c8XgL0v6mBvR6pPZ9rQ3tFQ1kq0b0hD"
    assert re.match(rf"^s-(?P<name>{pattern.group(1)})\.", handle).group("name") == f"{name}-3"  # type: ignore[union-attr]
    assert not re.match(rf"^s-(?P<name>{pattern.group(1)})\.", "s-evil.example.com.x"), "no other host"
    for prefix, held in (
        (r"t-", "t-{}.Qm9vTHVzZXJfdGFza19pZF8xOTJiaXRz"),
        (r"runner://output/", "runner://output/{}.abc/stdout"),
    ):
        task = re.search(rf'"~\^\[\^\|\]\*\\\|{re.escape(prefix)}\(\?<name>([^)]*)\)\\\.', conf)
        assert task, f"the map that takes the replica's name out of Mcp-Name ({prefix})"
        got = re.match(rf"^{re.escape(prefix)}(?P<name>{task.group(1)})\.", held.format(f"{name}-2"))
        assert got is not None
        assert got.group("name") == f"{name}-2"
    assert f"$runner_replica.{statefulset['spec']['serviceName']}." in conf
    assert "proxy_pass http://$runner_backend:8000;" in conf
    shipped = (REPO / "deploy" / "nginx" / "sessions.conf").read_text()
    for piece in ('"~^2026-07-28\\|" 0;', "proxy_buffering off;", "proxy_http_version 1.1;"):
        assert piece in conf, piece
        assert piece in shipped, piece


def test_nginx_accepts_the_router_s_configuration(tmp_path: Path) -> None:
    if not Path(NGINX).exists():
        pytest.skip(f"no {NGINX}: `make container-tools` installs Debian's nginx-light as root")
    # The cluster's DNS name cannot be looked up here: the same configuration with a resolver address.
    conf = router_conf().replace("resolver kube-dns.kube-system.svc.cluster.local", "resolver 127.0.0.1")
    assert "resolver 127.0.0.1" in conf
    (tmp_path / "nginx.conf").write_text(conf)
    done = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_router_may_reach_the_servers_and_the_dns_and_nothing_else() -> None:
    policy = one(OVERLAY / "router-networkpolicy.yaml", "NetworkPolicy")
    [to_servers, to_dns] = policy["spec"]["egress"]
    assert to_servers["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "python-runner-mcp"}}}]
    assert [port["port"] for port in to_servers["ports"]] == [8000]
    assert {port["port"] for port in to_dns["ports"]} == {53}
    # Found by a review of the claims: the DNS rule's destination was not looked at (port 53 of every
    # address passed), nor the router's user.
    assert to_dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    router = one(OVERLAY / "router-deployment.yaml", "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == router["spec"]["selector"]["matchLabels"]
    pod = router["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert "runAsUser" not in container["securityContext"] or container["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert "add" not in container["securityContext"]["capabilities"]
