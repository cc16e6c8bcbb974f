"""The kubernetesIngressNGINX provider end to end: emulator -> provider -> edge -> whoami.

Ingresses written for ingress-nginx (class ``nginx``, ``nginx.ingress.kubernetes.io/*``
annotations) are served as ingress-nginx would serve them, by a real edge on real
sockets with real clients (``http.client``, curl); every wait and every load is bounded.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import http.client
import json
import logging
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from edge.config.loader import decode_static
from edge.config.static import KubernetesIngressNGINXConfig
from edge.providers.kubernetes.ingress_nginx_provider import (
    NOT_HELM,
    IngressNGINXProvider,
    check_cluster,
)
from edge.providers.kubernetes.provider import SharedCores
from tests.fixtures.tls.pki import PKI, Pair
from tests.harness import WHOAMI_RE, Proc, Whoami
from tests.integration.kubernetes.test_provider import (
    LOG,
    THROTTLE,
    TOKEN,
    InProcessEdge,
    backend_service,
    emu,
    fast,
    messages,
    slice_for,
    static_config,
    stop_all,
    until,
)
from tests.kube import objects as o
from tests.kube.emulator import Emulator

__all__ = ["emu"]  # the fixture, shared with the provider's tests

NGINX = "nginx.ingress.kubernetes.io/"


def nginx_ingress(
    name: str,
    host: str,
    paths: list[tuple[str, str, str]],
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict:
    """paths: (path, pathType, service) each, Service port 80; class ``nginx``."""
    body: dict[str, Any] = {
        "ingressClassName": "nginx",
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": path,
                            "pathType": path_type,
                            "backend": {"service": {"name": service, "port": {"number": 80}}},
                        }
                        for path, path_type, service in paths
                    ]
                },
            }
        ],
    }
    body.update(spec)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {f"{NGINX}{k}": v for k, v in (annotations or {}).items()},
        },
        "spec": body,
    }


def start_nginx_edge(emu: Emulator, **config: Any) -> InProcessEdge:
    """edge with only the ingress-nginx source, on the emulator; ``config``: more of the
    provider's keys (as KubernetesIngressNGINXConfig's fields). Its API is served."""
    static = static_config(emu)
    static["providers"] = {}
    static["api"] = {"insecure": True}
    edge = InProcessEdge(static, tweak=fast())
    nginx = KubernetesIngressNGINXConfig(
        endpoint=emu.url,
        token=TOKEN,
        throttle_duration=msgspec.convert(THROTTLE, float),
        **config,
    )
    providers = msgspec.structs.replace(
        decode_static(static).providers, kubernetes_ingress_nginx=nginx
    )
    edge.static = msgspec.structs.replace(edge.static, providers=providers)
    edge.start()
    assert until(lambda: edge.ready() == 200, 10.0), "edge never became ready"
    assert edge.app is not None
    assert any(isinstance(p, IngressNGINXProvider) for p in edge.app.providers)
    return edge


def get(
    port: int, path: str, host: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def curl(port: int, url_path: str, host: str, *args: str) -> str:
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "5", "-H", f"Host: {host}", *args,
         f"http://127.0.0.1:{port}{url_path}"],
        capture_output=True, text=True, timeout=10, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture
def whoami3() -> Any:
    w = Whoami("w3")
    yield w
    w.stop()


def test_ingress_nginx_style_ingresses_are_served_as_ingress_nginx_would(
    emu, whoami, whoami2, whoami3, caplog
):
    caplog.set_level(logging.INFO, LOG)
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    backend_service(emu, "pair", whoami, whoami2)
    backend_service(emu, "next", whoami3)
    emu.create(
        nginx_ingress(
            "rewrite",
            "rewrite.test",
            [("/something(/|$)(.*)", "ImplementationSpecific", "app")],
            {"rewrite-target": "/$2"},
        )
    )
    emu.create(
        nginx_ingress(
            "secure", "secure.test", [("/", "Prefix", "app")], tls=[{"hosts": ["secure.test"]}]
        )
    )
    emu.create(
        nginx_ingress(
            "closed",
            "closed.test",
            [("/", "Prefix", "app")],
            {"allowlist-source-range": "10.0.0.0/8"},
        )
    )
    emu.create(
        nginx_ingress(
            "open", "open.test", [("/", "Prefix", "app")], {"allowlist-source-range": "127.0.0.1"}
        )
    )
    emu.create(
        nginx_ingress(
            "sticky",
            "sticky.test",
            [("/", "Prefix", "pair")],
            {"affinity": "cookie", "session-cookie-name": "route"},
        )
    )
    emu.create(nginx_ingress("main", "canary.test", [("/", "Prefix", "app")]))
    emu.create(
        nginx_ingress(
            "main-canary",
            "canary.test",
            [("/", "Prefix", "next")],
            {"canary": "true", "canary-by-header": "X-Canary", "canary-weight": "20"},
        )
    )
    emu.create(
        nginx_ingress(
            "vhost",
            "vhost.test",
            [("/", "Prefix", "app")],
            {"upstream-vhost": "internal.svc", "x-forwarded-prefix": "/shop"},
        )
    )
    emu.create(
        nginx_ingress(
            "snippet",
            "snippet.test",
            [("/", "Prefix", "app")],
            {"configuration-snippet": "return 200;"},
        )
    )
    edge = start_nginx_edge(emu)
    try:
        port = edge.port()
        assert until(lambda: get(port, "/", "canary.test")[0] == 200)

        # rewrite-target with the path's capture groups
        status, _, body = get(port, "/something/new/path?q=1", "rewrite.test")
        assert status == 200 and json.loads(body)["path"] == "/new/path"
        assert json.loads(curl(port, "/SOMETHING", "rewrite.test"))["path"] == "/"
        assert get(port, "/other", "rewrite.test")[0] == 404

        # ssl-redirect: a host with TLS answers plain HTTP with 308 to https
        out = curl(port, "/a?b=1", "secure.test", "-o", "/dev/null",
                   "-w", "%{http_code} %{redirect_url}")  # fmt: skip
        assert out == "308 https://secure.test/a?b=1"

        # allowlist: 127.0.0.1 is not in 10.0.0.0/8
        assert get(port, "/", "closed.test")[0] == 403
        assert get(port, "/", "open.test")[0] == 200

        # cookie affinity: the cookie edge sets keeps a client on one backend
        status, headers, body = get(port, "/", "sticky.test")
        assert status == 200 and headers["set-cookie"].startswith("route=")
        cookie = headers["set-cookie"].split(";")[0]
        first = json.loads(body)["name"]
        names = {json.loads(get(port, "/", "sticky.test", {"Cookie": cookie})[2])["name"]
                 for _ in range(20)}  # fmt: skip
        assert names == {first}

        # canary by header: always to the canary, never to the main service
        for _ in range(10):
            assert (
                json.loads(get(port, "/", "canary.test", {"X-Canary": "always"})[2])["name"] == "w3"
            )
            assert (
                json.loads(get(port, "/", "canary.test", {"X-Canary": "never"})[2])["name"] == "w1"
            )
        # canary by weight: 20 of 100, measured over 500 requests
        counts = collections.Counter(
            json.loads(get(port, "/", "canary.test")[2])["name"] for _ in range(500)
        )
        print(f"canary by weight 20: {counts}")
        assert set(counts) == {"w1", "w3"}
        share = counts["w3"] / 500
        assert 0.14 <= share <= 0.26, counts

        # upstream-vhost: the Host the backend sees; x-forwarded-prefix: that header
        status, _, body = get(port, "/", "vhost.test")
        seen = json.loads(body)
        assert status == 200 and seen["host"] == "internal.svc"
        assert seen["headers"]["X-Forwarded-Prefix"] == ["/shop"]

        # raw nginx text is refused, named in the log
        assert get(port, "/", "snippet.test")[0] == 404
        (line,) = messages(caplog, "ingress default/snippet")
        assert "CVE-2021-25742" in line
    finally:
        stop_all([edge])


def test_check_lists_the_ingress_nginx_routes_left_out(emu, whoami, tmp_path):
    """What ``edge check`` reads: the cluster listed once and converted, every Ingress
    left out named with its reason, and every tcp-services entry whose port has no
    entry point; the command itself prints them and exits 1."""
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    emu.create(nginx_ingress("good", "good.test", [("/", "Prefix", "app")]))
    emu.create(
        nginx_ingress(
            "client-cert",
            "client-cert.test",
            [("/", "Prefix", "app")],
            {"auth-tls-secret": "default/client-ca"},
        )
    )
    emu.create(_config_map("tcp-services", {"7000": "default/app:80"}))
    refused = (
        "ingress default/client-cert: metadata.annotations: annotation "
        "nginx.ingress.kubernetes.io/auth-tls-secret is not supported by edge yet: edge "
        "asks no client for a certificate on an Ingress' hosts"
    )
    config = KubernetesIngressNGINXConfig(
        endpoint=emu.url, token=TOKEN, tcp_services_config_map="ingress-nginx/tcp-services"
    )
    conversion = check_cluster(config, timeout=10.0)
    assert [str(p) for p in conversion.problems] == [refused]
    http, tcp = conversion.configuration.http, conversion.configuration.tcp
    assert http is not None and "default-good-good-test" in http.routers
    assert tcp is not None and tcp.routers["tcp-services-7000"].problems == [
        "configmap ingress-nginx/tcp-services: data.7000: no TCP entry point listens on port 7000"
    ]

    static = static_config(emu)
    static["providers"] = {
        "kubernetesIngressNGINX": {
            "endpoint": emu.url,
            "token": TOKEN,
            "tcpServicesConfigMap": "ingress-nginx/tcp-services",
        }
    }
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(static))
    out = subprocess.run(
        [sys.executable, "-m", "edge", "check", "-c", str(path)],
        cwd=Path(__file__).parents[3], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"kubernetesingressnginx: {refused}: left out" in out.stdout, out.stdout
    assert re.search(
        r"^router default-good-good-test@kubernetesingressnginx: enabled", out.stdout, re.M
    ), out.stdout
    assert re.search(
        r"^tcp router tcp-services-7000@kubernetesingressnginx: disabled: configmap "
        r"ingress-nginx/tcp-services: data.7000: no TCP entry point listens on port 7000",
        out.stdout,
        re.M,
    ), out.stdout


def htpasswd_secret(name: str, namespace: str, users: dict[str, str]) -> dict:
    """An Opaque Secret whose ``auth`` key holds htpasswd lines ({SHA} hashes), as
    ``htpasswd -s`` writes them for ingress-nginx's ``auth-secret``."""
    lines = "".join(
        f"{user}:{{SHA}}{base64.b64encode(hashlib.sha1(pw.encode()).digest()).decode()}\n"
        for user, pw in users.items()
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {"auth": base64.b64encode(lines.encode()).decode()},
    }


