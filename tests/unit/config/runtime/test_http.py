"""The HTTP section's validation (edge.config.runtime.http): a middleware with a bad
value disabled with its key named and its routers with it, the rest served; chains
judged and unrolled into their routers; loadBalancer.strategy."""

from __future__ import annotations

import pytest

from edge.config import dynamic as dyn
from edge.config.loader import decode_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError
from tests.unit.config.documents import EPS, conf, lb


def runtime(middlewares: dict, routers: dict, services: dict | None = None):
    http = {
        "routers": {
            name: {"rule": f"Host(`{name}`)", "service": "app", "middlewares": mws}
            for name, mws in routers.items()
        },
        "services": services or {"app": lb("http://127.0.0.1:9001")},
        "middlewares": middlewares,
    }
    return build_runtime(merge({"file": conf({"http": http})}), EPS)


@pytest.mark.parametrize(
    ("middleware", "error"),
    [
        (
            {"replacePathRegex": {"regex": "^/(a", "replacement": "/$1"}},
            "replacePathRegex.regex: invalid regexp '^/(a': missing )",
        ),
        (
            {"replacePathRegex": {"regex": "^/(a)", "replacement": "/$2"}},
            "replacePathRegex.replacement: names group '2', which the regex does not have",
        ),
        (
            {"redirectRegex": {"regex": "(?<=a)b", "replacement": "x"}},
            "redirectRegex.regex: invalid regexp '(?<=a)b'",
        ),
        (
            {"stripPrefixRegex": {"regex": ["/ok", "(a)\\1"]}},
            "stripPrefixRegex.regex[1]: invalid regexp",
        ),
        (
            {"headers": {"hostsProxyHeaders": ["X Host"]}},
            "headers.hostsProxyHeaders[0]: invalid header name 'X Host'",
        ),
        (
            {"headers": {"accessControlAllowOriginListRegex": ["a(b"]}},
            "headers.accessControlAllowOriginListRegex[0]: invalid regexp",
        ),
        ({"headers": {}}, "headers: sets nothing"),
        ({"addPrefix": {"prefix": ""}}, "addPrefix.prefix: must not be empty"),
        ({"replacePath": {"path": "/a%zz"}}, "replacePath.path: '/a%zz' holds a %"),
    ],
)
def test_a_bad_middleware_disables_itself_and_its_routers_only(middleware, error):
    rt = runtime(
        {"bad": middleware, "good": {"stripPrefix": {"prefixes": ["/x"]}}},
        {"uses-bad": ["good", "bad"], "uses-good": ["good"]},
    )
    bad = rt.http_middlewares["bad@file"]
    assert bad.status == "disabled"
    assert len(bad.errors) == 1 and bad.errors[0].startswith(error), bad.errors
    assert rt.http_routers["uses-bad@file"].status == "disabled"
    assert rt.http_routers["uses-good@file"].status == "enabled"
    assert rt.http_middlewares["good@file"].status == "enabled"


def test_a_chain_is_unrolled_into_its_routers():
    rt = runtime(
        {
            "a": {"stripPrefix": {"prefixes": ["/a"]}},
            "b": {"addPrefix": {"prefix": "/b"}},
            "inner": {"chain": {"middlewares": ["b", "a"]}},
            "outer": {"chain": {"middlewares": ["a", "inner@file"]}},
        },
        {"r": ["outer", "b"]},
    )
    router = rt.http_routers["r@file"]
    assert router.status == "enabled"
    assert router.config.middlewares == ["a@file", "b@file", "a@file", "b@file"]
    assert rt.http_middlewares["outer@file"].used_by == ["r@file"]
    assert rt.http_middlewares["inner@file"].used_by == ["outer@file"]


