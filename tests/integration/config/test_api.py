"""Traefik's read-only API (``api.insecure``, edge/api.py) on a running edge.

Each element of the configuration edge serves, with its status and the reasons it
is disabled: the errors validation found, and those the data plane added (a
certificate that cannot be read), as Traefik's API and tools read them.
"""

from __future__ import annotations

import http.client
import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, get, lb, need
from tests.integration.peers import certificates


def api(port: int, path: str) -> tuple[int, dict[str, str], object]:
    """(status, headers, decoded JSON body) of GET ``path`` on the API's entry point."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, dict(resp.getheaders()), json.loads(body) if body else None
    finally:
        conn.close()


def dynamic(
    whoami_url: str, cert: tuple[str, str], missing: str, extra: dict | None = None
) -> dict:
    routers = {
        "site": {"rule": "Host(`site.test`)", "service": "app", "middlewares": ["strip"]},
        "orphan": {"rule": "Host(`orphan.test`)", "service": "nope"},
        "broken-rule": {"rule": "Host(`x.test`", "service": "app"},
        "secure": {"rule": "Host(`a.test`)", "service": "app", "tls": {}},
        "unreadable": {"rule": "Host(`bad.test`)", "service": "app", "tls": {}},
    }
    routers.update(extra or {})
    return {
        "http": {
            "routers": routers,
            "services": {"app": lb(whoami_url)},
            "middlewares": {"strip": {"stripPrefix": {"prefixes": ["/x"]}}},
        },
        "tls": {
            "certificates": [
                {"certFile": cert[0], "keyFile": cert[1]},
                {"certFile": missing, "keyFile": cert[1]},
            ]
        },
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory, whoami):
    folder = tmp_path_factory.mktemp("api")
    cert = PKI("api CA").issue("a.test").write(folder, "a")
    missing = str(folder / "missing.crt")
    e = Edge(folder, dynamic(whoami.url, cert, missing), static_extra={"api": {"insecure": True}})
    e.cert, e.missing, e.whoami = cert, missing, whoami
    yield e
    e.stop()


def test_routers_with_status_and_the_reasons_they_are_disabled(served):
    status, headers, routers = api(served.ports["traefik"], "/api/http/routers")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert headers["X-Next-Page"] == "1"  # one page
    by_name = {r["name"]: r for r in routers}
    assert [r["name"] for r in routers] == sorted(by_name)
    site = by_name["site@file"]
    assert site["status"] == "enabled" and "error" not in site
    assert site["rule"] == "Host(`site.test`)" and site["service"] == "app@file"
    assert site["middlewares"] == ["strip@file"] and site["using"] == ["web"]
    assert site["provider"] == "file"
    assert by_name["orphan@file"]["status"] == "disabled"
    assert by_name["orphan@file"]["error"] == ["service 'nope@file' does not exist"]
    assert by_name["broken-rule@file"]["status"] == "disabled"
    assert "rule" in by_name["broken-rule@file"]["error"][0]
    # the data plane's verdict on TLS (edge.config.runtime.check_tls), naming the file
    unreadable = by_name["unreadable@file"]
    assert unreadable["status"] == "disabled", unreadable
    assert any(served.missing in e and "no such file" in e for e in unreadable["error"]), unreadable
    assert by_name["secure@file"]["status"] == "enabled"


def test_one_element_by_name_and_404_for_an_unknown_one(served):
    port = served.ports["traefik"]
    status, _, router = api(port, "/api/http/routers/orphan@file")
    assert status == 200 and router["name"] == "orphan@file" and router["status"] == "disabled"
    status, _, service = api(port, "/api/http/services/app@file")
    assert status == 200 and service["type"] == "loadbalancer"
    assert service["serverStatus"] == {served.whoami.url: "UP"}
    assert sorted(service["usedBy"]) == [
        "broken-rule@file",
        "secure@file",
        "site@file",
        "unreadable@file",
    ]
    status, _, middleware = api(port, "/api/http/middlewares/strip@file")
    assert (
        status == 200
        and middleware["type"] == "stripprefix"
        and middleware["usedBy"] == ["site@file"]
    )
    assert middleware["stripPrefix"] == {"prefixes": ["/x"]}
    status, _, answer = api(port, "/api/http/routers/" + quote("no such@file"))
    assert status == 404 and answer == {"message": "router not found: no such@file"}
    assert api(port, "/api/tcp/routers")[2] == []
    assert api(port, "/api/udp/services")[2] == []
    assert api(port, "/api/nothing")[0] == 404


def test_pages_and_filters_as_traefik(served):
    port = served.ports["traefik"]
    status, headers, first = api(port, "/api/http/routers?per_page=2")
    assert status == 200 and len(first) == 2 and headers["X-Next-Page"] == "2"
    _, headers, third = api(port, "/api/http/routers?per_page=2&page=3")
    assert len(third) == 1 and headers["X-Next-Page"] == "1"
    status, _, answer = api(port, "/api/http/routers?per_page=2&page=4")
    assert status == 400 and answer == {"message": "invalid request: page: 4, per_page: 2"}
    assert api(port, "/api/http/routers?page=0")[0] == 400
    names = lambda q: [r["name"] for r in api(port, "/api/http/routers?" + q)[2]]  # noqa: E731
    assert names("status=disabled") == ["broken-rule@file", "orphan@file", "unreadable@file"]
    assert names("search=SITE.test") == ["site@file"]  # the rule, any case
    assert names("serviceName=nope@file") == ["orphan@file"]
    assert names("middlewareName=strip@file") == ["site@file"]


def test_overview_rawdata_entrypoints_and_version(served):
    port = served.ports["traefik"]
    _, _, overview = api(port, "/api/overview")
    assert overview["http"]["routers"] == {"total": 5, "warnings": 0, "errors": 3}
    # app@file, and api@internal (as Traefik counts it: `api` is set)
    assert overview["http"]["services"] == {"total": 2, "warnings": 0, "errors": 0}
    assert overview["tcp"]["routers"]["total"] == 0 and overview["providers"] == ["File"]
    _, _, raw = api(port, "/api/rawdata")
    assert sorted(raw) == ["middlewares", "routers", "services"]
    assert raw["routers"]["orphan@file"]["status"] == "disabled"
    _, _, entrypoints = api(port, "/api/entrypoints")
    assert [ep["name"] for ep in entrypoints] == ["traefik", "web"]
    status, _, web = api(port, "/api/entrypoints/web")
    assert status == 200 and web["address"] == "127.0.0.1:0" and web["name"] == "web"
    # the timeouts in force, defaults included (was respondingTimeouts: {})
    assert web["transport"]["respondingTimeouts"] == {"readTimeout": "1m", "idleTimeout": "3m"}
    assert web["transport"]["lifeCycle"] == {"graceTimeOut": "10s"}
    status, _, version = api(port, "/api/version")
    assert status == 200 and version["Codename"] == "edge"


def test_the_api_is_on_the_traefik_entrypoint_only(served):
    # On the routers' entry point /api/... is a path like any other: no router, 404.
    assert get(served.port, "/api/overview", host="nobody.test")[0] == 404
    assert get(served.ports["traefik"], "/ping")[0] == 200


def test_a_change_shows_at_once_and_a_fixed_router_is_enabled(tmp_path, whoami):
    cert = PKI("api CA 2").issue("a.test").write(tmp_path, "a")
    missing = str(Path(tmp_path) / "missing.crt")
    e = Edge(tmp_path, dynamic(whoami.url, cert, missing), static_extra={"api": {"insecure": True}})
    try:
        port = e.ports["traefik"]
        assert api(port, "/api/http/routers/orphan@file")[2]["status"] == "disabled"
        fixed = dynamic(
            whoami.url, cert, missing, {"orphan": {"rule": "Host(`orphan.test`)", "service": "app"}}
        )
        applied = e.applied()
        e.write_dynamic(fixed)
        e.wait_applied(applied + 1)
        router = api(port, "/api/http/routers/orphan@file")[2]
        assert router["status"] == "enabled" and "error" not in router
        assert get(e.port, "/", host="orphan.test")[0] == 200
    finally:
        e.stop()


def test_without_insecure_nothing_answers_on_api_paths(tmp_path, whoami):
    e = Edge(tmp_path, {"http": {"routers": {}, "services": {}}}, static_extra={"api": {}})
    try:
        assert get(e.ports["traefik"], "/api/overview")[0] == 404
    finally:
        e.stop()


def test_each_worker_answers_for_the_configuration_it_serves(tmp_path, whoami):
    cert = PKI("api CA 3").issue("a.test").write(tmp_path, "a")
    missing = str(Path(tmp_path) / "missing.crt")
    e = Edge(
        tmp_path,
        dynamic(whoami.url, cert, missing),
        static_extra={"api": {"insecure": True}, "workers": 2},
    )
    try:
        port = e.ports["traefik"]
        for _ in range(6):  # new connections: either worker answers
            status, _, overview = api(port, "/api/overview")
            assert status == 200 and overview["http"]["routers"]["errors"] == 3, overview
    finally:
        e.stop()


# --- api@internal: the API behind a router of the user's ------------------------------


def curl(port: int, path: str, host: str, *args: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of curl through an entry point."""
    url = f"http://127.0.0.1:{port}{path}"
    out = subprocess.run(
        [need("curl"), "-s", "-i", "--max-time", "10", "-H", f"Host: {host}", *args, url],
        capture_output=True,
        timeout=20,
        check=True,
    )
    head, _, body = out.stdout.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.fixture(scope="module")