def test_basic_auth_reads_the_auth_secret_and_follows_its_edits(emu, whoami):
    """auth-type basic with a Secret of another namespace: 401 without credentials or
    with wrong ones, 200 with them; the Secret edited, the new password is let in (and
    the old one no longer) within a couple of seconds."""
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    emu.create(htpasswd_secret("staff", "auth", {"alice": "wonderland"}))
    emu.create(
        nginx_ingress(
            "staff",
            "staff.test",
            [("/", "Prefix", "app")],
            {"auth-type": "basic", "auth-secret": "auth/staff", "auth-realm": "Staff only"},
        )
    )
    edge = start_nginx_edge(emu)
    try:
        port = edge.port()

        def code(*args: str) -> str:
            return curl(port, "/", "staff.test", "-o", "/dev/null", "-w", "%{http_code}", *args)

        assert until(lambda: code("-u", "alice:wonderland") == "200", 10.0)
        out = curl(port, "/", "staff.test", "-o", "/dev/null", "-D", "-")
        assert out.startswith("HTTP/1.1 401"), out
        assert 'www-authenticate: basic realm="staff only"' in out.lower(), out
        assert code("-u", "alice:wrong") == "401"

        edited = time.monotonic()
        emu.update(htpasswd_secret("staff", "auth", {"alice": "looking-glass"}))
        assert until(lambda: code("-u", "alice:looking-glass") == "200", 5.0)
        print(f"the edited Secret's password let in after {time.monotonic() - edited:.2f} s")
        assert code("-u", "alice:wonderland") == "401"
        assert code() == "401"
    finally:
        stop_all([edge])


