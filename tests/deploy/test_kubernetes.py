"""The Kubernetes base in deploy/kubernetes/ (docs/kubernetes.md), checked without a cluster.

- Every manifest, the example Secret included, validates against the Kubernetes OpenAPI schemas bundled
  with kubernetes-validate, in strict mode (an unknown or misspelt field fails), for the oldest Kubernetes
  the page names and the newest bundled; a broken copy must fail, so the check cannot pass vacuously.
- kustomization.yaml lists every manifest but the example Secret, and the base carries no token.
- The Deployment keeps the Docker line's hardening, field by field; its probes, preStop and grace agree with
  the server's shutdown; what it lets runs use together fits its memory limit.
- Every variable the Deployment sets is one the server reads.
Where kubectl is installed, `kubectl kustomize` (no cluster needed) must build the base, and what it builds
validates too. Nothing is applied to a cluster here.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO

BASE = REPO / "deploy" / "kubernetes" / "base"
KUSTOMIZATION = BASE / "kustomization.yaml"
EXAMPLE_SECRET = BASE / "secret.example.yaml"
MANIFESTS = sorted(path for path in BASE.glob("*.yaml") if path != KUSTOMIZATION)
APP = "python-runner-mcp"
TOKENS_SECRET = "python-runner-mcp-tokens"
UID = 10001
# The oldest Kubernetes docs/kubernetes.md names, and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ["1.30", kubernetes_validate.latest_version()]
# What a Kustomization of kustomize v5 may hold (kustomize.config.k8s.io/v1beta1), as far as a base uses it.
KUSTOMIZATION_FIELDS = {
    "apiVersion", "kind", "metadata", "resources", "components", "labels", "commonLabels", "commonAnnotations",
    "namePrefix", "nameSuffix", "namespace", "images", "replicas", "patches", "configMapGenerator",
    "secretGenerator", "generatorOptions",
}  # fmt: skip
# The HTTP transport's settings, which docs/configuration.md does not list yet: the engineer building the
# transport in runner/ documents them there; until then they are named here (the names runner/config/ reads).
HTTP_SETTINGS = {
    "RUNNER_TRANSPORT",
    "RUNNER_HTTP_HOST",
    "RUNNER_HTTP_PORT",
    "RUNNER_HTTP_PATH",
    "RUNNER_HTTP_ALLOWED_HOSTS",
    "RUNNER_AUTH_TOKENS_FILE",
    "RUNNER_SHUTDOWN_GRACE",
}
# Resident sizes measured with the image's layout (docs/docker.md, docs/performance.md), MiB: the server,
# the lean zygote, the preloading zygote (numpy, pandas, matplotlib), one pooled interpreter; and the
# container runtime's /dev/shm, a tmpfs whose pages are charged to the pod like the /tmp emptyDir's.
SERVER_MIB, LEAN_ZYGOTE_MIB, PRELOADING_ZYGOTE_MIB, POOLED_MIB, DEV_SHM_MIB = 72, 13, 105, 12, 64
IMAGE_DEFAULTS = {"RUNNER_POOL_SIZE": "2", "RUNNER_MAX_MEMORY_MB": "128", "RUNNER_MAX_CONCURRENT": "2"}


# --- Reading the base ---------------------------------------------------------------------------------------


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text(encoding="utf-8")) if document]


def kustomization() -> dict[str, Any]:
    return documents(KUSTOMIZATION)[0]


def base_resources() -> list[dict[str, Any]]:
    """Every object kustomization.yaml puts into the cluster (what it lists, not what lies beside it)."""
    return [document for name in kustomization()["resources"] for document in documents(BASE / name)]


def the(kind: str) -> dict[str, Any]:
    found = [document for document in base_resources() if document["kind"] == kind]
    assert len(found) == 1, f"the base should hold exactly one {kind}, it holds {len(found)}"
    return found[0]


def pod_spec() -> dict[str, Any]:
    return the("Deployment")["spec"]["template"]["spec"]


def container() -> dict[str, Any]:
    containers = pod_spec()["containers"]
    assert len(containers) == 1
    return containers[0]


def env() -> dict[str, str]:
    """The container's variables with literal values (those from the Downward API are left out)."""
    return {item["name"]: item["value"] for item in container().get("env", []) if "value" in item}


