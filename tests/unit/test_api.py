"""edge.api on a runtime built from a dynamic configuration: TCP and UDP, pages, names."""

from __future__ import annotations

import json
import time

from edge.api import API
from edge.config.loader import decode_dynamic, decode_static
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.entrypoints.metrics import Samples

DYNAMIC = {
    "tcp": {
        "routers": {
            "db": {"rule": "HostSNI(`db.test`)", "service": "db", "tls": {"passthrough": True}},
            "lost": {"rule": "HostSNI(`*`)", "service": "gone"},
        },
        "services": {"db": {"loadBalancer": {"servers": [{"address": "127.0.0.1:5432"}]}}},
        "middlewares": {"allow": {"ipAllowList": {"sourceRange": ["10.0.0.0/8"]}}},
    },
    "udp": {
        "routers": {"dns": {"entryPoints": ["dns"], "service": "dns"}},
        "services": {"dns": {"loadBalancer": {"servers": [{"address": "127.0.0.1:53"}]}}},
    },
}
STATIC = {
    "entryPoints": {"web": {"address": ":80"}, "dns": {"address": ":53/udp"}},
    "api": {"insecure": True},
    "providers": {"file": {"filename": "x.yaml"}},
}


def served() -> API:
    static = decode_static(STATIC)
    runtime = build_runtime(merge({"file": decode_dynamic(DYNAMIC)}), {"web": "tcp", "dns": "udp"})
    return API(static, lambda: runtime, "test")


def get(api: API, target: str) -> tuple[int, object, bytes]:
    path, _, query = target.partition("?")
    status, body, content_type, lines = api.answer(path.encode(), query.encode())
    assert content_type == b"application/json"
    return status, json.loads(body), lines


def test_tcp_and_udp_elements():
    api = served()
    status, routers, lines = get(api, "/api/tcp/routers")
    assert status == 200 and lines == b"X-Next-Page: 1\r\n"
    by_name = {r["name"]: r for r in routers}
    assert by_name["db@file"]["status"] == "enabled" and by_name["db@file"]["tls"] == {
        "passthrough": True
    }
    assert (
        by_name["lost@file"]["status"] == "disabled"
        and "gone@file" in by_name["lost@file"]["error"][0]
    )
    _, service, _ = get(api, "/api/tcp/services/db@file")
    assert service["serverStatus"] == {"127.0.0.1:5432": "UP"} and service["type"] == "loadbalancer"
    _, middleware, _ = get(api, "/api/tcp/middlewares/allow@file")
    assert middleware["type"] == "ipallowlist" and "usedBy" not in middleware
    _, udp, _ = get(api, "/api/udp/routers/dns@file")
    assert udp["status"] == "enabled" and udp["using"] == ["dns"]
    _, overview, _ = get(api, "/api/overview")
    assert overview["tcp"]["routers"] == {"total": 2, "warnings": 0, "errors": 1}
    assert overview["udp"]["services"] == {"total": 1, "warnings": 0, "errors": 0}
    _, raw, _ = get(api, "/api/rawdata")
    assert sorted(raw) == [
        "tcpMiddlewares",
        "tcpRouters",
        "tcpServices",
        "udpRouters",
        "udpServices",
    ]


def test_paths_that_are_not_the_apis_are_left_to_others():
    api = served()
    assert api.answer(b"/ping", b"") is None
    assert api.answer(b"/apix", b"") is None
    assert get(api, "/api/http/routers/a%40b")[0] == 404


def test_before_any_configuration_lists_answer_503_and_entrypoints_answer():
    api = API(decode_static(STATIC), lambda: None, "test")
    assert get(api, "/api/http/routers")[0] == 503
    status, entrypoints, _ = get(api, "/api/entrypoints?per_page=1")
    assert status == 200 and [e["name"] for e in entrypoints] == ["dns"]
    assert get(api, "/api/entrypoints?per_page=x")[0] == 400