@pytest.mark.parametrize(
    ("middlewares", "errors"),
    [
        (
            {"c": {"chain": {"middlewares": ["ghost"]}}},
            {"c@file": ["chain.middlewares[0]: middleware 'ghost@file' does not exist"]},
        ),
        (
            {
                "c": {"chain": {"middlewares": ["bad"]}},
                "bad": {"addPrefix": {"prefix": ""}},
            },
            {"c@file": ["chain.middlewares[0]: middleware 'bad@file' is disabled"]},
        ),
        (
            {
                "c": {"chain": {"middlewares": ["d"]}},
                "d": {"chain": {"middlewares": ["c"]}},
            },
            {
                "c@file": ["chain: a cycle of chains: c@file -> d@file -> c@file"],
                "d@file": ["chain: a cycle of chains: c@file -> d@file -> c@file"],
            },
        ),
    ],
)
def test_a_broken_chain_is_disabled_with_its_routers(middlewares, errors):
    rt = runtime(middlewares, {"r": ["c"]})
    for name, expected in errors.items():
        assert rt.http_middlewares[name].status == "disabled"
        assert rt.http_middlewares[name].errors[-len(expected) :] == expected
    assert rt.http_routers["r@file"].status == "disabled"


@pytest.mark.parametrize(
    ("strategy", "error"),
    [
        ("", None),
        ("wrr", None),
        ("p2c", None),
        (
            "hrw",
            "loadBalancer.strategy 'hrw': not supported by this version of edge (it has wrr, p2c)",
        ),
        ("leasttime", "loadBalancer.strategy 'leasttime': not supported by this version of edge"),
        ("fastest", "loadBalancer.strategy 'fastest': unknown"),
    ],
)
def test_load_balancer_strategy(strategy, error):
    service = lb("http://127.0.0.1:9001")
    service["loadBalancer"]["strategy"] = strategy
    rt = runtime({}, {"r": []}, {"app": service})
    info = rt.http_services["app@file"]
    if error is None:
        assert info.status == "enabled"
        assert rt.http_routers["r@file"].status == "enabled"
    else:
        assert info.status == "disabled"
        assert info.errors[0].startswith(error), info.errors
        assert rt.http_routers["r@file"].status == "disabled"


def test_a_service_or_middleware_with_a_key_error_shows_that_reason_alone():
    """The loader's stand-in for an element that did not decode carries its problem and
    no invented kind: no "no servers" warning, no middleware check beside its reason."""

    doc = {
        "http": {
            "routers": {
                "r": {"rule": "Host(`r`)", "service": "broken", "middlewares": ["bad"]},
            },
            "services": {"broken": {"loadBalancer": {"servers": [{"uri": "http://x:1"}]}}},
            "middlewares": {"bad": {"addPrefix": {"prefx": "/a"}}},
        }
    }
    errors: list[ConfigError] = []
    decoded = decode_dynamic(doc, errors=errors)
    assert decoded.http is not None
    service = decoded.http.services["broken"]
    assert service.load_balancer is None and service.weighted is None
    middleware = decoded.http.middlewares["bad"]
    assert middleware.add_prefix is None
    rt = build_runtime(merge({"file": decoded}), EPS)
    broken = rt.http_services["broken@file"]
    assert broken.status == "disabled"
    assert broken.errors == ["$.http.services.broken.loadBalancer.servers[0].uri: unknown key"]
    bad = rt.http_middlewares["bad@file"]
    assert bad.status == "disabled"
    assert bad.errors == ["$.http.middlewares.bad.addPrefix.prefx: unknown key"]
    assert rt.http_routers["r@file"].status == "disabled"


def test_a_service_a_provider_could_not_make_shows_its_problem_alone():
    """A provider's stand-in (``problems``) may still carry a load balancer, empty:
    its problem is the reason shown, with no "no servers" warning beside it."""

    service = dyn.Service(
        problems=["Service default/app not found"], load_balancer=dyn.LoadBalancer()
    )
    decoded = dyn.Configuration(http=dyn.HTTPConfiguration(services={"app": service}))
    info = build_runtime(merge({"kubernetes": decoded}), EPS).http_services["app@kubernetes"]
    assert info.status == "disabled"
    assert info.errors == ["Service default/app not found"]