def effective(field: str) -> Any:
    """A security setting as the kubelet applies it: the container's own, else the pod's."""
    own = container().get("securityContext", {})
    return own[field] if field in own else pod_spec().get("securityContext", {}).get(field)


def port_number(port: int | str) -> int | None:
    """A probe's or a Service's port, a number or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    named = {item["name"]: item["containerPort"] for item in container()["ports"]}
    return named.get(port)


def mib(quantity: str) -> float:
    """A Kubernetes memory quantity in MiB (the binary suffixes the base uses)."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", quantity)
    assert match, f"not a quantity this test reads: {quantity!r}"
    return int(match.group(1)) * {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, None: 1 / 1024 / 1024}[match.group(2)]


def pre_stop_seconds() -> int:
    """How long the preStop hook sleeps: the exec form's `sleep N` or lifecycle.preStop.sleep.seconds."""
    pre_stop = container()["lifecycle"]["preStop"]
    if "sleep" in pre_stop:
        return int(pre_stop["sleep"]["seconds"])
    match = re.search(r"\bsleep\s+(\d+)\b", " ".join(pre_stop["exec"]["command"]))
    assert match, f"the preStop hook should sleep: {pre_stop}"
    return int(match.group(1))


def validate(document: dict[str, Any], version: str) -> None:
    """Raises kubernetes_validate.ValidationError if the document breaks the schema of its kind."""
    kubernetes_validate.validate(document, version, strict=True)


# --- The schemas ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=[path.name for path in MANIFESTS])
def test_every_manifest_validates_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    found = documents(path)
    assert found, f"{path.name} holds no document"
    for document in found:
        validate(document, version)


@pytest.mark.parametrize(
    ("mistake", "where"),
    [
        ("a misspelt field", ("spec", "template", "spec", "containers", 0, "securityContext")),
        ("a value of the wrong type", ("spec", "template", "spec", "terminationGracePeriodSeconds")),
        ("a field the kind does not have", ("spec",)),
    ],
)
def test_a_broken_copy_of_the_deployment_fails_validation(mistake: str, where: tuple[str | int, ...]) -> None:
    broken = copy.deepcopy(the("Deployment"))
    validate(broken, KUBERNETES_VERSIONS[0])  # the intact copy passes
    parent: Any = broken
    for key in where[:-1]:
        parent = parent[key]
    if mistake == "a misspelt field":
        parent[where[-1]]["readOnlyRootFileSystem"] = True
    elif mistake == "a value of the wrong type":
        parent[where[-1]] = "35s"
    else:
        parent[where[-1]]["sessionAffinity"] = "ClientIP"  # a Service's field, not a Deployment's
    with pytest.raises(kubernetes_validate.ValidationError) as raised:
        validate(broken, KUBERNETES_VERSIONS[0])
    assert list(raised.value.path)[: len(where)] == list(where), raised.value.message