def _headers_config_map(data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "security", "namespace": "default"},
        "data": data,
    }


def test_custom_headers_follow_their_config_map(emu, whoami, caplog):
    """custom-headers: the ConfigMap's headers on every response; the ConfigMap edited,
    the new headers are served within the throttle; a ConfigMap no Ingress names costs
    no conversion; a header not in globalAllowedResponseHeaders leaves the Ingress out,
    named."""
    caplog.set_level(logging.INFO, LOG)
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    emu.create(_headers_config_map({"X-Frame-Options": "DENY"}))
    emu.create(
        nginx_ingress(
            "framed",
            "framed.test",
            [("/", "Prefix", "app")],
            {"custom-headers": "default/security"},
        )
    )
    edge = start_nginx_edge(
        emu, global_allowed_response_headers=["X-Frame-Options", "X-Content-Type-Options"]
    )
    try:
        port = edge.port()
        assert until(lambda: get(port, "/", "framed.test")[1].get("x-frame-options") == "DENY")
        assert edge.app is not None
        (provider,) = [p for p in edge.app.providers if isinstance(p, IngressNGINXProvider)]

        conversions = provider.conversions
        emu.create(_config_map("unrelated", {"a": "b"}))
        time.sleep(10 * THROTTLE)
        assert provider.conversions == conversions  # nobody names it: nothing to convert

        edited = time.monotonic()
        emu.update(
            _headers_config_map(
                {"X-Frame-Options": "SAMEORIGIN", "X-Content-Type-Options": "nosniff"}
            )
        )
        assert until(
            lambda: get(port, "/", "framed.test")[1].get("x-content-type-options") == "nosniff"
        )
        print(f"the edited ConfigMap's headers served after {time.monotonic() - edited:.2f} s")
        status, headers, _ = get(port, "/", "framed.test")
        assert status == 200 and headers["x-frame-options"] == "SAMEORIGIN"
        assert provider.conversions > conversions

        emu.update(_headers_config_map({"X-Powered-By": "edge"}))
        assert until(lambda: get(port, "/", "framed.test")[0] == 404)
        assert until(
            lambda: messages(
                caplog, "header X-Powered-By is not in the provider's globalAllowedResponseHeaders"
            )
        )
    finally:
        stop_all([edge])


