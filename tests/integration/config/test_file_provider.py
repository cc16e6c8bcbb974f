"""The file provider on a running edge: a file or a directory, watched or not, a
Kubernetes ConfigMap volume, a writer caught half way, certificates renewed in place.

Each test pins a defect found by the review of the configuration pipeline and
failed on the commit before its fix.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import ROOT, Edge, get, lb, need


def directory_edge(tmp: Path, files: dict[str, dict], **kwargs) -> Edge:
    """edge watching ``tmp/d``, holding ``files`` (name -> dynamic configuration)."""
    folder = tmp / "d"
    folder.mkdir()
    for name, conf in files.items():
        (folder / name).write_text(yaml.safe_dump(conf))
    providers = {"file": {"directory": str(folder), "watch": True}}
    return Edge(tmp, {}, static_extra={"providers": providers}, **kwargs)


def test_a_repeated_router_name_leaves_the_rest_of_its_file_serving(tmp_path, whoami):
    """b.yaml repeats a router name a.yaml defines: Traefik serves a.yaml's and every
    other element of b.yaml; edge left all of b.yaml out (other.test answered 404)."""
    a = {
        "http": {
            "routers": {"shared": {"rule": "Host(`a.test`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    b = {
        "http": {
            "routers": {
                "shared": {"rule": "Host(`b.test`)", "service": "app"},
                "other": {"rule": "Host(`other.test`)", "service": "app"},
            }
        }
    }
    e = directory_edge(tmp_path, {"a.yaml": a, "b.yaml": b})
    try:
        assert get(e.port, "/", host="other.test")[0] == 200
        assert get(e.port, "/", host="a.test")[0] == 200
        assert get(e.port, "/", host="b.test")[0] == 404  # the repeat is left out
        e.wait_for(r"http.routers 'shared' is defined in both .*a\.yaml and .*b\.yaml")
    finally:
        e.stop()


def test_a_file_provider_without_watch_follows_its_file(tmp_path, whoami):
    """A Traefik static configuration that leaves providers.file.watch out (its default
    is true) is followed: a route added to the file is served. Before, edge read it once."""
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    providers = {"file": {"filename": str(tmp_path / "dynamic.yaml")}}
    e = Edge(tmp_path, routes, static_extra={"providers": providers})
    try:
        assert get(e.port, "/", host="b.test")[0] == 404
        routes["http"]["routers"]["b"] = {"rule": "Host(`b.test`)", "service": "app"}
        n = e.applied()
        e.write_dynamic(routes)
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="b.test")[0] == 200
    finally:
        e.stop()


# A process that reads a directory once, then polls it while it cannot open a descriptor
# (EMFILE, as under a connection flood at the descriptor limit); prints what it published.
UNLISTED = r"""
import asyncio, json, os, resource, sys
from edge.providers.file import FileProvider

published = []
provider = FileProvider(directory=sys.argv[1], poll_interval=0.01)
http = lambda m: m.configuration.http
asyncio.run(provider.run(lambda m: published.append(sorted(http(m).routers) if http(m) else [])))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
held = []
try:
    for _ in range(64):
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
for _ in range(3):
    provider.poll()
for fd in held:
    os.close(fd)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
provider.poll()
print(json.dumps(published))
"""


def test_a_directory_that_cannot_be_listed_keeps_the_last_good_configuration(tmp_path):
    """os.walk skips a folder it cannot list, in silence: with the descriptors exhausted
    (or the folder unreadable to edge's user, or a stale NFS handle) the directory
    provider published an empty configuration and every route answered 404 until the
    listing worked again. Traefik's ReadDir error keeps the last configuration; so does
    edge now, logging why."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "a.yaml").write_text(
        yaml.safe_dump({"http": {"routers": {"a": {"rule": "Host(`a.test`)", "service": "app"}}}})
    )
    done = subprocess.run(
        [sys.executable, "-c", UNLISTED, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["a"]]  # before: [["a"], []]
    assert "cannot list" in done.stderr and "keeping the last good configuration" in done.stderr


def configmap_version(folder: Path, version: int, files: dict[str, dict]) -> None:
    """Write ``files`` as kubelet's atomic writer updates a ConfigMap volume: a new
    hidden timestamped folder, then the ``..data`` symlink swapped to it by rename,
    each key a symlink through ``..data`` (the key's own inode never changes)."""
    stamp = folder / f"..2026_11_26_{version:02d}"
    stamp.mkdir()
    for name, conf in files.items():
        (stamp / name).write_text(yaml.safe_dump(conf))
    tmp = folder / "..data_tmp"
    tmp.symlink_to(stamp.name)
    tmp.rename(folder / "..data")
    for name in files:
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")


@pytest.mark.parametrize("form", ["filename", "directory"])
def test_a_configmap_volume_update_is_followed(tmp_path, whoami, form):
    """Guard (passes before): a ConfigMap volume is updated by swapping its ..data
    symlink; both provider forms see it, and the hidden ..data and timestamped
    folders are not read as files of their own (no duplicate names)."""
    folder = tmp_path / "cm"
    folder.mkdir()

    def version(host: str) -> dict:
        return {
            "http": {
                "routers": {"r": {"rule": f"Host(`{host}`)", "service": "app"}},
                "services": {"app": lb(whoami.url)},
            }
        }

    configmap_version(folder, 1, {"dynamic.yaml": version("v1.test")})
    source = (
        {"filename": str(folder / "dynamic.yaml")}
        if form == "filename"
        else {"directory": str(folder)}
    )
    e = Edge(tmp_path, {}, static_extra={"providers": {"file": {**source, "watch": True}}})
    try:
        assert get(e.port, "/", host="v1.test")[0] == 200
        n = e.applied()
        configmap_version(folder, 2, {"dynamic.yaml": version("v2.test")})
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="v2.test")[0] == 200
        assert get(e.port, "/", host="v1.test")[0] == 404
        assert "defined in both" not in e.log
    finally:
        e.stop()


