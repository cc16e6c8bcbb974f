"""k8s/rbac.yaml against what edge does: run as k8s/ deploys it, against the API
server emulator enforcing the manifest's rules, nothing edge asks is refused and
every permission granted is used (found by the Kubernetes provider's review,
issue 10; each test failed on the commit before its fix).
"""

from __future__ import annotations

import threading

import yaml

from tests.fixtures.tls.pki import PKI
from tests.harness import ROOT
from tests.integration.kubernetes import test_crd_provider as CP
from tests.integration.kubernetes import test_provider as KP
from tests.kube import objects as o
from tests.kube.emulator import Access, Emulator
from tests.kube.rbac import Grant, Policy

K8S = ROOT / "k8s"


# --- RBAC: the manifests grant what edge uses, and nothing more ----------------------------


def test_rbac_manifests_grant_what_edge_uses_and_nothing_more(whoami):
    """edge as k8s/ deploys it (the ConfigMap's provider options, the DaemonSet's
    ServiceAccount and POD_NAME/POD_NAMESPACE) against an emulator enforcing k8s/rbac.yaml:
    nothing it asks is refused, it serves and writes status; and every permission the
    manifest grants is used ("get" beside list/watch aside). Before, pods were readable
    in every namespace though edge lists them in its own only (pod specs carry
    environment variables), and ingresses/status could be updated though edge only
    patches it. With the kubernetesCRD provider running too, the traefik.io grants are
    used as well; and with an Ingress refused, the events grants (create, patch)."""
    ds = yaml.safe_load((K8S / "daemonset.yaml").read_text())
    namespace = ds["metadata"]["namespace"]
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    policy = Policy.from_files([K8S / "rbac.yaml"], namespace, account)
    cm = yaml.safe_load((K8S / "configmap.yaml").read_text())
    kube = yaml.safe_load(cm["data"]["edge.yaml"])["providers"]["kubernetesIngress"]
    seen: list[Access] = []
    refused: list[Access] = []
    lock = threading.Lock()

    def authorize(access: Access) -> bool:
        allowed = policy.allows(access)
        with lock:
            seen.append(access)
            if not allowed:
                refused.append(access)
        return allowed

    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as emu:
        emu.authorizer = authorize
        emu.create(o.ingress_class(kube["ingressClass"]))
        KP.backend_service(emu, "app", whoami)
        emu.create(KP.ingress("app", [("a.test", "/", "Prefix", "app")]))
        # refused (no such Service): an Event on it, created and then counted (patched)
        emu.create(KP.ingress("broken", [("b.test", "/", "Prefix", "missing")]))
        emu.create(KP._node("n1", "10.1.0.1"))
        emu.create(KP._pod("edge-a", "n1"))  # in edge-system, as the DaemonSet's
        assert KP._pod("x", "n")["metadata"]["namespace"] == namespace
        environ = {"POD_NAME": "edge-a", "POD_NAMESPACE": namespace, "NODE_NAME": "n1"}
        # The CRD provider beside it, as k8s/examples/ runs it: RBAC covers both.
        emu.create(CP.ingress_route("crd", "c.test", "app"))
        static = KP.static_config(emu, **kube)
        static["providers"]["kubernetesCRD"] = {
            "endpoint": emu.url,
            "token": KP.TOKEN,
            "throttleDuration": f"{int(KP.THROTTLE * 1000)}ms",
        }
        edge = KP.InProcessEdge(static, tweak=KP.fast(environ)).start()
        try:
            assert KP.until(lambda: edge.ready() == 200, 10.0), refused
            assert KP.follows(edge.port(), "a.test", whoami.name)
            assert KP.follows(edge.port(), "c.test", whoami.name)

            def status() -> list:
                ing = emu.get("Ingress", "default", "app") or {}
                return ing.get("status", {}).get("loadBalancer", {}).get("ingress", [])

            assert KP.until(lambda: status() == [{"ip": "10.1.0.1"}]), refused

            def counted() -> list[int]:
                return [e.get("count") for e in emu.list("Event")]

            assert KP.until(lambda: counted() == [1]), refused
            broken = emu.get("Ingress", "default", "broken")
            more = KP.ingress("more", [("b2.test", "/", "Prefix", "app")])["spec"]["rules"]
            broken["spec"]["rules"].extend(more)  # changed, still refused for that reason
            emu.update(broken)
            assert KP.until(lambda: counted() == [2]), refused
        finally:
            edge.stop()
    assert refused == []

    def needed(g: Grant) -> bool:
        """Some ask used it; a cluster-wide grant, an ask across namespaces or outside
        edge's own namespace (an Ingress' status anywhere): edge's own is a Role's."""
        return any(
            Policy.covers(g, a) and (g.scope is not None or a.namespace != namespace) for a in seen
        )

    unused = {
        g for g in policy.grants
        if not needed(g) and not (g.verb == "get" and needed(g._replace(verb="list")))
    }  # fmt: skip
    assert unused == set()


def test_rbac_with_secrets_read_per_namespace_as_the_manifest_suggests(whoami):
    """k8s/rbac.yaml's advice, followed: the provider limited to a namespace and Secrets
    read through a Role there, not the ClusterRole. edge asks nothing of Secrets
    cluster-wide and serves that namespace's HTTPS route with its Secret."""
    docs = [d for d in yaml.safe_load_all((K8S / "rbac.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "ClusterRole":
            for rule in d["rules"]:
                rule["resources"] = [r for r in rule["resources"] if r != "secrets"]
    role = {"kind": "Role", "metadata": {"name": "edge-secrets", "namespace": "apps"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"],
                       "verbs": ["get", "list", "watch"]}]}  # fmt: skip
    binding = {"kind": "RoleBinding", "metadata": {"name": "edge", "namespace": "apps"},
               "roleRef": {"kind": "Role", "name": "edge-secrets"},
               "subjects": [{"kind": "ServiceAccount", "name": "edge",
                             "namespace": "edge-system"}]}  # fmt: skip
    policy = Policy([*docs, role, binding], "edge-system", "edge")
    assert not policy.allows(Access("list", "", "secrets", None))
    refused: list[Access] = []

    def authorize(access: Access) -> bool:
        if not policy.allows(access):
            refused.append(access)
            return False
        return True

    pki = PKI()
    pair = pki.issue("s.test")
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as emu:
        emu.authorizer = authorize
        emu.create(o.ingress_class("edge"))
        emu.create(o.service("app", "apps"))
        emu.create(dict(KP.slice_for("app", whoami), metadata={
            "name": "app-1", "namespace": "apps",
            "labels": {"kubernetes.io/service-name": "app"}}))  # fmt: skip
        emu.create(KP._tls_secret("site", "apps", pair))
        ing = KP.ingress("site", [("s.test", "/", "Prefix", "app")],
                         tls=[{"hosts": ["s.test"], "secretName": "site"}])  # fmt: skip
        ing["metadata"]["namespace"] = "apps"
        emu.create(ing)
        static = KP.static_config(emu, ingressClass="edge", namespaces=["apps"])
        edge = KP.InProcessEdge(static, tweak=KP.fast()).start()
        try:
            assert KP.until(lambda: edge.ready() == 200, 10.0), refused
            port, ca = edge.port(), pki.cert_pem
            assert KP.until(lambda: KP._https(port, "s.test", ca) == (pair.fingerprint, 200))
        finally:
            edge.stop()
    assert refused == []