@pytest.mark.parametrize(
    ("key", "check", "error"),
    [
        ("healthCheck", {"path": "/h"}, None),
        ("healthCheck", {"mode": "grpc"}, None),
        ("healthCheck", {"mode": "tcp"}, "loadBalancer.healthCheck.mode 'tcp': unknown"),
        ("healthCheck", {"scheme": "ftp"}, "loadBalancer.healthCheck.scheme 'ftp': expected http or https"),
        ("healthCheck", {"path": "health"}, "loadBalancer.healthCheck.path 'health': expected a relative URL path"),
        ("healthCheck", {"interval": "0s"}, "loadBalancer.healthCheck.interval: must be greater than 0"),
        ("healthCheck", {"unhealthyInterval": "-1s"}, "loadBalancer.healthCheck.unhealthyInterval: must be greater than 0"),
        ("healthCheck", {"timeout": "0s"}, "loadBalancer.healthCheck.timeout: must be greater than 0"),
        ("healthCheck", {"status": 99}, "loadBalancer.healthCheck.status 99: expected an HTTP status"),
        ("healthCheck", {"headers": {"X A": "1"}}, "loadBalancer.healthCheck.headers['X A']: invalid header name"),
        ("healthCheck", {"hostname": "a\r\nb"}, "loadBalancer.healthCheck.hostname: a value may not hold CR"),
        ("passiveHealthCheck", {"maxFailedAttempts": 3, "failureWindow": "5s"}, None),
        ("passiveHealthCheck", {"failureWindow": "0s"}, "loadBalancer.passiveHealthCheck.failureWindow: must be greater than 0"),
    ],
)  # fmt: skip
def test_health_checks_judged_naming_the_key(key, check, error):
    service = lb("http://127.0.0.1:9001")
    service["loadBalancer"][key] = check
    rt = runtime({}, {"r": []}, {"app": service})
    info = rt.http_services["app@file"]
    if error is None:
        assert info.status == "enabled", info.errors
    else:
        assert info.status == "disabled"
        assert info.errors[0].startswith(error), info.errors
        assert rt.http_routers["r@file"].status == "disabled"


@pytest.mark.parametrize(
    ("services", "errors"),
    [
        ({"app": {"failover": {"service": "main", "fallback": "spare"}}}, {}),
        (
            {"app": {"failover": {"service": "main", "fallback": "nope"}}},
            {"app": ["failover.fallback: service 'nope@file' does not exist"]},
        ),
        (
            {"app": {"failover": {"service": "main", "fallback": "app"}}},
            {"app": ["failover.fallback: services form a cycle: app@file -> app@file"]},
        ),
        (
            {
                "app": {"failover": {"service": "main", "fallback": "bad"}},
                "bad": {"loadBalancer": {"servers": [{"url": "http://x:1"}], "strategy": "hrw"}},
            },
            {"app": ["failover.fallback: service 'bad@file' is disabled"]},
        ),
    ],
)
def test_failover_members_must_exist_and_serve(services, errors):
    rt = runtime(
        {},
        {"r": []},
        {"main": lb("http://127.0.0.1:1"), "spare": lb("http://127.0.0.1:2"), **services},
    )
    info = rt.http_services["app@file"]
    expected = errors.get("app")
    if not expected:
        assert info.status == "enabled", info.errors
        assert rt.http_routers["r@file"].status == "enabled"
        assert sorted(rt.http_services["main@file"].used_by) == ["app@file"]
    else:
        assert info.status == "disabled"
        assert info.errors == expected
        assert rt.http_routers["r@file"].status == "disabled"


@pytest.mark.parametrize(
    ("mirroring", "errors"),
    [
        ({"service": "main", "mirrors": [{"name": "spare", "percent": 10}]}, []),
        ({"service": "main", "mirrors": []}, []),
        (
            {"service": "main", "mirrors": [{"name": "nope", "percent": 10}]},
            ["mirroring.mirrors[0]: service 'nope@file' does not exist"],
        ),
        (
            {"service": "nope", "mirrors": [{"name": "spare", "percent": 10}]},
            ["mirroring.service: service 'nope@file' does not exist"],
        ),
        (
            {"service": "main", "mirrors": [{"name": "spare", "percent": 101}]},
            ["mirroring.mirrors[0].percent 101: must be 0 to 100"],
        ),
        (
            {"service": "main", "mirrors": [{"name": "spare", "percent": -1}]},
            ["mirroring.mirrors[0].percent -1: must be 0 to 100"],
        ),
        (
            {"service": "main", "mirrors": [{"name": "app", "percent": 5}]},
            ["mirroring.mirrors[0]: services form a cycle: app@file -> app@file"],
        ),
        (
            {"service": "main", "mirrors": [{"name": "bad", "percent": 5}]},
            ["mirroring.mirrors[0]: service 'bad@file' is disabled"],
        ),
        (
            {"service": "", "mirrors": []},
            ["mirroring.service: a mirroring service needs a service to answer"],
        ),
    ],
)
def test_mirroring_service_and_mirrors_must_exist_and_serve(mirroring, errors):
    rt = runtime(
        {},
        {"r": []},
        {
            "main": lb("http://127.0.0.1:1"),
            "spare": lb("http://127.0.0.1:2"),
            "bad": {"loadBalancer": {"servers": [{"url": "http://x:1"}], "strategy": "hrw"}},
            "app": {"mirroring": mirroring},
        },
    )
    info = rt.http_services["app@file"]
    if not errors:
        assert info.status == "enabled", info.errors
        assert rt.http_routers["r@file"].status == "enabled"
        assert rt.http_services["main@file"].used_by == ["app@file"]
    else:
        assert info.status == "disabled"
        assert info.errors == errors
        assert rt.http_routers["r@file"].status == "disabled"