@pytest.mark.parametrize(("workers", "sighup"), [(1, True), (2, True), (1, False), (2, False)])
def test_a_renewed_certificate_is_served(tmp_path, whoami, workers, sighup):
    """A certificate renewed in place (certbot's deploy hook, a Vault agent) is served
    after SIGHUP, as Traefik's file provider reads the certificate files again at
    every reload. Edge re-read them only in a round that changed something other than
    endpoints, and SIGHUP made none when the dynamic file was unchanged: the old
    certificate was served until it expired. Without SIGHUP (certificates in Traefik's
    watched directory are followed, its watcher reloading on any event there), edge now
    looks at the files every CERT_POLL (1 s) while a file provider watches."""
    from tests.fixtures.tls.pki import PKI
    from tests.integration.peers import peer_fingerprint

    pki = PKI("pipeline CA")
    first, renewed = pki.issue("a.test"), pki.issue("a.test")
    cert = first.write(tmp_path, "a")
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app", "tls": {}}},
            "services": {"app": lb(whoami.url)},
        },
        "tls": {"certificates": [{"certFile": cert[0], "keyFile": cert[1]}]},
    }
    e = Edge(tmp_path, routes, static_extra={"workers": workers})
    try:
        assert peer_fingerprint(e.port, "a.test") == first.fingerprint
        renewed.write(tmp_path, "a")  # the same paths
        if sighup:
            e.signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        # every worker: eight connections in a row (SO_REUSEPORT spreads them)
        while {peer_fingerprint(e.port, "a.test") for _ in range(8)} != {renewed.fingerprint}:
            assert time.monotonic() < deadline, "the renewed certificate is not served:\n" + e.log
            time.sleep(0.1)
    finally:
        assert e.stop() == 0


def test_a_file_truncated_by_a_slow_writer_keeps_its_routes_until_written(tmp_path, whoami):
    """`curl http://config/dynamic.yaml > dynamic.yaml`: the shell truncates the file at
    once and the data comes when the server answers. Edge read the empty file after two
    polls (0.25 s each) and removed every route until the writer finished. A file that
    has just become empty now waits EMPTY_SETTLE (2 s) before it is read as empty."""
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, routes)
    try:
        assert get(e.port, "/", host="a.test")[0] == 200
        n = e.applied()
        e.dynamic_path.write_bytes(b"")  # truncated; the writer waits for its data
        time.sleep(1.0)
        assert get(e.port, "/", host="a.test")[0] == 200
        routes["http"]["routers"]["b"] = {"rule": "Host(`b.test`)", "service": "app"}
        e.dynamic_path.write_text(yaml.safe_dump(routes))
        e.wait_applied(n + 1)
        assert get(e.port, "/", host="b.test")[0] == 200
        assert get(e.port, "/", host="a.test")[0] == 200
        assert e.applied() == n + 1  # the empty file was never applied
    finally:
        e.stop()