def behind_router(tmp_path_factory, whoami):
    """``api`` without ``insecure``; the API served only by routers naming api@internal."""
    folder = tmp_path_factory.mktemp("api-internal")
    dyn = {
        "http": {
            "routers": {
                "dashboard": {
                    "rule": "Host(`api.test`)",
                    "service": "api@internal",
                    "middlewares": ["strip"],
                },
                "guarded": {
                    "rule": "Host(`guarded.test`)",
                    "service": "api@internal",
                    "middlewares": ["to-https"],
                },
                "site": {"rule": "Host(`site.test`)", "service": "app"},
                "by-path": {  # not routed by its host alone: the router's match()
                    "rule": "Host(`path.test`) && PathPrefix(`/api`)",
                    "service": "api@internal",
                },
            },
            "services": {"app": lb(whoami.url)},
            "middlewares": {
                "strip": {"stripPrefix": {"prefixes": ["/admin"]}},
                "to-https": {"redirectScheme": {"scheme": "https"}},
            },
        }
    }
    e = Edge(folder, dyn, static_extra={"api": {}})
    yield e
    e.stop()


def test_api_at_internal_is_served_by_the_routers_naming_it(behind_router):
    port = behind_router.port
    status, _, body = curl(port, "/admin/api/http/routers", "api.test")
    assert status == 200, body
    routers = {r["name"]: r for r in json.loads(body)}
    assert routers["dashboard@file"]["service"] == "api@internal"
    assert routers["dashboard@file"]["status"] == "enabled"
    status, _, body = curl(port, "/admin/api/http/services/api@internal", "api.test")
    assert status == 200, body
    api_service = json.loads(body)
    assert api_service["provider"] == "internal" and api_service["status"] == "enabled"
    assert "loadBalancer" not in api_service and "serverStatus" not in api_service
    assert sorted(api_service["usedBy"]) == ["by-path@file", "dashboard@file", "guarded@file"]
    # The API reads the path the router's middlewares leave: /admin is stripped, a path
    # still outside /api after them is Traefik's 404.
    status, _, body = curl(port, "/admin/other/api/version", "api.test")
    assert (status, body) == (404, b"404 page not found\n")
    status, headers, _ = curl(port, "/admin/api/version", "api.test", "-X", "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, _, body = curl(port, "/api/version", "path.test")
    assert status == 200 and json.loads(body)["Codename"] == "edge", body
    # Other hosts route as before; nothing else serves the API.
    assert get(port, "/", host="site.test")[0] == 200
    assert get(port, "/api/version", host="other.test")[0] == 404
    assert get(behind_router.ports["traefik"], "/api/version")[0] == 404  # not insecure


def test_a_middleware_in_front_of_the_api_answers_first(behind_router):
    status, headers, _ = curl(behind_router.port, "/api/version", "guarded.test")
    assert status == 302 and headers["location"] == "https://guarded.test/api/version"


def test_api_at_internal_answers_json(behind_router):
    _, headers, _ = curl(behind_router.port, "/admin/api/version", "api.test")
    assert headers["content-type"] == "application/json"


def test_api_at_internal_shows_the_servers_down(tmp_path, whoami):
    """Behind a router, the API shows serverStatus from the data plane's health checks,
    as ``api.insecure`` does: a server whose check fails is DOWN."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    check = {"path": "/health", "interval": "200ms", "timeout": "1s"}
    dyn = {
        "http": {
            "routers": {
                "api": {"rule": "Host(`api.test`)", "service": "api@internal"},
                "site": {"rule": "Host(`site.test`)", "service": "checked"},  # built, checked
            },
            "services": {"checked": lb(whoami.url, closed, healthCheck=check)},
        }
    }
    e = Edge(tmp_path, dyn, static_extra={"api": {}})
    try:
        seen = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            status, _, body = curl(e.port, "/api/http/services/checked@file", "api.test")
            assert status == 200, body
            seen = json.loads(body)["serverStatus"]
            if seen.get(closed) == "DOWN":
                break
            time.sleep(0.1)
        assert seen == {whoami.url: "UP", closed: "DOWN"}
    finally:
        e.stop()


def test_api_at_internal_with_workers(tmp_path, whoami):
    """With ``workers: 2`` each worker serves the routes naming api@internal."""
    dyn = {"http": {"routers": {"api": {"rule": "Host(`api.test`)", "service": "api@internal"}}}}
    e = Edge(tmp_path, dyn, static_extra={"api": {}, "workers": 2})
    try:
        for _ in range(6):  # a new connection each: both workers are asked
            status, _, body = curl(e.port, "/api/http/routers/api@file", "api.test")
            assert status == 200, body
            assert json.loads(body)["service"] == "api@internal"
    finally:
        e.stop()


def test_api_at_internal_behind_an_https_router(tmp_path, certs):
    """The usual protection: the API's router terminates TLS (its rule names the host)."""
    dyn = {
        "http": {
            "routers": {
                "api": {"rule": "Host(`a.test`)", "service": "api@internal", "tls": {}},
            }
        },
        "tls": {"certificates": certificates(certs, "a.test")},
    }
    e = Edge(tmp_path, dyn, static_extra={"api": {}})
    try:
        url = f"https://a.test:{e.port}/api/http/routers/api@file"
        out = subprocess.run(
            [
                need("curl"),
                "-s",
                "--max-time",
                "10",
                "--resolve",
                f"a.test:{e.port}:127.0.0.1",
                "--cacert",
                certs["ca"],
                url,
            ],
            capture_output=True,
            timeout=20,
            check=True,
        )
        assert json.loads(out.stdout)["tls"] == {}
        assert get(e.port, "/api/version", host="a.test")[0] == 404  # not without TLS
    finally:
        e.stop()