def test_entrypoints_show_the_timeouts_in_force_defaults_included():
    """/api/entrypoints showed ``respondingTimeouts: {}`` on an entry point whose timeouts
    were the defaults, and left out every default beside a configured value (the
    configuration's encoding omits defaults): a reader could not tell the 60 s
    readTimeout in force. Traefik's shape: each non-zero timeout, defaults included."""
    static = decode_static(
        {
            "entryPoints": {
                "web": {"address": ":80"},
                "slow": {
                    "address": ":81",
                    "transport": {
                        "respondingTimeouts": {"readTimeout": "5s", "writeTimeout": "90s"},
                        "lifeCycle": {"requestAcceptGraceTimeout": "1500ms"},
                    },
                },
                "dns": {"address": ":53/udp", "udp": {"timeout": "10s"}},
            },
            "api": {"insecure": True},
        }
    )
    api = API(static, lambda: None, "test")
    _, web, _ = get(api, "/api/entrypoints/web")
    assert web["transport"] == {
        "respondingTimeouts": {"readTimeout": "1m", "idleTimeout": "3m"},  # writeTimeout 0: none
        "lifeCycle": {"graceTimeOut": "10s"},
    }
    assert web["udp"] == {"timeout": "3s"} and web["address"] == ":80" and web["name"] == "web"
    _, slow, _ = get(api, "/api/entrypoints/slow")
    assert slow["transport"] == {
        "respondingTimeouts": {"readTimeout": "5s", "writeTimeout": "1m30s", "idleTimeout": "3m"},
        "lifeCycle": {"requestAcceptGraceTimeout": "1.5s", "graceTimeOut": "10s"},
    }
    _, listed, _ = get(api, "/api/entrypoints")
    assert {e["name"]: e["transport"] for e in listed}["slow"] == slow["transport"]
    assert {e["name"]: e["udp"] for e in listed}["dns"] == {"timeout": "10s"}


def test_http_services_show_each_servers_health():
    """serverStatus says DOWN for a server a health check took out, UP for the others,
    in every view (the list, the element, rawdata)."""
    dynamic = {
        "http": {
            "services": {
                "app": {
                    "loadBalancer": {
                        "servers": [{"url": "http://10.0.0.1:80"}, {"url": "http://10.0.0.2:80"}],
                        "healthCheck": {"path": "/h"},
                    }
                },
                "spare": {"loadBalancer": {"servers": [{"url": "http://10.0.0.1:80"}]}},
            }
        }
    }
    runtime = build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})
    down = {"app@file": {"http://10.0.0.2:80"}}
    api = API(decode_static(STATIC), lambda: runtime, "test", down=lambda s: down.get(s, set()))
    expected = {"http://10.0.0.1:80": "UP", "http://10.0.0.2:80": "DOWN"}
    _, service, _ = get(api, "/api/http/services/app@file")
    assert service["serverStatus"] == expected
    assert service["loadBalancer"]["healthCheck"] == {"path": "/h"}
    _, listed, _ = get(api, "/api/http/services")
    by_name = {s["name"]: s for s in listed}
    assert by_name["app@file"]["serverStatus"] == expected
    assert by_name["spare@file"]["serverStatus"] == {"http://10.0.0.1:80": "UP"}
    _, raw, _ = get(api, "/api/rawdata")
    assert raw["services"]["app@file"]["serverStatus"] == expected


def with_api(**api: object) -> API:
    return API(decode_static({**STATIC, "api": {"insecure": True, **api}}), lambda: None, "t")


def test_the_dashboard_its_files_and_the_redirects_to_it():
    api = with_api()
    status, page, content_type, lines = api.answer(b"/dashboard/", b"")
    assert status == 200 and content_type == b"text/html; charset=utf-8"
    assert b'<script src="app.js" defer></script>' in page
    assert b"Content-Security-Policy: default-src 'none'; script-src 'self';" in lines
    assert b"X-Content-Type-Options: nosniff\r\n" in lines
    for name, kind in [("app.js", b"text/javascript"), ("style.css", b"text/css")]:
        status, body, content_type, _ = api.answer(b"/dashboard/" + name.encode(), b"")
        assert status == 200 and content_type.startswith(kind) and body
    assert api.answer(b"/dashboard/favicon.svg", b"")[2] == b"image/svg+xml"
    # Relative, as a prefix a router stripped must stay in the address.
    assert api.answer(b"/", b"") == (302, b"", b"", b"Location: dashboard/\r\n")
    assert api.answer(b"/dashboard", b"") == (302, b"", b"", b"Location: dashboard/\r\n")
    assert api.answer(b"/dashboard/index.html", b"") is None
    assert api.answer(b"/dashboard/app.js/", b"") is None


