"""edge's list/watch client against the API server emulator, over real sockets.

Real ``KubeClient`` reflector threads talk through the official kubernetes client
to a real ``Emulator``; tests write objects in-process, turn the emulator's fault
knobs and watch the cache and the change callback follow. Every wait is bounded.
"""

from __future__ import annotations

import datetime
import gc
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes.config.incluster_config import InClusterConfigLoader

from edge.providers.kubernetes import objects
from edge.providers.kubernetes.client import (
    CRD_RESOURCES,
    ENDPOINT_SLICES,
    INGRESS_CLASSES,
    INGRESSES,
    SECRETS,
    SERVICES,
    Backoff,
    Change,
    CredentialsError,
    KubeClient,
    KubeCore,
    Subscription,
    Timing,
    WatchSpec,
    gc_paused,
    load_api_config,
)
from tests.kube import models as m
from tests.kube import objects as o
from tests.kube.emulator import Emulator

TOKEN = "t0ken"
ING_PATH = "/apis/networking.k8s.io/v1/ingresses"
EPS_PATH = "/apis/discovery.k8s.io/v1/endpointslices"
FAST = Timing(page_size=2, backoff_base=0.2, backoff_cap=2.0)


def wait_until(pred: Callable[[], object], timeout: float = 5.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


class Recorder:
    """The change callback: keeps every Change, from any thread."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self._lock = threading.Lock()

    def __call__(self, change: Change) -> None:
        with self._lock:
            self.changes.append(change)

    def since(self, n: int) -> list[Change]:
        with self._lock:
            return self.changes[n:]

    def keys(self, kind: str, start: int = 0) -> set[tuple[str, str]]:
        return {k for c in self.since(start) if c.kind == kind for k in c.keys}


@pytest.fixture
def emu():
    with Emulator(token=TOKEN, bookmark_interval=None) as e:
        yield e


@pytest.fixture
def make_client(emu):
    clients: list[KubeClient] = []

    def make(watches=None, *, timing=FAST, namespaces=(), on_change=None, start=True, cfg=None):
        if watches is None:
            watches = [WatchSpec(INGRESSES, m.Ingress), WatchSpec(ENDPOINT_SLICES, m.EndpointSlice)]
        c = KubeClient(
            cfg or load_api_config(endpoint=emu.url, token=TOKEN),
            watches,
            namespaces=namespaces,
            on_change=on_change,
            timing=timing,
        )
        clients.append(c)
        if start:
            c.start()
        return c

    yield make
    for c in clients:
        c.stop()


def names(c: KubeClient, kind: str) -> set[tuple[str, str]]:
    return set(c.objects(kind))


# --- sync and events ------------------------------------------------------------------


def test_initial_sync_pages_through_lists(emu, make_client):
    for i in range(5):
        emu.create(o.ingress(f"ing-{i}", "ns1" if i % 2 else "ns2"))
    emu.create(o.endpoint_slice("whoami-abc", addresses=["10.0.0.1", "10.0.0.2"]))
    rec = Recorder()
    c = make_client(on_change=rec)
    assert c.wait_synced(5)
    assert c.pending() == {}
    assert names(c, "Ingress") == {
        ("ns2", "ing-0"),
        ("ns1", "ing-1"),
        ("ns2", "ing-2"),
        ("ns1", "ing-3"),
        ("ns2", "ing-4"),
    }
    eps = c.get("EndpointSlice", "default", "whoami-abc")
    assert [e.addresses for e in eps.endpoints] == [["10.0.0.1"], ["10.0.0.2"]]
    assert eps.metadata.labels["kubernetes.io/service-name"] == "whoami"
    # the first LIST reads the watch cache (resourceVersion=0): one answer whatever
    # the page size (FAST.page_size == 2)
    assert emu.count(ING_PATH, watch=False) == 1
    assert next(r for r in emu.requests if r.path == ING_PATH).query["resourceVersion"] == "0"
    # one Change per kind; only the last one to sync says synced
    assert sorted(ch.kind for ch in rec.changes) == ["EndpointSlice", "Ingress"]
    assert [ch.synced for ch in rec.changes] == [False, True]
    assert rec.keys("Ingress") == names(c, "Ingress")
    # both reflectors resume from the list's version
    assert set(c.resource_versions().values()) == {str(emu.resource_version)}


def test_create_update_delete_reach_cache_and_callback(emu, make_client):
    rec = Recorder()
    c = make_client(on_change=rec)
    assert c.wait_synced(5)
    assert emu.wait_watches(2)
    n = len(rec.changes)
    emu.create(o.ingress("web", "prod"))
    assert wait_until(lambda: c.get("Ingress", "prod", "web") is not None)
    emu.patch("Ingress", "prod", "web", {"metadata": {"labels": {"rev": "2"}}})
    assert wait_until(lambda: c.get("Ingress", "prod", "web").metadata.labels == {"rev": "2"})
    emu.create(o.endpoint_slice("web-1", "prod", service_name="web"))
    emu.delete("Ingress", "prod", "web")
    assert wait_until(lambda: c.get("Ingress", "prod", "web") is None)
    assert wait_until(lambda: c.get("EndpointSlice", "prod", "web-1") is not None)
    changes = rec.since(n)
    assert all(ch.synced for ch in changes)
    assert rec.keys("Ingress", n) == {("prod", "web")}
    assert rec.keys("EndpointSlice", n) == {("prod", "web-1")}
    assert sum(1 for ch in changes if ch.kind == "Ingress") == 3  # added, modified, deleted


def test_bookmarks_advance_the_resource_version(emu, make_client):
    c = make_client([WatchSpec(INGRESSES, m.Ingress)])
    assert c.wait_synced(5) and emu.wait_watches(1)
    before = c.resource_versions()["Ingress in all namespaces"]
    for i in range(3):  # writes of another kind: not on the ingress stream
        emu.create(o.service(f"svc-{i}"))
    time.sleep(0.2)
    assert c.resource_versions()["Ingress in all namespaces"] == before
    emu.send_bookmarks()
    now = str(emu.resource_version)
    assert wait_until(lambda: c.resource_versions()["Ingress in all namespaces"] == now)
    # a new watch resumes from the bookmark's version, without listing again
    t0 = time.monotonic()
    emu.drop_watches()
    assert wait_until(lambda: emu.count(ING_PATH, since=t0, watch=True) >= 1)
    resumed = [r for r in emu.requests if r.at >= t0 and r.path == ING_PATH]
    assert resumed[0].query["resourceVersion"] == now
    assert resumed[0].query["allowWatchBookmarks"] == "true"
    assert emu.count(ING_PATH, since=t0, watch=False) == 0


def test_410_after_compaction_relists_and_reports_the_difference(emu, make_client):
    for name in ("keep", "change", "remove"):
        emu.create(o.ingress(name))
    rec = Recorder()
    c = make_client([WatchSpec(INGRESSES, m.Ingress)], on_change=rec)
    assert c.wait_synced(5) and emu.wait_watches(1)
    # the client stops hearing anything; meanwhile the cluster changes and compacts
    assert emu.stall_watches() == 1
    emu.delete("Ingress", "default", "remove")
    emu.patch("Ingress", "default", "change", {"metadata": {"labels": {"v": "2"}}})
    emu.create(o.ingress("new"))
    emu.compact()
    n = len(rec.changes)
    t0 = time.monotonic()
    emu.drop_watches()
    assert wait_until(
        lambda: (
            names(c, "Ingress") == {("default", "keep"), ("default", "change"), ("default", "new")}
        )
    )
    assert c.get("Ingress", "default", "change").metadata.labels == {"v": "2"}
    assert rec.keys("Ingress", n) == {
        ("default", "remove"),
        ("default", "change"),
        ("default", "new"),
    }
    relists = [
        r
        for r in emu.requests
        if r.at >= t0 and r.path == ING_PATH and r.query.get("watch") != "true"
    ]
    # listed again at the latest version (not the watch cache's), paged: two pages of two
    assert len(relists) >= 2 and all("resourceVersion" not in r.query for r in relists)
    assert wait_until(
        lambda: c.resource_versions()["Ingress in all namespaces"] == str(emu.resource_version)
    )
    # and it keeps watching from the new list
    emu.create(o.ingress("after"))
    assert wait_until(lambda: c.get("Ingress", "default", "after") is not None)


def test_outage_reconnects_with_backoff_and_converges(emu, make_client):
    emu.create(o.ingress("a"))
    c = make_client()
    assert c.wait_synced(5) and emu.wait_watches(2)
    t0 = time.monotonic()
    emu.fail_for(2.0)
    emu.drop_watches()
    emu.create(o.ingress("during"))
    emu.delete("Ingress", "default", "a")
    emu.create(o.endpoint_slice("eps-during"))
    assert wait_until(lambda: time.monotonic() - t0 >= 2.0, timeout=3)
    during_ing = emu.count(ING_PATH, since=t0)
    during_eps = emu.count(EPS_PATH, since=t0)
    assert 1 <= during_ing < 10, during_ing
    assert 1 <= during_eps < 10, during_eps
    assert wait_until(lambda: names(c, "Ingress") == {("default", "during")}, timeout=10)
    assert wait_until(lambda: c.get("EndpointSlice", "default", "eps-during") is not None)
    # the history was kept, so the watches resumed without a new LIST
    assert emu.count(ING_PATH, since=t0, watch=False) == 0
    assert emu.count(EPS_PATH, since=t0, watch=False) == 0


def test_stalled_watch_is_detected_and_resumed(make_client):
    with Emulator(token=TOKEN, bookmark_interval=0.1) as emu:
        timing = Timing(read_timeout=0.6, backoff_base=0.1, backoff_cap=1.0)
        c = make_client(
            [WatchSpec(INGRESSES, m.Ingress)],
            timing=timing,
            cfg=load_api_config(endpoint=emu.url, token=TOKEN),
        )
        assert c.wait_synced(5) and emu.wait_watches(1)
        time.sleep(0.3)  # healthy watches with bookmarks outlive the read timeout
        assert emu.count(ING_PATH, watch=True) == 1
        rv = c.resource_versions()["Ingress in all namespaces"]
        t0 = time.monotonic()
        assert emu.stall_watches() == 1
        emu.create(o.ingress("late"))
        assert wait_until(lambda: c.get("Ingress", "default", "late") is not None, timeout=5)
        found = time.monotonic() - t0
        assert found >= 0.5  # only the read timeout could have noticed
        again = [r for r in emu.requests if r.at >= t0 and r.path == ING_PATH]
        assert again[0].query["watch"] == "true"
        assert again[0].query["resourceVersion"] == rv


def test_namespaces_filter(emu, make_client):
    for ns in ("ns1", "ns2", "ns3"):
        emu.create(o.ingress(f"in-{ns}", ns))
    emu.create(o.ingress_class("edge"))
    c = make_client(
        [WatchSpec(INGRESSES, m.Ingress), WatchSpec(INGRESS_CLASSES, m.Named)],
        namespaces=["ns2", "ns1"],
    )
    assert c.wait_synced(5)
    assert names(c, "Ingress") == {("ns1", "in-ns1"), ("ns2", "in-ns2")}
    assert names(c, "IngressClass") == {("", "edge")}
    assert emu.wait_watches(3)  # ns1, ns2 and the cluster-scoped classes
    emu.create(o.ingress("late", "ns3"))
    emu.create(o.ingress("late", "ns2"))
    assert wait_until(lambda: c.get("Ingress", "ns2", "late") is not None)
    time.sleep(0.1)
    assert c.get("Ingress", "ns3", "late") is None
    paths = {r.path for r in emu.requests}
    assert "/apis/networking.k8s.io/v1/namespaces/ns1/ingresses" in paths
    assert "/apis/networking.k8s.io/v1/namespaces/ns2/ingresses" in paths
    assert ING_PATH not in paths
    assert not any("ns3" in p for p in paths)
    assert set(c.resource_versions()) == {
        "Ingress in namespace ns1",
        "Ingress in namespace ns2",
        "IngressClass in all namespaces",
    }


def test_label_selector(emu, make_client):
    emu.create(o.ingress("web", labels={"app": "web"}))
    emu.create(o.ingress("api", labels={"app": "api"}))
    c = make_client([WatchSpec(INGRESSES, m.Ingress, label_selector="app in (web)")])
    assert c.wait_synced(5) and emu.wait_watches(1)
    assert names(c, "Ingress") == {("default", "web")}
    assert emu.requests[0].query["labelSelector"] == "app in (web)"
    emu.patch("Ingress", "default", "web", {"metadata": {"labels": {"app": "other"}}})
    emu.patch("Ingress", "default", "api", {"metadata": {"labels": {"app": "web"}}})
    assert wait_until(lambda: names(c, "Ingress") == {("default", "api")})


def test_undecodable_object_is_left_out_and_the_watch_goes_on(emu, make_client, caplog):
    broken = o.endpoint_slice("broken")
    del broken["addressType"]  # required by the decoded type
    emu.create(broken)
    emu.create(o.endpoint_slice("good"))
    c = make_client([WatchSpec(ENDPOINT_SLICES, m.EndpointSlice)])
    with caplog.at_level(logging.WARNING, logger="edge.providers.kubernetes.client"):
        assert c.wait_synced(5) and emu.wait_watches(1)
        assert names(c, "EndpointSlice") == {("default", "good")}
        assert c.decode_errors == 1
        emu.patch("EndpointSlice", "default", "good", {"addressType": None})
        assert wait_until(lambda: c.get("EndpointSlice", "default", "good") is None)
        assert c.decode_errors == 2
        emu.patch("EndpointSlice", "default", "good", {"addressType": "IPv4"})
        emu.create(o.endpoint_slice("later"))
        assert wait_until(
            lambda: names(c, "EndpointSlice") == {("default", "good"), ("default", "later")}
        )
    assert "default/broken left out" in caplog.text
    assert emu.count(EPS_PATH, watch=True) == 1  # the same watch all along


def test_edges_own_models_through_the_reflectors(emu, make_client):
    """The models of objects.py, watched for real, make the conversion's ClusterState."""
    emu.create(o.ingress("web", service="whoami", ingress_class="edge"))
    emu.create(o.ingress_class("edge", default=True))
    emu.create(o.service("whoami"))
    emu.create(o.endpoint_slice("whoami-1", addresses=["10.0.0.5"]))
    emu.create(o.secret("tls", cert="Q0VSVA==", key="S0VZ"))
    c = make_client(
        [
            WatchSpec(INGRESSES, objects.Ingress),
            WatchSpec(INGRESS_CLASSES, objects.IngressClass),
            WatchSpec(SERVICES, objects.Service),
            WatchSpec(ENDPOINT_SLICES, objects.EndpointSlice),
            WatchSpec(SECRETS, objects.Secret, field_selector="type=kubernetes.io/tls"),
        ]
    )
    assert c.wait_synced(5)
    state = objects.ClusterState.from_snapshot(c.snapshot())
    assert state.ingresses[("default", "web")].spec.ingress_class_name == "edge"
    assert state.ingress_classes[("", "edge")].is_default
    assert state.endpoint_slices[("default", "whoami-1")].service_name == "whoami"
    assert state.secrets[("default", "tls")].data.tls_crt == b"CERT"
    assert c.decode_errors == 0


def test_a_failing_callback_does_not_stop_the_watch(emu, make_client):
    calls: list[Change] = []

    def callback(change: Change) -> None:
        calls.append(change)
        raise RuntimeError("provider bug")

    c = make_client([WatchSpec(INGRESSES, m.Ingress)], on_change=callback)
    assert c.wait_synced(5) and emu.wait_watches(1)
    emu.create(o.ingress("a"))
    emu.create(o.ingress("b"))
    assert wait_until(lambda: len(names(c, "Ingress")) == 2)
    assert len(calls) >= 2


def test_unreachable_at_start_keeps_retrying_and_says_why(emu, make_client):
    emu.fail_for(1.0)
    c = make_client()
    assert wait_until(lambda: any("503" in e for e in c.pending().values()))
    assert not c.synced
    assert c.wait_synced(10)
    assert c.pending() == {}


def test_stop_joins_threads_quickly(emu, make_client):
    c = make_client()
    assert c.wait_synced(5) and emu.wait_watches(2)
    mine = {"kube-Ingress-all", "kube-EndpointSlice-all"}
    threads = [t for t in threading.enumerate() if t.name in mine]
    assert len(threads) == 2
    t0 = time.monotonic()
    assert c.stop(timeout=2.0)
    assert time.monotonic() - t0 < 2.0
    assert not any(t.is_alive() for t in threads)
    assert wait_until(lambda: emu.open_watches() == 0)


def test_stop_while_backing_off_from_a_dead_server(make_client):
    sock_port = _closed_port()
    c = make_client(
        cfg=load_api_config(endpoint=f"http://127.0.0.1:{sock_port}"),
        timing=Timing(backoff_base=5.0, backoff_cap=5.0),
    )
    assert wait_until(lambda: all(c.pending().values()))
    t0 = time.monotonic()
    assert c.stop(timeout=2.0)
    assert time.monotonic() - t0 < 2.0


def _closed_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --- Ingress status -----------------------------------------------------------------


def test_patch_ingress_status(emu, make_client, caplog):
    emu.create(o.ingress("web", "prod"))
    c = make_client([WatchSpec(INGRESSES, m.Ingress)])
    assert c.wait_synced(5) and emu.wait_watches(1)
    addresses = [{"ip": "192.0.2.7"}, {"hostname": "lb.example.com"}]
    assert c.patch_ingress_status("prod", "web", addresses)
    stored = emu.get("Ingress", "prod", "web")
    assert stored["status"] == {"loadBalancer": {"ingress": addresses}}
    assert stored["spec"] == o.ingress("web", "prod")["spec"]
    patch = [r for r in emu.requests if r.method == "PATCH"]
    assert patch[-1].path == "/apis/networking.k8s.io/v1/namespaces/prod/ingresses/web/status"
    assert patch[-1].authorization == f"Bearer {TOKEN}"
    # the reflector sees the write
    assert wait_until(
        lambda: (
            [
                (a.ip, a.hostname)
                for a in c.get("Ingress", "prod", "web").status.load_balancer.ingress
            ]
            == [("192.0.2.7", ""), ("", "lb.example.com")]
        )
    )
    # fewer addresses replace the list
    assert c.patch_ingress_status("prod", "web", [{"ip": "192.0.2.8"}])
    assert emu.get("Ingress", "prod", "web")["status"]["loadBalancer"]["ingress"] == [
        {"ip": "192.0.2.8"}
    ]
    with caplog.at_level(logging.WARNING, logger="edge.providers.kubernetes.client"):
        assert not c.patch_ingress_status("prod", "missing", addresses)
        assert not c.patch_ingress_status("prod", "web", [{"ip": "1.2.3.4", "hostname": "x"}])
        emu.fail_for(0.5)
        assert not c.patch_ingress_status("prod", "web", addresses)
    assert "status of Ingress prod/missing: 404 NotFound" in caplog.text
    assert "status of Ingress prod/web: 503" in caplog.text


# --- backoff -----------------------------------------------------------------------


def test_backoff_doubles_to_the_cap_with_jitter_and_resets():
    low = Backoff(0.2, 3.0, rand=lambda: 0.0)
    assert [round(low.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.5, 1.5]
    high = Backoff(0.2, 3.0, rand=lambda: 1.0)
    assert [round(high.next(), 3) for _ in range(6)] == [0.2, 0.4, 0.8, 1.6, 3.0, 3.0]
    high.reset()
    assert high.next() == pytest.approx(0.2)
    for _ in range(200):  # no overflow however long the outage
        high.next()
    assert high.next() == pytest.approx(3.0)


# --- credentials ---------------------------------------------------------------------


@pytest.fixture
def no_ambient_credentials(monkeypatch, tmp_path):
    """Not in a pod, no KUBECONFIG, an empty home."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emu", "cluster": {"server": server}}],
                "users": [{"name": "edge", "user": {"token": token}}],
                "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "edge"}}],
                "current-context": "emu",
            }
        )
    )
    return path


def synced_through(cfg, make_client) -> KubeClient:
    c = make_client([WatchSpec(INGRESSES, m.Ingress)], cfg=cfg)
    assert c.wait_synced(5), c.pending()
    return c


def test_credentials_from_an_explicit_kubeconfig(
    emu, make_client, no_ambient_credentials, tmp_path
):
    emu.create(o.ingress("a"))
    path = write_kubeconfig(tmp_path / "kc.yaml", emu.url, TOKEN)
    cfg = load_api_config(kubeconfig=str(path))
    assert cfg.host == emu.url
    c = synced_through(cfg, make_client)
    assert names(c, "Ingress") == {("default", "a")}
    assert emu.requests[-1].authorization == f"Bearer {TOKEN}"


def test_credentials_from_the_kubeconfig_variable_and_home(
    emu, make_client, no_ambient_credentials, tmp_path, monkeypatch
):
    home_cfg = write_kubeconfig(no_ambient_credentials / ".kube" / "config", emu.url, TOKEN)
    assert load_api_config().host == emu.url
    synced_through(load_api_config(), make_client)
    # KUBECONFIG wins over the home file; missing entries in it are skipped
    other = write_kubeconfig(tmp_path / "other.yaml", "http://127.0.0.1:1", TOKEN)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent.yaml'}:{other}")
    assert load_api_config().host == "http://127.0.0.1:1"
    assert home_cfg.exists()


def test_explicit_settings_override_the_kubeconfig(
    emu, make_client, no_ambient_credentials, tmp_path
):
    path = write_kubeconfig(tmp_path / "kc.yaml", "http://127.0.0.1:1", "wrong-token")
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = load_api_config(
        endpoint=emu.url + "/", token=TOKEN, cert_auth_file_path=str(ca), kubeconfig=str(path)
    )
    assert cfg.host == emu.url
    assert cfg.ssl_ca_cert == str(ca)
    synced_through(cfg, make_client)
    assert emu.requests[-1].authorization == f"Bearer {TOKEN}"


def test_credentials_in_cluster(emu, make_client, no_ambient_credentials, tmp_path, monkeypatch):
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(TOKEN)
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = load_api_config(service_account_dir=str(sa))
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.ssl_ca_cert == str(sa / "ca.crt")
    assert cfg.get_api_key_with_prefix("BearerToken").lower() == f"bearer {TOKEN}"
    # the in-cluster token refresh must not undo an explicit endpoint
    cfg = load_api_config(endpoint=emu.url, service_account_dir=str(sa))
    c = synced_through(cfg, make_client)
    emu.create(o.ingress("b"))
    assert wait_until(lambda: c.get("Ingress", "default", "b") is not None)
    assert all(r.authorization.lower() == f"bearer {TOKEN}" for r in emu.requests)
    # an explicit kubeconfig beats the pod's service account
    path = write_kubeconfig(tmp_path / "kc.yaml", "http://127.0.0.1:2", "x")
    assert load_api_config(kubeconfig=str(path), service_account_dir=str(sa)).host == (
        "http://127.0.0.1:2"
    )


def test_endpoint_alone(emu, make_client, no_ambient_credentials):
    cfg = load_api_config(endpoint=emu.url, token=TOKEN)
    assert cfg.host == emu.url
    synced_through(cfg, make_client)


def test_missing_credentials_are_named(no_ambient_credentials, tmp_path, monkeypatch):
    with pytest.raises(CredentialsError) as err:
        load_api_config(service_account_dir=str(tmp_path / "sa"))
    text = str(err.value)
    assert "KUBERNETES_SERVICE_HOST" in text and ".kube/config" in text and "endpoint" in text
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(CredentialsError, match=r"no service account token at .*sa/token"):
        load_api_config(service_account_dir=str(tmp_path / "sa"))
    with pytest.raises(CredentialsError, match=r"kubeconfig .*nope.yaml: no such file"):
        load_api_config(kubeconfig=str(tmp_path / "nope.yaml"))
    with pytest.raises(CredentialsError, match="certAuthFilePath"):
        load_api_config(endpoint="https://k8s.example", cert_auth_file_path="/nonexistent/ca")
    with pytest.raises(CredentialsError, match="not an http"):
        load_api_config(endpoint="k8s.example:6443")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n")
    with pytest.raises(CredentialsError, match=r"kubeconfig .*bad.yaml"):
        load_api_config(kubeconfig=str(bad))


def test_gc_paused_by_several_threads_is_on_again_when_all_are_done():
    assert gc.isenabled()
    inside = threading.Barrier(3, timeout=5)
    looked = threading.Barrier(3, timeout=5)
    leave = threading.Event()
    seen: list[bool] = []

    def worker() -> None:
        with gc_paused():
            inside.wait()
            seen.append(gc.isenabled())
            looked.wait()
            leave.wait(5)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    with gc_paused():
        inside.wait()
        looked.wait()  # all three inside: off for each of them
        assert seen == [False, False] and not gc.isenabled()
        leave.set()
        for t in threads:
            t.join(5)
    assert gc.isenabled()  # and on again once none is inside
    gc.disable()  # found off, left off
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# --- watches that end at once or answer an error event back off (issue 10 review) -------


def test_watches_that_end_at_once_are_retried_with_backoff(emu, make_client):
    """A proxy or an API server that ends every watch cleanly at once (no event, no
    bookmark) must not make the reflector spin: before, a clean end reset the backoff and
    watched again at once, as fast as the server answered (67 watches in 3 s against the
    emulator, which bounds it); now a watch shorter than a second that delivered nothing
    backs off as a failure does (client-go's "very short watch"), and a change still
    arrives through the next LIST-less watch."""
    emu.watch_limit = 0.0
    c = make_client(
        [WatchSpec(INGRESSES, m.Named)], timing=Timing(backoff_base=0.2, backoff_cap=1.0)
    )
    assert c.wait_synced(5)
    t0 = time.monotonic()
    cpu0 = time.process_time()
    time.sleep(2.0)
    watches = emu.count(ING_PATH, since=t0, watch=True)
    assert 1 <= watches <= 8, watches  # 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.5-1 s apart
    assert time.process_time() - cpu0 < 1.0
    emu.create(o.ingress("late"))
    assert wait_until(lambda: c.get("Ingress", "default", "late") is not None, timeout=5)
    assert emu.count(ING_PATH, since=t0, watch=False) == 0  # resumed by watch, no re-LIST


def test_watches_that_answer_an_error_event_back_off(emu, make_client):
    """An API server whose watches each answer an ERROR event at once (etcd timing out:
    500) must see the reflector back off to its cap: before, the ERROR line counted as a
    delivery, which reset the backoff, so every reflector asked again every 0.1-0.2 s
    for as long as the trouble lasted."""
    emu.watch_error = (500, "InternalError")
    c = make_client(
        [WatchSpec(INGRESSES, m.Named)], timing=Timing(backoff_base=0.2, backoff_cap=1.0)
    )
    assert c.wait_synced(5)
    t0 = time.monotonic()
    time.sleep(3.0)
    watches = emu.count(ING_PATH, since=t0, watch=True)
    assert 1 <= watches <= 7, watches  # 0.4-0.8, then 0.5-1 s apart at the cap
    emu.watch_error = None
    emu.create(o.ingress("late"))
    assert wait_until(lambda: c.get("Ingress", "default", "late") is not None, timeout=5)


# --- a line cut by a reset is read again whole (issue 10 review) ------------------------


def test_a_line_cut_by_a_reset_is_read_again_whole(emu, make_client):
    """A watch connection reset in the middle of an event's JSON line: the half line is
    not applied, the reflector resumes from the last whole event without a LIST, and
    the cut event and the ones after it arrive once each (passes before: pinned)."""
    rec = Recorder()
    c = make_client(
        [WatchSpec(INGRESSES, m.Named)],
        timing=Timing(backoff_base=0.05, backoff_cap=0.2),
        on_change=rec,
    )
    assert c.wait_synced(5) and emu.wait_watches(1)
    emu.create(o.ingress("before"))
    assert wait_until(lambda: c.get("Ingress", "default", "before") is not None)
    rv = c.resource_versions()["Ingress in all namespaces"]
    start, t0 = len(rec.since(0)), time.monotonic()
    assert emu.tear_watches() == 1
    emu.create(o.ingress("cut"))
    emu.create(o.ingress("after"))
    assert wait_until(lambda: c.get("Ingress", "default", "after") is not None)
    assert set(c.objects("Ingress")) == {("default", n) for n in ("before", "cut", "after")}
    again = [r for r in emu.requests if r.at >= t0 and r.path == ING_PATH]
    assert [r.query.get("watch") for r in again] == ["true"]
    assert again[0].query["resourceVersion"] == rv
    keys = [k for ch in rec.since(start) for k in ch.keys]
    assert sorted(keys) == [("default", "after"), ("default", "cut")]


# --- credentials: a rotated service account token (issue 10 review) ---------------------


def test_a_rotated_service_account_token_is_read_again(emu, make_client, tmp_path, monkeypatch):
    """In a pod the kubelet rotates the projected token; an API server that stops taking
    the old one (401) is answered with the new one once the loader reads the file again
    (every minute; 0.2 s here), and the reflectors resume without a LIST (passes before:
    pinned, through edge's copy of the configuration and its endpoint override)."""
    orig = InClusterConfigLoader.__init__

    def short(self, *args, **kwargs):  # the loader's refresh period, 1 minute, shortened
        orig(self, *args, **kwargs)
        self._token_refresh_period = datetime.timedelta(seconds=0.2)

    monkeypatch.setattr(InClusterConfigLoader, "__init__", short)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(emu.token)
    (sa / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    cfg = load_api_config(endpoint=emu.url, service_account_dir=str(sa))
    c = make_client(
        [WatchSpec(INGRESSES, m.Named)], timing=Timing(backoff_base=0.1, backoff_cap=0.5), cfg=cfg
    )
    assert c.wait_synced(5) and emu.wait_watches(1)
    t0 = time.monotonic()
    (sa / "token").write_text("rotated")
    emu.token = "rotated"  # the old token is refused from now on
    emu.drop_watches()
    emu.create(o.ingress("after"))
    assert wait_until(lambda: c.get("Ingress", "default", "after") is not None, timeout=5)
    seen = [r.authorization for r in emu.requests if r.at >= t0]
    assert seen[-1].lower() == "bearer rotated"
    assert emu.count(ING_PATH, since=t0, watch=False) == 0


# --- the core several sources share ------------------------------------------------------

SVC_PATH = "/api/v1/services"
SECRET_PATH = "/api/v1/secrets"
TRAEFIK_ROUTES = "/apis/traefik.io/v1alpha1/ingressroutes"
INGRESS_ROUTES = CRD_RESOURCES[0]


def ns_path(namespace: str, plural: str = "services") -> str:
    return f"/api/v1/namespaces/{namespace}/{plural}"


@pytest.fixture
def make_core(emu):
    cores: list[tuple[KubeCore, list[Subscription]]] = []

    def make(timing: Timing = FAST) -> tuple[KubeCore, list[Subscription]]:
        core = KubeCore(load_api_config(endpoint=emu.url, token=TOKEN), timing=timing)
        subs: list[Subscription] = []
        cores.append((core, subs))
        return core, subs

    yield make
    for _, subs in cores:
        for s in subs:
            s.close()


def subscribe(
    core: KubeCore, subs: list[Subscription], name: str, watches, namespaces=(), rec=None
) -> Subscription:
    s = core.subscribe(name, watches, namespaces=namespaces, on_change=rec)
    subs.append(s)
    return s


def test_two_sources_share_one_reflector_per_kind_and_namespace(emu, make_core):
    """Two sources asking alike for Services (namespaces a, b and b, c) and each for a
    kind of its own: Services are listed and watched once per namespace of the union,
    never twice; each source reads only its namespaces and hears only of them."""
    for ns in ("a", "b", "c", "d"):
        emu.create(o.service(f"s-{ns}", ns))
    emu.create(o.ingress("ing", "a"))
    core, subs = make_core()
    one, two = Recorder(), Recorder()
    ingress = subscribe(
        core,
        subs,
        "ingress",
        [WatchSpec(INGRESSES, m.Named), WatchSpec(SERVICES, m.Named)],
        ["a", "b"],
        one,
    )
    crd = subscribe(
        core,
        subs,
        "crd",
        [WatchSpec(SERVICES, m.Named), WatchSpec(INGRESS_ROUTES, m.Named)],
        ["b", "c"],
        two,
    )
    ingress.open()
    crd.open()
    assert wait_until(lambda: ingress.synced and crd.synced)
    assert ingress.pending() == {} and crd.pending() == {}
    assert len(core.clients) == 1
    assert emu.wait_watches(7)  # Services in a, b, c; Ingresses in a, b; IngressRoutes in b, c
    for ns in ("a", "b", "c"):
        assert emu.count(ns_path(ns), watch=False) == 1, ns
        assert emu.count(ns_path(ns), watch=True) == 1, ns
    assert emu.count(ns_path("d")) == 0 and emu.count(SVC_PATH) == 0
    assert set(ingress.objects("Service")) == {("a", "s-a"), ("b", "s-b")}
    assert set(crd.snapshot()["Service"]) == {("b", "s-b"), ("c", "s-c")}
    assert sorted(crd.snapshot()) == ["IngressRoute", "Service"]
    assert crd.get("Service", "a", "s-a") is None and ingress.get("Service", "a", "s-a")
    # the last Change each heard said synced, once all of its own reflectors were
    assert one.changes[-1].synced and two.changes[-1].synced
    # a change in a reaches the ingress source only, one in b both, one in c the crd only
    n1, n2 = len(one.changes), len(two.changes)
    emu.create(o.service("new", "a"))
    assert wait_until(lambda: ("a", "new") in one.keys("Service", n1))
    emu.create(o.service("new", "c"))
    assert wait_until(lambda: ("c", "new") in two.keys("Service", n2))
    emu.create(o.service("new", "b"))
    assert wait_until(lambda: ("b", "new") in one.keys("Service", n1))
    assert wait_until(lambda: ("b", "new") in two.keys("Service", n2))
    assert one.keys("Service", n1) == {("a", "new"), ("b", "new")}
    assert two.keys("Service", n2) == {("b", "new"), ("c", "new")}
    # Ingresses are the ingress source's only: the other never hears of them
    emu.create(o.ingress("later", "b"))
    assert wait_until(lambda: ("b", "later") in one.keys("Ingress", n1))
    assert all(ch.kind != "Ingress" for ch in two.changes)


def test_a_source_reading_every_namespace_makes_the_shared_reflector_cluster_wide(emu, make_core):
    """One source in all namespaces, the other in c: one Services reflector over every
    namespace, listed once; the restricted source still reads c alone."""
    for ns in ("a", "c"):
        emu.create(o.service(f"s-{ns}", ns))
    core, subs = make_core()
    everywhere = subscribe(core, subs, "all", [WatchSpec(SERVICES, m.Named)])
    only_c = subscribe(core, subs, "c", [WatchSpec(SERVICES, m.Named)], ["c"])
    everywhere.open()
    only_c.open()
    assert wait_until(lambda: everywhere.synced and only_c.synced)
    assert emu.wait_watches(1)
    assert emu.count(SVC_PATH, watch=False) == 1 and emu.count(SVC_PATH, watch=True) == 1
    assert emu.count(ns_path("c")) == 0
    assert set(everywhere.objects("Service")) == {("a", "s-a"), ("c", "s-c")}
    assert set(only_c.objects("Service")) == {("c", "s-c")}


def test_a_kind_asked_for_with_other_selectors_is_not_shared(emu, make_core):
    """Secrets of every type for one source, TLS ones for the other: two reflectors, two
    clients, each source reading what it asked for."""
    emu.create(o.secret("tls"))
    opaque = o.secret("opaque")
    opaque["type"] = "Opaque"
    emu.create(opaque)
    core, subs = make_core()
    tls = subscribe(
        core, subs, "tls", [WatchSpec(SECRETS, m.Named, field_selector="type=kubernetes.io/tls")]
    )
    every = subscribe(core, subs, "every", [WatchSpec(SECRETS, m.Named)])
    tls.open()
    every.open()
    assert wait_until(lambda: tls.synced and every.synced)
    assert len(core.clients) == 2
    assert emu.count(SECRET_PATH, watch=False) == 2
    assert set(tls.objects("Secret")) == {("default", "tls")}
    assert set(every.objects("Secret")) == {("default", "tls"), ("default", "opaque")}


def test_a_source_that_cannot_list_its_kinds_does_not_hold_the_other_back(emu, make_core):
    """IngressRoutes refused (403: CRDs not granted): the source reading them waits and
    says why; the one sharing its Services with it is synced and hears its changes."""
    emu.authorizer = lambda a: a.group != "traefik.io"
    emu.create(o.service("s"))
    core, subs = make_core()
    rec = Recorder()
    ingress = subscribe(core, subs, "ingress", [WatchSpec(SERVICES, m.Named)], rec=rec)
    crd = subscribe(
        core,
        subs,
        "crd",
        [WatchSpec(SERVICES, m.Named), WatchSpec(INGRESS_ROUTES, m.Named)],
    )
    ingress.open()
    crd.open()
    assert wait_until(lambda: ingress.synced)
    assert rec.changes and rec.changes[-1].synced
    assert wait_until(lambda: "403" in crd.pending().get("IngressRoute in all namespaces", ""))
    assert not crd.synced and set(crd.pending()) == {"IngressRoute in all namespaces"}
    emu.authorizer = None
    assert wait_until(lambda: crd.synced, timeout=10)


def test_the_last_source_to_stop_stops_the_reflectors(emu, make_core):
    core, subs = make_core()
    first = subscribe(core, subs, "first", [WatchSpec(SERVICES, m.Named)])
    second = subscribe(core, subs, "second", [WatchSpec(SERVICES, m.Named)])
    first.open()
    second.open()
    assert wait_until(lambda: first.synced and second.synced) and emu.wait_watches(1)
    with pytest.raises(RuntimeError, match="late subscribes after the core started"):
        core.subscribe("late", [WatchSpec(SERVICES, m.Named)])
    rec = Recorder()
    first.on_change = rec
    first.close()
    assert [t for t in threading.enumerate() if t.name == "kube-Service-all"]
    emu.create(o.service("after"))
    assert wait_until(lambda: second.get("Service", "default", "after") is not None)
    assert rec.changes == []  # a closed source hears nothing
    second.close()
    assert wait_until(lambda: emu.open_watches() == 0)
    assert not [t for t in threading.enumerate() if t.name == "kube-Service-all"]
    with pytest.raises(RuntimeError, match="already stopped"):
        first.open()


def test_the_owner_stops_every_reflector_whichever_sources_are_open(emu, make_core):
    """Edge's shutdown stops the core itself: one source closed, the other never did
    (its stop raised, or never ran); every reflector thread ends all the same, the
    watches close, the source left open cannot open again, and stopping again (or that
    source closing late) is harmless."""
    core, subs = make_core()
    first = subscribe(core, subs, "first", [WatchSpec(SERVICES, m.Named)])
    second = subscribe(
        core, subs, "second", [WatchSpec(SERVICES, m.Named), WatchSpec(INGRESSES, m.Named)]
    )
    first.open()
    second.open()
    assert wait_until(lambda: first.synced and second.synced) and emu.wait_watches(2)
    first.close()
    assert sorted(core.alive()) == ["kube-Ingress-all", "kube-Service-all"]
    assert core.stop(5.0) is True
    assert core.alive() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("kube-")]
    assert wait_until(lambda: emu.open_watches() == 0)
    assert core.stop(0.1) is True
    second.close()
    with pytest.raises(RuntimeError, match="already stopped"):
        second.open()


def test_a_source_opened_after_its_reflectors_synced_is_told_at_once(emu, make_core):
    """The second source opens once the first has synced every reflector they share:
    no reflector will say so again, so opening says it (else its provider would wait
    for a change that may never come)."""
    emu.create(o.service("s"))
    core, subs = make_core()
    first = subscribe(core, subs, "first", [WatchSpec(SERVICES, m.Named)])
    rec = Recorder()
    late = subscribe(core, subs, "late", [WatchSpec(SERVICES, m.Named)], rec=rec)
    first.open()
    assert wait_until(lambda: first.synced)
    assert rec.changes == []  # not open yet: hears nothing
    late.open()
    assert [(c.kind, c.keys, c.synced) for c in rec.changes] == [("Service", frozenset(), True)]