def test_a_bad_element_costs_only_itself_at_start_and_on_reload(tmp_path, whoami):
    """A key error inside one router or service disables that element, with its key
    path, and the routers using it, each with its reason, in the log and the API; the
    rest of the file serves, at start and after a reload. Before, edge refused the
    whole file: at start nothing was served and /ready stayed 503."""
    good = {"rule": "Host(`good.test`)", "service": "app"}
    dynamic = {
        "http": {
            "routers": {"good": good, "misspelt": {"rule": "Host(`m.test`)", "sevice": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    e = Edge(tmp_path, dynamic, static_extra={"api": {"insecure": True}})
    try:
        assert get(e.port, "/", host="good.test")[0] == 200
        assert get(e.port, "/", host="m.test")[0] == 404
        e.wait_for(r"\$\.http\.routers\.misspelt\.sevice: unknown key \(disabled\)", start=0)
        router = api(e, "/api/http/routers/misspelt@file")
        assert router["status"] == "disabled"
        assert router["error"] == ["$.http.routers.misspelt.sevice: unknown key"]

        dynamic["http"]["routers"] = {
            "good": good,
            "to-broken": {"rule": "Host(`b.test`)", "service": "broken"},
        }
        dynamic["http"]["services"]["broken"] = lb("ftp://127.0.0.1:21")
        n = e.applied()
        e.write_dynamic(dynamic)
        e.wait_applied(n + 1, timeout=10)
        assert get(e.port, "/", host="good.test")[0] == 200
        assert get(e.port, "/", host="b.test")[0] == 404
        reason = "$.http.services.broken.loadBalancer.servers[0]: invalid server url 'ftp://127.0.0.1:21'"
        service = api(e, "/api/http/services/broken@file")
        assert service["status"] == "disabled" and service["error"][0].startswith(reason)
        router = api(e, "/api/http/routers/to-broken@file")
        assert router["status"] == "disabled"
        assert router["error"][0].startswith(f"service 'broken@file' is disabled: {reason}")
        assert api(e, "/api/http/routers/good@file")["status"] == "enabled"

        # A file that does not parse at all keeps its last good version.
        e.dynamic_path.write_text("http: {routers: [\n")
        e.wait_for(r"invalid YAML .*keeping the last good configuration", timeout=10)
        assert get(e.port, "/", host="good.test")[0] == 200
    finally:
        e.stop()


def test_a_bad_servers_transport_or_tls_options_costs_only_what_uses_it(tmp_path, whoami):
    """A key error in a serversTransport or in TLS options disables the services and
    routers using it, each naming the key path, in the log and the API; the good
    transport and options beside them serve. Before, such an element was left out:
    what used it said that it "does not exist", and not why."""
    curl = need("curl")
    bad_transport = (
        "$.http.serversTransports.bad.forwardingTimeouts.dialTimeout: invalid duration 'soon'"
    )
    bad_options = "$.tls.options.broken.sniStrict: expected bool, got str"
    dynamic = {
        "http": {
            "routers": {
                "good": {"rule": "Host(`good.test`)", "service": "app"},
                "via-bad": {"rule": "Host(`bad.test`)", "service": "via-bad"},
                "via-fast": {"rule": "Host(`fast.test`)", "service": "via-fast"},
                "modern": {"rule": "Host(`modern.test`)", "service": "app", "tls": {"options": "modern"}},
                "strict": {"rule": "Host(`strict.test`)", "service": "app", "tls": {"options": "broken"}},
            },
            "services": {
                "app": lb(whoami.url),
                "via-bad": lb(whoami.url, serversTransport="bad"),
                "via-fast": lb(whoami.url, serversTransport="fast"),
            },
            "serversTransports": {
                "bad": {"forwardingTimeouts": {"dialTimeout": "soon"}},
                "fast": {"forwardingTimeouts": {"dialTimeout": "2s"}},
            },
        },
        "tls": {
            "options": {
                "modern": {"minVersion": "VersionTLS12"},
                "broken": {"minVersion": "VersionTLS13", "sniStrict": "yes"},
            }
        },
    }  # fmt: skip
    e = Edge(tmp_path, dynamic, static_extra={"api": {"insecure": True}})

    def https(host: str) -> str:
        out = subprocess.run(
            [curl, "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
             "--resolve", f"{host}:{e.port}:127.0.0.1", f"https://{host}:{e.port}/"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        return out.stdout

    try:
        assert get(e.port, "/", host="good.test")[0] == 200
        assert get(e.port, "/", host="fast.test")[0] == 200
        assert get(e.port, "/", host="bad.test")[0] == 404
        assert https("modern.test") == "200"
        assert https("strict.test") == "404"
        e.wait_for(re.escape(bad_transport) + r".* \(disabled\)", start=0)
        e.wait_for(re.escape(bad_options) + r" \(disabled\)", start=0)

        service = api(e, "/api/http/services/via-bad@file")
        assert service["status"] == "disabled"
        assert service["error"][0].startswith(
            f"serversTransport 'bad@file' is disabled: {bad_transport}"
        )
        router = api(e, "/api/http/routers/via-bad@file")
        assert router["status"] == "disabled"
        assert router["error"][0].startswith(
            "service 'via-bad@file' is disabled: serversTransport 'bad@file' is disabled"
        )
        router = api(e, "/api/http/routers/strict@file")
        assert router["status"] == "disabled"
        assert router["error"] == [f"TLS options 'broken@file' are disabled: {bad_options}"]
        for name in ("good", "via-fast", "modern"):
            assert api(e, f"/api/http/routers/{name}@file")["status"] == "enabled", name
    finally:
        e.stop()


def api(e: Edge, path: str) -> dict:
    status, _, body = get(e.ports["traefik"], path)
    assert status == 200, (path, status, body)
    return json.loads(body)