def _curl_json(port: int, path: str, host: str, *args: str) -> tuple[int, dict]:
    """(status, the JSON whoami answered) through curl."""
    out = curl(port, path, host, "-w", "\n%{http_code}", *args)
    body, _, code = out.rpartition("\n")
    return int(code), json.loads(body)


def test_default_backend_answers_for_an_ingress_without_endpoints_and_its_errors(
    emu, whoami, whoami2
):
    """default-backend with custom-http-errors, as ingress-nginx: a status the Ingress
    lists is answered by the default backend, asked for / with ingress-nginx's headers,
    and its own status goes to the client; another status goes as it came. With no
    endpoint left behind the Ingress, the default backend answers its requests; when
    one comes back, the Ingress' own backend does again."""
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    backend_service(emu, "pages", whoami2)
    emu.create(
        nginx_ingress(
            "shop",
            "shop.test",
            [("/", "Prefix", "app")],
            {"custom-http-errors": "404,503", "default-backend": "pages"},
        )
    )
    edge = start_nginx_edge(emu)
    try:
        port = edge.port()
        assert until(lambda: get(port, "/", "shop.test")[0] == 200)
        status, seen = _curl_json(
            port,
            "/cart?status=503",
            "shop.test",
            "-H",
            "Accept: text/html",
            "-H",
            "X-Request-ID: r-42",
        )
        assert status == 200 and seen["name"] == "w2" and seen["path"] == "/", seen
        got = {k.lower(): v for k, v in seen["headers"].items()}
        assert {k: got.get(k) for k in (
            "x-code", "x-format", "x-original-uri", "x-namespace", "x-ingress-name",
            "x-service-name", "x-service-port", "x-request-id",
        )} == {
            "x-code": ["503"], "x-format": ["text/html"], "x-original-uri": ["/cart?status=503"],
            "x-namespace": ["default"], "x-ingress-name": ["shop"], "x-service-name": ["app"],
            "x-service-port": ["80"], "x-request-id": ["r-42"],
        }, got  # fmt: skip
        status, seen = _curl_json(port, "/?status=404", "shop.test")
        assert status == 200 and seen["name"] == "w2"
        request_id = {k.lower(): v for k, v in seen["headers"].items()}["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", request_id[0]), seen  # nginx's $req_id
        assert get(port, "/?status=500", "shop.test")[0] == 500  # not listed: as it came

        # No endpoint behind the Ingress: the default backend answers, the path as sent.
        emu.delete("EndpointSlice", "default", f"app-{whoami.name}")
        assert until(lambda: _curl_json(port, "/a", "shop.test")[1]["name"] == "w2")
        assert _curl_json(port, "/a", "shop.test")[1]["path"] == "/a"
        emu.create(slice_for("app", whoami))
        assert until(lambda: _curl_json(port, "/a", "shop.test")[1]["name"] == "w1")
    finally:
        stop_all([edge])


