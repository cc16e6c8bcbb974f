"""The API server emulator, driven by the official kubernetes client over a socket.

Every test talks to a real ``Emulator`` on 127.0.0.1 through
``kubernetes.client`` (and ``kubernetes.watch.Watch``), the way any Kubernetes
tool would, so what edge's client sees in its own tests is what a cluster says.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.kube import objects as o
from tests.kube.emulator import Emulator

TOKEN = "s3cret"


@pytest.fixture
def emu():
    with Emulator(token=TOKEN, bookmark_interval=None) as e:
        yield e


@pytest.fixture
def api_client(emu):
    with client.ApiClient(o.configuration(emu.url, TOKEN)) as c:
        yield c


@pytest.fixture
def net(api_client):
    return client.NetworkingV1Api(api_client)


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


def names(obj_list) -> list[str]:
    return [i.metadata.name for i in obj_list.items]


def collect(stream, until, timeout=5.0, events=None):
    """Events from a Watch stream (in a thread) until ``until(events)`` or timeout."""
    events = [] if events is None else events
    done = threading.Event()

    def run():
        try:
            for ev in stream:
                events.append(ev)
                if until(events):
                    break
        finally:
            done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    done.wait(timeout)
    return events


# --- LIST ------------------------------------------------------------------------


def test_list_cluster_wide_and_namespaced(emu, net):
    emu.create(o.ingress("a", "ns1"))
    emu.create(o.ingress("b", "ns2"))
    emu.create(o.ingress("c", "ns1"))
    everything = net.list_ingress_for_all_namespaces()
    assert names(everything) == ["a", "c", "b"]  # sorted by namespace, then name
    assert everything.metadata.resource_version == str(emu.resource_version)
    assert names(net.list_namespaced_ingress("ns1")) == ["a", "c"]
    assert names(net.list_namespaced_ingress("ns3")) == []
    one = net.read_namespaced_ingress("b", "ns2")
    assert one.spec.rules[0].host == "example.com"
    assert one.metadata.resource_version == "3"


def test_each_list_answer_is_recorded_with_its_timing_and_size(emu, net, api_client):
    emu.create(o.ingress("a"))
    t0 = time.monotonic()
    resp = net.list_namespaced_ingress("default", _preload_content=False)
    body = resp.data
    net.read_namespaced_ingress("a", "default")  # a GET of one object is no LIST
    # An answer is recorded once its last byte is written, which the client may have
    # read first: the upper bound is taken once the record is there (within 5 s).
    deadline = time.monotonic() + 5
    while not emu.list_answers and time.monotonic() < deadline:
        time.sleep(0.01)
    t1 = time.monotonic()
    [answer] = emu.list_answers
    assert answer.path == "/apis/networking.k8s.io/v1/namespaces/default/ingresses"
    assert t0 <= answer.received <= answer.answered <= t1
    assert answer.size == len(body)
    assert [i["metadata"]["name"] for i in json.loads(body)["items"]] == ["a"]


def test_the_listen_backlog_holds_a_burst_of_reflectors(emu):
    # Send-Q of a listening socket is its backlog; with socketserver's 5, the 15
    # reflectors of one provider lost SYNs and waited out TCP's 1 s retransmission
    out = subprocess.run(
        ["ss", "-Hltn", f"sport = :{emu.port}"], capture_output=True, text=True, timeout=10
    ).stdout.split()
    assert out[0] == "LISTEN"
    assert int(out[2]) >= 64


def test_list_cluster_scoped_kind(emu, net):
    emu.create(o.ingress_class("edge", default=True))
    emu.create(o.ingress_class("other", controller="example.com/other"))
    classes = net.list_ingress_class()
    assert names(classes) == ["edge", "other"]
    assert classes.items[1].spec.controller == "example.com/other"
    assert classes.items[0].metadata.namespace is None


def test_list_paging_is_a_consistent_snapshot(emu, net):
    for i in range(7):
        emu.create(o.ingress(f"ing-{i}"))
    page = net.list_namespaced_ingress("default", limit=3)
    assert names(page) == ["ing-0", "ing-1", "ing-2"]
    assert page.metadata.remaining_item_count == 4
    snapshot_rv = page.metadata.resource_version
    # writes between pages do not show in the rest of the list
    emu.delete("Ingress", "default", "ing-4")
    emu.create(o.ingress("ing-9"))
    seen = names(page)
    pages = 1
    while page.metadata._continue and pages < 10:
        page = net.list_namespaced_ingress("default", limit=3, _continue=page.metadata._continue)
        assert page.metadata.resource_version == snapshot_rv
        seen += names(page)
        pages += 1
    assert pages == 3
    assert seen == [f"ing-{i}" for i in range(7)]
    # a fresh list sees the writes
    assert "ing-4" not in names(net.list_namespaced_ingress("default"))


def test_list_at_resource_version_0_is_answered_whole(emu, net):
    # the API server's watch cache answers rv=0 in one piece, whatever the limit
    for i in range(5):
        emu.create(o.ingress(f"ing-{i}"))
    page = net.list_namespaced_ingress("default", limit=2, resource_version="0")
    assert names(page) == [f"ing-{i}" for i in range(5)]
    assert not page.metadata._continue
    assert page.metadata.resource_version == str(emu.resource_version)
    assert names(net.list_namespaced_ingress("default", limit=2)) == ["ing-0", "ing-1"]


def test_list_continue_token_expires_after_compaction(emu, net):
    for i in range(4):
        emu.create(o.ingress(f"ing-{i}"))
    page = net.list_namespaced_ingress("default", limit=2)
    emu.create(o.ingress("later"))
    emu.compact()
    with pytest.raises(ApiException) as err:
        net.list_namespaced_ingress("default", limit=2, _continue=page.metadata._continue)
    assert err.value.status == 410
    assert "Expired" in err.value.body


def test_list_exact_resource_version(emu, net):
    emu.create(o.ingress("a"))
    before = str(emu.resource_version)
    emu.create(o.ingress("b"))
    emu.delete("Ingress", "default", "a")
    old = net.list_namespaced_ingress(
        "default", resource_version=before, resource_version_match="Exact"
    )
    assert names(old) == ["a"]
    assert old.metadata.resource_version == before
    emu.compact()
    with pytest.raises(ApiException) as err:
        net.list_namespaced_ingress(
            "default", resource_version=before, resource_version_match="Exact"
        )
    assert err.value.status == 410


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),  # objects without the label match !=
        ("app in (web, api)", ["a", "b", "c"]),
        ("app notin (web)", ["c", "d"]),
        ("tier", ["a", "c"]),
        ("!tier", ["b", "d"]),
        ("app=web,tier=front", ["a"]),
        ("app in (web,api),!tier", ["b"]),
    ],
)
def test_list_label_selector(emu, net, selector, expected):
    emu.create(o.ingress("a", labels={"app": "web", "tier": "front"}))
    emu.create(o.ingress("b", labels={"app": "web"}))
    emu.create(o.ingress("c", labels={"app": "api", "tier": "back"}))
    emu.create(o.ingress("d"))
    assert names(net.list_namespaced_ingress("default", label_selector=selector)) == expected


def test_list_bad_label_selector_is_400(emu, net):
    with pytest.raises(ApiException) as err:
        net.list_namespaced_ingress("default", label_selector="app in web")
    assert err.value.status == 400


def test_list_field_selector(emu, core):
    emu.create(o.secret("tls-a", "ns1"))
    emu.create(o.secret("tls-b", "ns2"))
    emu.create({**o.secret("opaque", "ns1"), "type": "Opaque"})
    assert names(core.list_secret_for_all_namespaces(field_selector="metadata.name=tls-b")) == [
        "tls-b"
    ]
    assert names(core.list_secret_for_all_namespaces(field_selector="metadata.namespace=ns1")) == [
        "opaque",
        "tls-a",
    ]
    assert names(core.list_secret_for_all_namespaces(field_selector="metadata.namespace!=ns1")) == [
        "tls-b"
    ]
    assert names(core.list_secret_for_all_namespaces(field_selector="type=kubernetes.io/tls")) == [
        "tls-a",
        "tls-b",
    ]


# --- WATCH -----------------------------------------------------------------------


def test_watch_added_modified_deleted_and_bookmarks(emu, net):
    emu.create(o.ingress("before"))
    start = net.list_namespaced_ingress("default").metadata.resource_version
    w = watch.Watch()
    stream = w.stream(
        net.list_namespaced_ingress,
        "default",
        resource_version=start,
        allow_watch_bookmarks=True,
        timeout_seconds=10,
    )

    events: list[dict] = []

    def wait_for(n):
        for _ in range(100):
            if len(events) >= n:
                return
            time.sleep(0.02)

    def writes():
        emu.wait_watches(1, kind="Ingress")
        emu.create(o.ingress("x"))
        emu.patch("Ingress", "default", "x", {"metadata": {"labels": {"v": "2"}}})
        emu.create(o.service("not-an-ingress"))  # another kind: not on this stream
        wait_for(2)
        emu.send_bookmarks()
        wait_for(3)
        emu.delete("Ingress", "default", "x")

    threading.Thread(target=writes, daemon=True).start()
    collect(stream, lambda evs: evs[-1]["type"] == "DELETED", events=events)
    w.stop()
    kinds = [e["type"] for e in events]
    assert kinds == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED"]
    assert events[1]["object"].metadata.labels == {"v": "2"}
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)
    # the bookmark carries the resourceVersion of the service written before it
    assert rvs[2] == rvs[1] + 1
    assert events[2]["raw_object"] == {
        "kind": "Ingress",
        "apiVersion": "networking.k8s.io/v1",
        "metadata": {"resourceVersion": str(rvs[2])},
    }
    # the deleted object carries the deletion's version
    assert rvs[3] == emu.resource_version


def test_watch_replays_history_after_resource_version(emu, net):
    start = emu.resource_version
    emu.create(o.ingress("a"))
    emu.create(o.ingress("b"))
    emu.delete("Ingress", "default", "a")
    stream = watch.Watch().stream(
        net.list_namespaced_ingress, "default", resource_version=str(start), timeout_seconds=2
    )
    events = collect(stream, lambda evs: len(evs) == 3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]


def test_watch_without_version_starts_with_current_state(emu, net):
    emu.create(o.ingress("a"))
    emu.create(o.ingress("b"))
    emu.delete("Ingress", "default", "a")
    stream = watch.Watch().stream(net.list_namespaced_ingress, "default", timeout_seconds=2)
    events = collect(stream, lambda evs: len(evs) == 1)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "b")]


def test_watch_label_selector_transitions(emu, net):
    emu.create(o.ingress("x", labels={"app": "web"}))
    start = str(emu.resource_version)
    stream = watch.Watch().stream(
        net.list_namespaced_ingress,
        "default",
        resource_version=start,
        label_selector="app=web",
        timeout_seconds=5,
    )

    def writes():
        emu.wait_watches(1)
        emu.patch("Ingress", "default", "x", {"metadata": {"labels": {"app": "api"}}})
        emu.create(o.ingress("y", labels={"app": "api"}))  # never matches
        emu.patch("Ingress", "default", "x", {"metadata": {"labels": {"app": "web"}}})
        emu.patch("Ingress", "default", "x", {"spec": {"ingressClassName": "edge"}})

    threading.Thread(target=writes, daemon=True).start()
    events = collect(stream, lambda evs: len(evs) == 3)
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("DELETED", "x"),
        ("ADDED", "x"),
        ("MODIFIED", "x"),
    ]


def test_watch_cluster_wide_sees_every_namespace(emu, net):
    start = str(emu.resource_version)
    stream = watch.Watch().stream(
        net.list_ingress_for_all_namespaces, resource_version=start, timeout_seconds=5
    )

    def writes():
        emu.wait_watches(1)
        emu.create(o.ingress("a", "ns1"))
        emu.create(o.ingress("b", "ns2"))

    threading.Thread(target=writes, daemon=True).start()
    events = collect(stream, lambda evs: len(evs) == 2)
    assert [(e["object"].metadata.namespace, e["object"].metadata.name) for e in events] == [
        ("ns1", "a"),
        ("ns2", "b"),
    ]


def test_watch_periodic_bookmarks():
    with Emulator(bookmark_interval=0.1) as emu, client.ApiClient(o.configuration(emu.url)) as c:
        net = client.NetworkingV1Api(c)
        emu.create(o.ingress("a"))
        stream = watch.Watch().stream(
            net.list_namespaced_ingress,
            "default",
            resource_version=str(emu.resource_version),
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        )
        events = collect(stream, lambda evs: len(evs) == 3)
        assert [e["type"] for e in events] == ["BOOKMARK"] * 3
        # without allowWatchBookmarks there are none
        quiet = watch.Watch().stream(
            net.list_namespaced_ingress,
            "default",
            resource_version=str(emu.resource_version),
            timeout_seconds=1,
        )
        assert collect(quiet, lambda evs: True, timeout=3) == []


def test_watch_ends_after_timeout_seconds(emu, net):
    w = watch.Watch()
    t0 = time.monotonic()
    events = list(
        w.stream(net.list_namespaced_ingress, "default", resource_version="1", timeout_seconds=1)
    )
    elapsed = time.monotonic() - t0
    assert events == []
    assert 0.9 <= elapsed < 5
    assert emu.open_watches() == 0


def test_watch_410_after_compaction(emu, net):
    emu.create(o.ingress("a"))
    old = str(emu.resource_version)
    emu.create(o.ingress("b"))
    emu.compact()
    # timeout_seconds turns off Watch's own retry, so the 410 surfaces
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                net.list_namespaced_ingress, "default", resource_version=old, timeout_seconds=2
            )
        )
    assert err.value.status == 410
    assert "Expired" in err.value.reason
    # from the compaction point on it works
    stream = watch.Watch().stream(
        net.list_namespaced_ingress,
        "default",
        resource_version=str(emu.resource_version),
        timeout_seconds=1,
    )
    assert list(stream) == []


def test_watch_410_raw_event_is_a_status(emu, api_client):
    emu.create(o.ingress("a"))
    emu.compact()
    resp = client.NetworkingV1Api(api_client).list_namespaced_ingress(
        "default", watch=True, resource_version="1", _preload_content=False
    )
    assert resp.status == 200
    line = resp.read().decode().strip()
    ev = json.loads(line)
    assert ev["type"] == "ERROR"
    assert ev["object"]["kind"] == "Status"
    assert ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"


def test_many_concurrent_watches(emu, net):
    n = 20
    start = str(emu.resource_version)
    results: list[list[str]] = [[] for _ in range(n)]

    def run(i):
        for ev in watch.Watch().stream(
            net.list_namespaced_ingress, "default", resource_version=start, timeout_seconds=5
        ):
            results[i].append(ev["object"].metadata.name)
            if len(results[i]) == 2:
                break

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    assert emu.wait_watches(n, timeout=10)
    emu.create(o.ingress("one"))
    emu.create(o.ingress("two"))
    for t in threads:
        t.join(10)
    assert results == [["one", "two"]] * n


# --- writes ------------------------------------------------------------------------


def test_status_patch_through_the_subresource(emu, net):
    emu.create(o.ingress("web"))
    start = str(emu.resource_version)
    body = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}}
    out = net.patch_namespaced_ingress_status(
        "web", "default", body, _content_type="application/merge-patch+json"
    )
    assert out.status.load_balancer.ingress[0].ip == "192.0.2.10"
    stored = emu.get("Ingress", "default", "web")
    assert stored["status"] == body["status"]
    assert stored["spec"] == o.ingress("web")["spec"]
    assert int(stored["metadata"]["resourceVersion"]) == int(start) + 1
    # a list in a merge patch replaces the whole list
    net.patch_namespaced_ingress_status(
        "web",
        "default",
        {"status": {"loadBalancer": {"ingress": [{"hostname": "lb.example"}]}}},
        _content_type="application/merge-patch+json",
    )
    assert emu.get("Ingress", "default", "web")["status"]["loadBalancer"] == {
        "ingress": [{"hostname": "lb.example"}]
    }
    # the status subresource ignores spec changes; the main resource ignores status
    net.patch_namespaced_ingress_status(
        "web",
        "default",
        {"spec": {"ingressClassName": "nope"}},
        _content_type="application/merge-patch+json",
    )
    assert "ingressClassName" not in emu.get("Ingress", "default", "web")["spec"]
    net.patch_namespaced_ingress(
        "web",
        "default",
        {"status": {"loadBalancer": {}}, "metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    stored = emu.get("Ingress", "default", "web")
    assert stored["status"]["loadBalancer"] == {"ingress": [{"hostname": "lb.example"}]}
    assert stored["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(ApiException) as err:
        net.patch_namespaced_ingress_status(
            "missing", "default", body, _content_type="application/merge-patch+json"
        )
    assert err.value.status == 404


def test_status_write_is_a_watch_event(emu, net):
    emu.create(o.ingress("web"))
    start = str(emu.resource_version)
    stream = watch.Watch().stream(
        net.list_namespaced_ingress, "default", resource_version=start, timeout_seconds=5
    )

    def write():
        emu.wait_watches(1)
        net.patch_namespaced_ingress_status(
            "web",
            "default",
            {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}},
            _content_type="application/merge-patch+json",
        )

    threading.Thread(target=write, daemon=True).start()
    events = collect(stream, lambda evs: len(evs) == 1)
    assert events[0]["type"] == "MODIFIED"
    assert events[0]["object"].status.load_balancer.ingress[0].ip == "192.0.2.1"


def test_put_with_a_stale_version_conflicts(emu, net):
    emu.create(o.ingress("web"))
    current = net.read_namespaced_ingress("web", "default")
    emu.patch("Ingress", "default", "web", {"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(ApiException) as err:
        net.replace_namespaced_ingress("web", "default", current)
    assert err.value.status == 409


def test_create_and_delete_over_http(emu, net):
    net.create_namespaced_ingress("ns1", o.ingress("made", "ns1"))
    assert emu.get("Ingress", "ns1", "made") is not None
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress("ns1", o.ingress("made", "ns1"))
    assert err.value.status == 409
    net.delete_namespaced_ingress("made", "ns1")
    assert emu.get("Ingress", "ns1", "made") is None


# --- faults and accounting -----------------------------------------------------------


def test_fail_for_answers_503_then_recovers(emu, net):
    emu.create(o.ingress("a"))
    emu.fail_for(0.5)
    with pytest.raises(ApiException) as err:
        net.list_namespaced_ingress("default")
    assert err.value.status == 503
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            assert names(net.list_namespaced_ingress("default")) == ["a"]
            break
        except ApiException as e:
            assert e.status == 503
            time.sleep(0.1)
    else:
        pytest.fail("still failing after the outage")


def test_requests_are_counted_per_path(emu, net):
    path = "/apis/networking.k8s.io/v1/namespaces/default/ingresses"
    t0 = time.monotonic()
    for _ in range(3):
        net.list_namespaced_ingress("default")
    net.list_ingress_for_all_namespaces()
    assert emu.count(path, since=t0) == 3
    assert emu.count(path, since=t0, watch=True) == 0
    assert emu.count("/apis/networking.k8s.io/v1/ingresses", since=t0) == 1
    assert emu.count(since=time.monotonic()) == 0


def test_authorization_header_is_required(emu, net):
    net.list_namespaced_ingress("default")
    assert emu.requests[-1].authorization == f"Bearer {TOKEN}"
    with client.ApiClient(o.configuration(emu.url, "wrong")) as c:
        with pytest.raises(ApiException) as err:
            client.NetworkingV1Api(c).list_namespaced_ingress("default")
        assert err.value.status == 401
    with client.ApiClient(o.configuration(emu.url)) as c:
        with pytest.raises(ApiException) as err:
            client.NetworkingV1Api(c).list_namespaced_ingress("default")
        assert err.value.status == 401
    assert emu.requests[-1].authorization is None


def test_drop_watches_breaks_open_streams(emu, net):
    errors: list[BaseException] = []

    def run():
        try:
            for _ in watch.Watch().stream(
                net.list_namespaced_ingress, "default", resource_version="1", timeout_seconds=30
            ):
                pass
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert emu.wait_watches(1)
    assert emu.drop_watches() == 1
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], urllib3.exceptions.ProtocolError)


def test_stalled_watch_trips_the_client_read_timeout(emu, net):
    emu.create(o.ingress("a"))
    start = str(emu.resource_version)
    errors: list[BaseException] = []
    seen: list[str] = []

    def run():
        try:
            for ev in watch.Watch().stream(
                net.list_namespaced_ingress,
                "default",
                resource_version=start,
                timeout_seconds=30,
                _request_timeout=(2, 0.5),
            ):
                seen.append(ev["object"].metadata.name)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert emu.wait_watches(1)
    assert emu.stall_watches() == 1
    emu.create(o.ingress("never-seen"))
    t.join(5)
    assert not t.is_alive()
    assert seen == []
    assert len(errors) == 1
    assert isinstance(
        errors[0], urllib3.exceptions.ReadTimeoutError | urllib3.exceptions.ProtocolError
    )
    # the stalled connection ends on the server too once the client closed it
    deadline = time.monotonic() + 5
    while emu.open_watches() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emu.open_watches() == 0


def test_latency_delays_answers(emu, net):
    emu.latency = 0.3
    t0 = time.monotonic()
    net.list_namespaced_ingress("default")
    assert time.monotonic() - t0 >= 0.3


def test_stop_ends_open_watches(net):
    emu = Emulator().start()
    with client.ApiClient(o.configuration(emu.url)) as c:
        api = client.NetworkingV1Api(c)
        done = threading.Event()

        def run():
            try:
                for _ in watch.Watch().stream(
                    api.list_namespaced_ingress,
                    "default",
                    resource_version="1",
                    timeout_seconds=60,
                ):
                    pass
            except Exception:
                pass
            done.set()

        threading.Thread(target=run, daemon=True).start()
        assert emu.wait_watches(1)
        t0 = time.monotonic()
        emu.stop()
        assert time.monotonic() - t0 < 3
        assert done.wait(3)