def test_the_kustomization_lists_every_manifest_but_the_example_secret() -> None:
    document = kustomization()
    assert document["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert document["kind"] == "Kustomization"
    assert set(document) <= KUSTOMIZATION_FIELDS, f"unknown fields: {set(document) - KUSTOMIZATION_FIELDS}"
    listed = document["resources"]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    missing = [name for name in listed if not (BASE / name).is_file()]
    assert missing == [], "listed but not there"
    assert set(listed) == {path.name for path in MANIFESTS} - {EXAMPLE_SECRET.name}
    assert EXAMPLE_SECRET.name not in listed, "the example Secret must stay out of the base"
    assert {"app.kubernetes.io/name": APP} in [entry["pairs"] for entry in document["labels"]]


def test_no_secret_in_the_base_carries_data() -> None:
    assert "secretGenerator" not in kustomization(), "a generated Secret would put a token into the base"
    for document in base_resources():
        if document["kind"] == "Secret":
            assert not document.get("data"), f"the Secret {document['metadata']['name']} carries data"
            assert not document.get("stringData"), f"the Secret {document['metadata']['name']} carries stringData"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed: only the files are checked")
def test_kubectl_kustomize_builds_the_base_and_what_it_builds_validates() -> None:
    built = subprocess.run(["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, timeout=30, check=False)
    assert built.returncode == 0, built.stderr
    objects = [document for document in yaml.safe_load_all(built.stdout) if document]
    kinds = sorted(document["kind"] for document in objects)
    assert kinds == sorted(document["kind"] for document in base_resources())
    for document in objects:
        assert document["metadata"]["labels"]["app.kubernetes.io/name"] == APP, document["kind"]
        validate(document, KUBERNETES_VERSIONS[-1])


# --- The Deployment's hardening, as the Docker line's ---------------------------------------------------------


def tmp_volume() -> dict[str, Any]:
    mounts = [mount for mount in container()["volumeMounts"] if mount["mountPath"] == "/tmp"]
    assert len(mounts) == 1, "no volume at /tmp"
    return next(volume for volume in pod_spec()["volumes"] if volume["name"] == mounts[0]["name"])


def tokens_is_a_read_only_secret_file() -> bool:
    path = Path(env()["RUNNER_AUTH_TOKENS_FILE"])
    mount = next(mount for mount in container()["volumeMounts"] if mount["mountPath"] == str(path.parent))
    volume = next(volume for volume in pod_spec()["volumes"] if volume["name"] == mount["name"])
    secret = volume["secret"]
    items = {item["path"]: item["key"] for item in secret.get("items", [])}
    return (
        mount.get("readOnly") is True
        and secret["secretName"] == TOKENS_SECRET
        and items.get(path.name, path.name) == "tokens"
        and secret.get("defaultMode") == 0o400
        # readable by uid 10001: as its owner, or through fsGroup (the kubelet adds group read for it)
        and (effective("runAsUser") == UID and pod_spec()["securityContext"].get("fsGroup") == UID)
    )


def probe_on_container_port(kind: str, path: str) -> bool:
    probe = container()[kind]["httpGet"]
    return probe["path"] == path and port_number(probe["port"]) == int(env()["RUNNER_HTTP_PORT"])


HARDENING = {
    "runAsNonRoot true": lambda: effective("runAsNonRoot") is True,
    "runAsUser 10001": lambda: effective("runAsUser") == UID,
    "runAsGroup 10001": lambda: effective("runAsGroup") == UID,
    "readOnlyRootFilesystem true (--read-only)": lambda: effective("readOnlyRootFilesystem") is True,
    "allowPrivilegeEscalation false (no-new-privileges)": lambda: effective("allowPrivilegeEscalation") is False,
    "privileged false": lambda: effective("privileged") is False,
    "capabilities drop ALL (--cap-drop=ALL)": lambda: (effective("capabilities") or {}).get("drop") == ["ALL"],
    "no capability added": lambda: not (effective("capabilities") or {}).get("add"),
    "seccompProfile RuntimeDefault": lambda: (effective("seccompProfile") or {}).get("type") == "RuntimeDefault",
    "/tmp an emptyDir with a sizeLimit (--tmpfs /tmp:size=64m)": lambda: "sizeLimit" in tmp_volume()["emptyDir"],
    "requests cpu and memory": lambda: {"cpu", "memory"} <= set(container()["resources"]["requests"]),
    "limits cpu and memory (--cpus, --memory)": lambda: {"cpu", "memory"} <= set(container()["resources"]["limits"]),
    "livenessProbe GET /healthz on the container port": lambda: probe_on_container_port("livenessProbe", "/healthz"),
    "readinessProbe GET /readyz on the container port": lambda: probe_on_container_port("readinessProbe", "/readyz"),
    "startupProbe": lambda: "startupProbe" in container(),
    "preStop hook": lambda: pre_stop_seconds() > 0,
    "terminationGracePeriodSeconds > preStop sleep + RUNNER_SHUTDOWN_GRACE": lambda: (
        pod_spec()["terminationGracePeriodSeconds"] > pre_stop_seconds() + float(env()["RUNNER_SHUTDOWN_GRACE"])
    ),
    "tokens from the Secret, mounted read-only, mode 0400": tokens_is_a_read_only_secret_file,
    "automountServiceAccountToken false": lambda: pod_spec().get("automountServiceAccountToken") is False,
    "enableServiceLinks false": lambda: pod_spec().get("enableServiceLinks") is False,
    "no host namespace or port": lambda: (
        not any(pod_spec().get(field) for field in ("hostNetwork", "hostPID", "hostIPC"))
        and all("hostPort" not in port for port in container()["ports"])
    ),
}


@pytest.mark.parametrize("field", list(HARDENING))
def test_the_deployment_keeps_each_hardening_field_of_the_docker_line(field: str) -> None:
    assert HARDENING[field](), f"the Deployment lacks: {field}"


def test_the_service_account_mounts_no_token_and_is_the_pods_own() -> None:
    assert the("ServiceAccount")["automountServiceAccountToken"] is False
    assert pod_spec()["serviceAccountName"] == the("ServiceAccount")["metadata"]["name"]


def test_the_runs_the_deployment_allows_fit_its_memory_limit_with_the_measured_sizes() -> None:
    settings = {**IMAGE_DEFAULTS, **env()}
    pooled = 2 * int(settings["RUNNER_POOL_SIZE"])  # the lean and the preloading zygote each keep a pool
    tmp = mib(tmp_volume()["emptyDir"]["sizeLimit"]) if tmp_volume()["emptyDir"].get("medium") == "Memory" else 0
    fixed = SERVER_MIB + LEAN_ZYGOTE_MIB + PRELOADING_ZYGOTE_MIB + pooled * POOLED_MIB + tmp + DEV_SHM_MIB
    runs = int(settings["RUNNER_MAX_CONCURRENT"]) * int(settings["RUNNER_MAX_MEMORY_MB"])
    limit = mib(container()["resources"]["limits"]["memory"])
    assert fixed + runs <= 0.9 * limit, f"{fixed} + {runs} MiB leaves under 10% of {limit} MiB"
    # and not so few runs that most of the limit idles
    assert fixed + runs + int(settings["RUNNER_MAX_MEMORY_MB"]) > 0.9 * limit


# --- Network, scaling, disruptions ----------------------------------------------------------------------------


def selects_the_pods(selector: dict[str, str]) -> bool:
    labels = the("Deployment")["spec"]["template"]["metadata"]["labels"]
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def test_the_network_policy_denies_all_egress_and_opens_only_the_http_port() -> None:
    policy = the("NetworkPolicy")["spec"]
    assert selects_the_pods(policy["podSelector"]["matchLabels"])
    assert "Egress" in policy["policyTypes"], "without Egress in policyTypes, egress is not restricted at all"
    assert policy.get("egress", []) == [], "the server and its runs need no egress, not even DNS"
    assert "Ingress" in policy["policyTypes"]
    ports = [port_number(port["port"]) for rule in policy["ingress"] for port in rule["ports"]]
    assert ports, "no port is open"
    assert set(ports) == {int(env()["RUNNER_HTTP_PORT"])}


def test_the_service_the_selectors_and_the_scrape_annotations_agree_with_the_deployment() -> None:
    port = int(env()["RUNNER_HTTP_PORT"])
    service = the("Service")["spec"]
    assert service["type"] == "ClusterIP"
    assert selects_the_pods(service["selector"])
    assert [port_number(entry["targetPort"]) for entry in service["ports"]] == [port]
    assert [entry["port"] for entry in service["ports"]] == [port]
    assert selects_the_pods(the("Deployment")["spec"]["selector"]["matchLabels"])
    assert selects_the_pods(the("PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    for constraint in pod_spec()["topologySpreadConstraints"]:
        assert selects_the_pods(constraint["labelSelector"]["matchLabels"])
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", "preferred, so a one-node cluster still runs"
    annotations = the("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_allowed_hosts_are_the_service_s_names_with_and_without_its_port() -> None:
    service = the("Service")["metadata"]["name"]
    port = env()["RUNNER_HTTP_PORT"]
    allowed = {part.strip() for part in env()["RUNNER_HTTP_ALLOWED_HOSTS"].split(",")}
    # $(POD_NAMESPACE) is expanded by the kubelet, from the Downward API: the base works in any namespace.
    names = [service] + [f"{service}.$(POD_NAMESPACE){suffix}" for suffix in ("", ".svc", ".svc.cluster.local")]
    for name in names:
        assert {name, f"{name}:{port}"} <= allowed, name
    assert env()["RUNNER_HTTP_HOST"] == "0.0.0.0"
    assert env()["RUNNER_TRANSPORT"] == "http"
    assert env()["RUNNER_HTTP_PATH"] == "/mcp"


def test_the_autoscaler_scales_the_deployment_on_cpu_and_the_budget_keeps_one_pod() -> None:
    autoscaler = the("HorizontalPodAutoscaler")["spec"]
    deployment = the("Deployment")
    assert autoscaler["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert autoscaler["minReplicas"] == deployment["spec"]["replicas"] == 2
    assert autoscaler["maxReplicas"] >= autoscaler["minReplicas"]
    assert [metric["resource"]["name"] for metric in autoscaler["metrics"]] == ["cpu"]
    assert the("PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


# --- Settings and the example Secret --------------------------------------------------------------------------


def documented_settings() -> set[str]:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    return set(re.findall(r"`(RUNNER_[A-Z0-9_]+)`", text))


def test_every_variable_the_deployment_sets_is_a_setting_the_server_reads() -> None:
    known = documented_settings() | HTTP_SETTINGS
    assert "RUNNER_MAX_CONCURRENT" in known, "docs/configuration.md was not read"
    variables = container()["env"]
    values = " ".join(item.get("value", "") for item in variables)
    for item in variables:
        name = item["name"]
        if "valueFrom" in item:
            # Not a setting: a value from the Downward API that a setting's value names as $(NAME).
            assert "fieldRef" in item["valueFrom"], name
            assert f"$({name})" in values, f"{name} is set but no setting uses it"
        else:
            assert name in known, f"{name} is neither in docs/configuration.md nor a setting of the HTTP transport"


def test_the_example_secret_is_the_one_the_deployment_mounts_and_its_placeholder_is_refused() -> None:
    from runner.config.tokens import BearerTokens
    from runner.errors import ConfigError

    (secret,) = documents(EXAMPLE_SECRET)
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["name"] == TOKENS_SECRET
    assert set(secret["stringData"]) == {"tokens"}
    # Applied unchanged, it must stop the server rather than let the placeholder in as a token.
    with pytest.raises(ConfigError):
        BearerTokens.parse(secret["stringData"]["tokens"])


def test_the_kubernetes_page_names_every_manifest_and_the_commands_that_deploy_it() -> None:
    page = (REPO / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    for path in [*MANIFESTS, KUSTOMIZATION]:
        assert path.name in page, path.name
    assert "kubectl apply -k deploy/kubernetes" in page
    assert f"kubectl create secret generic {TOKENS_SECRET} --from-file=tokens=" in page