def test_the_default_backend_service_answers_what_no_ingress_routes(emu, whoami, whoami2):
    """defaultBackendService: an unknown host, and a known host's path none of its
    routes take, go to it (ingress-nginx's default backend; edge answered 404)."""
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    backend_service(emu, "app", whoami)
    emu.create(o.service("default-http-backend", namespace="ingress-nginx"))
    emu.create(
        {
            **slice_for("default-http-backend", whoami2),
            "metadata": {
                "name": "default-http-backend-1",
                "namespace": "ingress-nginx",
                "labels": {"kubernetes.io/service-name": "default-http-backend"},
            },
        }
    )
    emu.create(nginx_ingress("api", "api.test", [("/v1", "Prefix", "app")]))
    edge = start_nginx_edge(emu, default_backend_service="ingress-nginx/default-http-backend")
    try:
        port = edge.port()
        assert until(lambda: get(port, "/v1/x", "api.test")[0] == 200)
        assert _curl_json(port, "/v1/x", "api.test")[1]["name"] == "w1"
        for host, path in (("api.test", "/v2"), ("unknown.test", "/"), ("unknown.test", "/v1")):
            status, seen = _curl_json(port, path, host)
            assert (status, seen["name"], seen["path"]) == (200, "w2", path), (host, path)
    finally:
        stop_all([edge])