def test_the_api_and_the_dashboard_under_a_base_path():
    for base in ("/edge", "/edge/"):
        api = with_api(basePath=base)
        assert api.answer(b"/edge/dashboard/", b"")[0] == 200
        assert api.answer(b"/edge/dashboard/app.js", b"")[0] == 200
        assert api.answer(b"/edge/", b"")[3] == b"Location: dashboard/\r\n"
        assert api.answer(b"/edge", b"")[3] == b"Location: edge/dashboard/\r\n"
        assert get(api, "/edge/api/version")[0] == 200
        assert get(api, "/edge/api/entrypoints/web")[1]["name"] == "web"
        for elsewhere in (b"/api/version", b"/dashboard/", b"/", b"/edgeapi/version", b"/x/edge"):
            assert api.answer(elsewhere, b"") is None, elsewhere
    deep = with_api(basePath="/a/b")
    assert deep.answer(b"/a/b", b"")[3] == b"Location: b/dashboard/\r\n"
    assert get(deep, "/a/b/api/version")[0] == 200


def test_version_names_the_dashboard_as_traefik():
    assert "dashboardName" not in get(with_api(), "/api/version")[1]
    _, version, _ = get(with_api(dashboardName="edge <eu-1>"), "/api/version")
    assert version["dashboardName"] == "edge <eu-1>" and version["Codename"] == "edge"


def test_without_the_dashboard_the_api_alone():
    api = with_api(dashboard=False)
    for path in (b"/", b"/dashboard", b"/dashboard/", b"/dashboard/app.js"):
        assert api.answer(path, b"") is None, path
    assert get(api, "/api/version")[0] == 200


def test_requests_sum_the_counters_per_element_and_status_class():
    """/api/requests reads the samples /metrics shows: per entry point, router and
    service, requests in all and by status class; open connections per entry point."""
    samples = Samples()
    ep, router, service = (
        "traefik_entrypoint_requests_total",
        "traefik_router_requests_total",
        "traefik_service_requests_total",
    )
    samples.add(ep, ("200", "GET", "http", "web"), 3)
    samples.add(ep, ("204", "POST", "http", "web"), 1)
    samples.add(ep, ("503", "GET", "http", "web"), 2)
    samples.add(ep, ("404", "GET", "http", "admin"), 1)
    samples.add(router, ("200", "GET", "http", "a@file", "s@file"), 3)
    samples.add(router, ("503", "GET", "http", "b@file", "s@file"), 2)
    samples.add(service, ("200", "GET", "http", "s@file"), 3)
    samples.add(service, ("503", "GET", "http", "s@file"), 2)
    samples.add("traefik_open_connections", ("web", "TCP"), 4)
    samples.add("traefik_open_connections", ("dns", "UDP"), 1)
    static = decode_static({**STATIC, "metrics": {"prometheus": {"addRoutersLabels": True}}})
    before = time.time()
    status, out, _ = get(API(static, lambda: None, "t", samples=lambda: samples), "/api/requests")
    assert status == 200 and out.pop("metrics") is True
    assert before <= out.pop("time") <= time.time()
    assert out == {
        "entryPoints": {
            "web": {"requests": 6, "2xx": 4, "5xx": 2},
            "admin": {"requests": 1, "4xx": 1},
        },
        "routers": {"a@file": {"requests": 3, "2xx": 3}, "b@file": {"requests": 2, "5xx": 2}},
        "services": {"s@file": {"requests": 5, "2xx": 3, "5xx": 2}},
        "openConnections": {"web": 4, "dns": 1},
    }
    # A kind of element not counted (Traefik's addRoutersLabels is false by default) is
    # left out, rather than shown with nothing counted.
    traefiks = decode_static({**STATIC, "metrics": {"prometheus": {}}})
    _, out, _ = get(API(traefiks, lambda: None, "t", samples=lambda: samples), "/api/requests")
    assert "routers" not in out and out["services"] and out["entryPoints"]
    # Without metrics (or before any sample): nothing counted, and said so.
    _, out, _ = get(API(static, lambda: None, "t"), "/api/requests")
    assert set(out) == {"time", "metrics"} and out["metrics"] is False
    _, out, _ = get(API(static, lambda: None, "t", samples=lambda: None), "/api/requests")
    assert out["metrics"] is False