def test_mirroring_defaults_are_traefiks_and_members_are_qualified():
    rt = runtime(
        {},
        {"r": []},
        {
            "main": lb("http://127.0.0.1:1"),
            "app": {"mirroring": {"service": "main", "mirrors": [{"name": "x@other"}]}},
        },
    )
    info = rt.http_services["app@file"]
    mirroring = info.config.mirroring
    assert mirroring.mirror_body is True and mirroring.max_body_size == -1
    assert mirroring.mirrors[0].percent == 0
    assert info.errors == ["mirroring.mirrors[0]: service 'x@other' does not exist"]


@pytest.mark.parametrize(
    ("value", "seconds"), [("150ms", 0.15), ("-1", -1.0), ("1s", 1.0), (2, 2.0), ("0", 0.0)]
)
def test_response_forwarding_flush_interval_is_read_as_a_duration(value, seconds):
    service = lb("http://127.0.0.1:9001")
    service["loadBalancer"]["responseForwarding"] = {"flushInterval": value}
    rt = runtime({}, {"r": []}, {"app": service})
    info = rt.http_services["app@file"]
    assert info.status == "enabled", info.errors
    assert info.config.load_balancer.response_forwarding.flush_interval == seconds


def test_response_forwarding_defaults_to_traefiks_100ms():
    assert dyn.ResponseForwarding().flush_interval == 0.1


def test_response_forwarding_flush_interval_that_is_no_duration_disables_the_service():
    service = lb("http://127.0.0.1:9001")
    service["loadBalancer"]["responseForwarding"] = {"flushInterval": "soon"}
    doc = {"http": {"routers": {"r": {"rule": "Host(`r`)", "service": "app"}}}}
    doc["http"]["services"] = {"app": service}
    errors: list[ConfigError] = []
    rt = build_runtime(merge({"file": decode_dynamic(doc, errors=errors)}), EPS)
    info = rt.http_services["app@file"]
    assert info.status == "disabled"
    assert info.errors[0].startswith(
        "$.http.services.app.loadBalancer.responseForwarding.flushInterval: invalid duration"
    ), info.errors


def test_a_mirroring_under_another_service_is_a_warning():
    rt = runtime(
        {},
        {"r": []},
        {
            "main": lb("http://127.0.0.1:1"),
            "shadow": {"mirroring": {"service": "main", "mirrors": [{"name": "main"}]}},
            "app": {"weighted": {"services": [{"name": "shadow"}]}},
        },
    )
    info = rt.http_services["shadow@file"]
    assert info.status == "warning"
    assert info.errors == [
        "used by service 'app@file': edge mirrors only for routers naming this service; "
        "through another service it serves its service alone"
    ]
    assert rt.http_routers["r@file"].status == "enabled"


def _with_entry_point_middlewares(doc_by_provider: dict, middlewares: dict[str, tuple[str, ...]]):
    from edge.config.static import EntryPointKind

    kinds = {n: EntryPointKind(p, http_middlewares=middlewares.get(n, ())) for n, p in EPS.items()}
    return build_runtime(merge({p: conf(d) for p, d in doc_by_provider.items()}), kinds)