def _free_port(kind: int) -> int:
    """A port nothing listens on now (the ConfigMaps' keys name fixed ports)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _echo(protocol: str) -> Proc:
    p = Proc(["whoami", "--name", f"{protocol}-echo", f"--{protocol}", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))  # type: ignore[attr-defined]
    return p


def _l4_service(name: str, port: int, protocol: str, backend: int) -> list[dict]:
    svc = o.service(name, port=port)
    svc["spec"]["ports"] = [{"name": "p", "port": port, "targetPort": port, "protocol": protocol}]
    eps = o.endpoint_slice(f"{name}-1", service_name=name, addresses=["127.0.0.1"], port=backend)
    eps["ports"] = [{"name": "p", "port": backend, "protocol": protocol}]
    return [svc, eps]


def _config_map(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ingress-nginx"},
        "data": data,
    }


def _tcp_round_trip(port: int, data: bytes) -> bytes:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(data)
            return s.recv(1024)
    except OSError:
        return b""


def _udp_round_trip(port: int, data: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        s.connect(("127.0.0.1", port))
        s.send(data)
        try:
            return s.recv(65536)
        except OSError:
            return b""


def test_tcp_and_udp_services_config_maps_are_served(emu, caplog):
    """The ConfigMaps the provider is given: a tcp-services entry carries raw TCP to an
    echo, a udp-services entry datagrams to a UDP echo; an entry edited into the
    ConfigMap is served, one for a port without an entry point is named in the log and
    in the API (a router of its name, disabled with the reason). A ConfigMap of the same
    name in another namespace is not read."""
    caplog.set_level(logging.INFO, LOG)
    tcp_echo, udp_echo = _echo("tcp"), _echo("udp")
    tcp_port, udp_port = _free_port(socket.SOCK_STREAM), _free_port(socket.SOCK_DGRAM)
    for obj in (
        *_l4_service("tcp-echo", 9000, "TCP", tcp_echo.port),  # type: ignore[attr-defined]
        *_l4_service("udp-echo", 5300, "UDP", udp_echo.port),  # type: ignore[attr-defined]
    ):
        emu.create(obj)
    emu.create(_config_map("udp-services", {str(udp_port): "default/udp-echo:5300"}))
    other = _config_map("tcp-services", {str(tcp_port): "default/tcp-echo:9000"})
    other["metadata"]["namespace"] = "default"
    emu.create(other)  # the same name, in a namespace not named: never read

    static = static_config(emu)
    static["entryPoints"]["raw"] = {"address": f"127.0.0.1:{tcp_port}"}
    static["entryPoints"]["dns"] = {"address": f"127.0.0.1:{udp_port}/udp"}
    static["api"] = {"insecure": True}
    static["providers"] = {  # as a static file says it: the keys reach the provider
        "kubernetesIngressNGINX": {
            "endpoint": emu.url,
            "token": TOKEN,
            "throttleDuration": THROTTLE,
            "tcpServicesConfigMap": "ingress-nginx/tcp-services",
            "udpServicesConfigMap": "ingress-nginx/udp-services",
        }
    }
    edge = InProcessEdge(static, tweak=fast())
    edge.start()
    try:
        assert until(lambda: edge.ready() == 200, 10.0), "edge never became ready"
        assert until(lambda: _udp_round_trip(udp_port, b"ping") == b"ping", 10.0)
        assert _tcp_round_trip(tcp_port, b"hello\n") != b"hello\n"  # no tcp-services yet

        emu.create(
            _config_map(
                "tcp-services",
                {str(tcp_port): "default/tcp-echo:9000", "1": "default/tcp-echo:9000"},
            )
        )
        assert until(lambda: _tcp_round_trip(tcp_port, b"hello\n") == b"hello\n", 10.0)
        assert _udp_round_trip(udp_port, b"pong") == b"pong"
        assert until(lambda: messages(caplog, "data.1: no TCP entry point listens on port 1"))
        api = http.client.HTTPConnection("127.0.0.1", edge.port("traefik"), timeout=5)
        try:
            api.request("GET", "/api/tcp/routers/tcp-services-1@kubernetesingressnginx")
            answer = api.getresponse()
            router = json.loads(answer.read())
        finally:
            api.close()
        assert answer.status == 200 and router["status"] == "disabled", router
        assert router["error"][0] == (
            "configmap ingress-nginx/tcp-services: data.1: no TCP entry point listens on port 1"
        ), router
    finally:
        stop_all([edge])
        tcp_echo.stop()
        udp_echo.stop()


def test_config_maps_of_the_watched_namespaces_are_watched_but_helm_s(emu):
    """custom-headers may name any ConfigMap of an Ingress' namespace: every ConfigMap
    of the watched namespace is listed, and of the services ConfigMaps' namespaces,
    none of another namespace, and none of Helm's release records."""
    for ns in ("apps", "edge-a", "edge-b", "elsewhere"):
        for name in ("l4-services", "other"):
            config_map = _config_map(name, {"1": "x/y:1"})
            config_map["metadata"]["namespace"] = ns
            emu.create(config_map)
    helm = _config_map("sh.helm.release.v1.shop.v1", {"release": "..."})
    helm["metadata"].update(namespace="apps", labels={"owner": "helm"})
    emu.create(helm)
    nginx = KubernetesIngressNGINXConfig(
        endpoint=emu.url,
        token=TOKEN,
        watch_namespace="apps",
        tcp_services_config_map="edge-a/l4-services",
        udp_services_config_map="edge-b/l4-services",
    )
    provider = IngressNGINXProvider(
        nginx,
        core=SharedCores().core(nginx),  # type: ignore[arg-type]  # same credential keys
        tcp_services_config_map=nginx.tcp_services_config_map,
        udp_services_config_map=nginx.udp_services_config_map,
    )
    (spec,) = [w for w in provider.watches() if w.resource.kind == "ConfigMap"]
    assert (spec.label_selector, spec.field_selector, spec.namespaces) == (
        NOT_HELM,
        "",
        ("apps", "edge-a", "edge-b"),
    )
    provider.view.open()
    try:
        assert until(lambda: provider.view.synced, 10.0)
        assert sorted(provider.view.snapshot()["ConfigMap"]) == [
            (ns, name) for ns in ("apps", "edge-a", "edge-b") for name in ("l4-services", "other")
        ]
    finally:
        provider.view.close()
    assert provider.core.alive() == []