def test_entrypoints_show_the_http_versions_they_serve():
    """h2c in the clear on every TCP entry point, and on TLS the ALPN names each TLS
    options of its HTTPS routers offer (h2 where listed); none for UDP."""
    static = decode_static(
        {
            "entryPoints": {
                "web": {"address": ":80"},
                "websecure": {"address": ":443"},
                "dns": {"address": ":53/udp"},
            },
            "api": {"insecure": True},
        }
    )
    dynamic = {
        "http": {
            "routers": {
                "a": {"rule": "Host(`a`)", "service": "s", "entryPoints": ["websecure"], "tls": {}},
                "b": {
                    "rule": "Host(`b`)",
                    "service": "s",
                    "entryPoints": ["websecure"],
                    "tls": {"options": "old"},
                },
                "c": {"rule": "Host(`c`)", "service": "s", "entryPoints": ["web"]},
            },
            "services": {"s": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}},
        },
        "tls": {"options": {"old": {"alpnProtocols": ["http/1.1"]}}},
    }
    runtime = build_runtime(
        merge({"file": decode_dynamic(dynamic)}), static.entry_point_protocols()
    )
    api = API(static, lambda: runtime, "test")
    _, web, _ = get(api, "/api/entrypoints/web")
    assert web["protocols"] == {"http": ["HTTP/1.0", "HTTP/1.1", "h2c"]}
    _, secure, _ = get(api, "/api/entrypoints/websecure")
    assert secure["protocols"]["tls"] == {"default": ["h2", "http/1.1"], "old@file": ["http/1.1"]}
    _, dns, _ = get(api, "/api/entrypoints/dns")
    assert "protocols" not in dns


def test_configuration_is_shown_without_secrets_made_once_per_runtime():
    # Traefik's API shows a rateLimit's Redis password and basicAuth's users as
    # written; edge's masks them (edge.config.redact), once per runtime, not per answer.
    dynamic = {
        "http": {
            "middlewares": {
                "limit": {"rateLimit": {"redis": {"password": "s3cret-pw"}}},
                "basic": {"basicAuth": {"users": ["ann:$apr1$s3cret-hash"]}},
            }
        }
    }
    runtimes = [build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"})]
    api = API(decode_static(STATIC), lambda: runtimes[-1], "test")
    bodies = [
        api.answer(path.encode(), b"")[1]
        for path in ("/api/rawdata", "/api/http/middlewares", "/api/http/middlewares/limit@file")
    ]
    assert all(b"s3cret" not in body for body in bodies), bodies
    _, limit, _ = get(api, "/api/http/middlewares/limit@file")
    assert limit["rateLimit"]["redis"]["password"] == "xxxx"
    assert (
        runtimes[-1].http_middlewares["limit@file"].config.rate_limit.redis.password == "s3cret-pw"
    )
    first = api.shown(runtimes[-1])
    get(api, "/api/rawdata")
    assert api.shown(runtimes[-1]) is first  # the same runtime: made once
    # an element the runtime gained since is shown all the same, masked
    table = runtimes[-1].http_middlewares
    table["late@file"] = table["limit@file"]
    status, late, _ = get(api, "/api/http/middlewares/late@file")
    assert status == 200 and late["rateLimit"]["redis"]["password"] == "xxxx"
    runtimes.append(build_runtime(merge({"file": decode_dynamic(dynamic)}), {"web": "tcp"}))
    assert api.shown(runtimes[-1]) is not first  # a new runtime: made again