def test_entry_point_middlewares_run_before_the_routers_own_qualified_by_its_provider():
    """Traefik's applyModel: an entry point's http.middlewares are put before those of
    each HTTP router on it; a name without @ is the router's provider's; a router on
    several entry points becomes one per entry point with a model."""
    http = {
        "routers": {
            "only-web": {"rule": "Host(`a`)", "service": "app", "entryPoints": ["web"],
                         "middlewares": ["own"]},
            "both": {"rule": "Host(`b`)", "service": "app", "entryPoints": ["web", "websecure"]},
            "default": {"rule": "Host(`c`)", "service": "app"},
            "elsewhere": {"rule": "Host(`d`)", "service": "app", "entryPoints": ["websecure"]},
        },
        "services": {"app": lb("http://127.0.0.1:9001")},
        "middlewares": {
            "own": {"addPrefix": {"prefix": "/own"}},
            "mark": {"headers": {"customRequestHeaders": {"X-Mark": "file"}}},
        },
    }  # fmt: skip
    other = {"http": {"middlewares": {"mark": {"headers": {"customRequestHeaders": {"X": "o"}}}}}}
    rt = _with_entry_point_middlewares(
        {"file": {"http": http}, "other": other}, {"web": ("mark", "mark@other")}
    )
    r = rt.http_routers
    assert r["only-web@file"].config.middlewares == ["mark@file", "mark@other", "own@file"]
    assert r["only-web@file"].status == "enabled"
    assert r["web-both@file"].config.middlewares == ["mark@file", "mark@other"]
    assert r["web-both@file"].entry_points == ["web"]
    assert r["both@file"].config.middlewares == [] and r["both@file"].entry_points == ["websecure"]
    assert r["web-default@file"].config.middlewares == ["mark@file", "mark@other"]
    assert r["default@file"].config.middlewares == []
    assert r["default@file"].entry_points == ["websecure"]  # traefik is never a default
    assert r["elsewhere@file"].config.middlewares == []
    assert rt.http_middlewares["mark@file"].used_by == ["only-web@file", "web-both@file", "web-default@file"]  # fmt: skip
    assert rt.http_middlewares["mark@other"].used_by == ["only-web@file", "web-both@file", "web-default@file"]  # fmt: skip


def test_an_entry_point_chain_is_unrolled_like_a_routers_own():
    http = {
        "routers": {"r": {"rule": "Host(`a`)", "service": "app", "middlewares": ["b"]}},
        "services": {"app": lb("http://127.0.0.1:9001")},
        "middlewares": {
            "a": {"stripPrefix": {"prefixes": ["/a"]}},
            "b": {"addPrefix": {"prefix": "/b"}},
            "both": {"chain": {"middlewares": ["a", "b"]}},
        },
    }
    rt = _with_entry_point_middlewares({"file": {"http": http}}, {"web": ("both",)})
    assert rt.http_routers["web-r@file"].config.middlewares == ["a@file", "b@file", "b@file"]
    assert rt.http_routers["web-r@file"].status == "enabled"


def test_a_missing_entry_point_middleware_disables_the_routers_it_applies_to_saying_where():
    http = {
        "routers": {
            "on-web": {"rule": "Host(`a`)", "service": "app", "entryPoints": ["web"]},
            "on-secure": {"rule": "Host(`b`)", "service": "app", "entryPoints": ["websecure"]},
        },
        "services": {"app": lb("http://127.0.0.1:9001")},
        "middlewares": {"bad": {"addPrefix": {"prefix": ""}}},
    }
    rt = _with_entry_point_middlewares(
        {"file": {"http": http}}, {"web": ("auth",), "websecure": ("bad",)}
    )
    web, secure = rt.http_routers["on-web@file"], rt.http_routers["on-secure@file"]
    assert web.status == "disabled" and secure.status == "disabled"
    assert web.errors == [
        "middleware 'auth@file' (entryPoints.web.http.middlewares) does not exist"
    ]
    assert secure.errors[0].startswith(
        "middleware 'bad@file' (entryPoints.websecure.http.middlewares) is disabled: "
    )
    # the rest is served: a router on an entry point without them
    http["routers"]["on-traefik"] = {"rule": "Host(`c`)", "service": "app", "entryPoints": ["traefik"]}  # fmt: skip
    rt = _with_entry_point_middlewares({"file": {"http": http}}, {"web": ("auth",)})
    assert rt.http_routers["on-traefik@file"].status == "enabled"
    assert rt.http_routers["on-secure@file"].status == "enabled"