class TLSBackend:
    """A TLS server on 127.0.0.1 with its own certificate, answering each connection's
    first line with ``backend <line>``; at most ``limit`` connections, each bounded."""

    def __init__(self, pair: Pair, tmp_path: Path, limit: int = 5) -> None:
        crt, key = pair.write(tmp_path, "backend")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(crt, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(20)
        self.port = self.sock.getsockname()[1]
        self.limit = limit
        self.thread = threading.Thread(target=self._serve, name="tls-backend", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for _ in range(self.limit):
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    with self.context.wrap_socket(conn, server_side=True) as tls:
                        line = tls.recv(1024)
                        tls.sendall(b"backend " + line)
                except OSError:
                    continue

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


def test_ssl_passthrough_hands_the_backends_certificate_to_the_client(emu, tmp_path):
    pki = PKI()
    pair = pki.issue("pass.test")
    backend = TLSBackend(pair, tmp_path)
    emu.create(o.ingress_class("nginx", controller="k8s.io/ingress-nginx"))
    emu.create(o.service("secure", port=443))
    emu.create(
        o.endpoint_slice(
            "secure-1", service_name="secure", addresses=["127.0.0.1"], port=backend.port
        )
    )
    pass_ingress = nginx_ingress(
        "pass", "pass.test", [("/", "Prefix", "secure")], {"ssl-passthrough": "true"}
    )
    pass_ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] = {
        "number": 443
    }
    emu.create(pass_ingress)
    edge = start_nginx_edge(emu)
    try:
        port = edge.port()
        client = ssl.create_default_context(cadata=pki.cert_pem)

        def handshake() -> tuple[str, bytes]:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw_sock,
                client.wrap_socket(raw_sock, server_hostname="pass.test") as tls,
            ):
                der = tls.getpeercert(binary_form=True)
                assert der is not None
                tls.sendall(b"ping\n")
                return hashlib.sha256(der).hexdigest(), tls.recv(1024)

        assert until(lambda: _try(handshake) is not None)
        fingerprint, answer = handshake()
        assert fingerprint == pair.fingerprint  # the backend's own, untouched
        assert answer == b"backend ping\n"
    finally:
        stop_all([edge])
        backend.close()


def _try(call: Any) -> Any:
    try:
        return call()
    except (OSError, ssl.SSLError):
        return None
