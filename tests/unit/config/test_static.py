"""The static configuration (edge.config.static): every section, defaults, addresses,
the ``workers`` key, errors naming the key path."""

from __future__ import annotations

import json
import os

import pytest

from edge.config.loader import (
    decode_static,
    load_static,
)
from edge.config.static import parse_address
from edge.errors import ConfigError


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":8080", ("", 8080, "tcp")),
        ("127.0.0.1:8080", ("127.0.0.1", 8080, "tcp")),
        ("[::1]:8080", ("::1", 8080, "tcp")),
        (":5353/udp", ("", 5353, "udp")),
        ("0.0.0.0:443/tcp", ("0.0.0.0", 443, "tcp")),
        ("localhost:0", ("localhost", 0, "tcp")),
        (":53/UDP", ("", 53, "udp")),
    ],
)
def test_parse_address(address: str, parsed: tuple[str, int, str]) -> None:
    assert parse_address(address) == parsed
    ep = decode_static({"entryPoints": {"e": {"address": address}}}).entry_points["e"]
    assert (ep.host, ep.port, ep.protocol) == parsed


@pytest.mark.parametrize(
    "address", ["8080", ":http", ":70000", "::1:80", "[::1]8080", "[nope]:80", ":80/sctp", ""]
)
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ValueError):
        parse_address(address)
    with pytest.raises(ConfigError) as info:
        decode_static({"entryPoints": {"web": {"address": address}}})
    assert info.value.path == "$.entryPoints.web"
    assert "address" in info.value.message


STATIC_YAML = """
entryPoints:
  web:
    address: ":8000"
    transport:
      respondingTimeouts:
        readTimeout: 5s
        writeTimeout: 1m
        idleTimeout: 90
      lifeCycle:
        requestAcceptGraceTimeout: 1s
        graceTimeOut: 3s
    forwardedHeaders:
      trustedIPs: ["10.0.0.0/8", "127.0.0.1", "::1"]
    http:
      maxHeaderBytes: 16384
      parser: h11
  dns:
    address: ":5353/udp"
    udp:
      timeout: 10s
  traefik:
    address: "127.0.0.1:8080"
providers:
  file:
    directory: dynamic
    watch: true
  kubernetesIngress:
    namespaces: [default]
    ingressClass: edge
    throttleDuration: 500ms
  kubernetesGateway:
    labelSelector: app=edge
providersThrottleDuration: 1s
ping:
  entryPoint: traefik
api:
  insecure: true
log:
  level: debug
  format: json
accessLog:
  filePath: /tmp/access.log
  format: json
  bufferingSize: 100
metrics:
  prometheus: {}
"""


def test_static_every_section(tmp_path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text(STATIC_YAML)
    static = load_static(path)
    web = static.entry_points["web"]
    assert (web.host, web.port, web.protocol) == ("", 8000, "tcp")
    rt = web.transport.responding_timeouts
    assert (rt.read_timeout, rt.write_timeout, rt.idle_timeout) == (5.0, 60.0, 90.0)
    assert web.transport.life_cycle.request_accept_grace_timeout == 1.0
    assert web.transport.life_cycle.grace_time_out == 3.0
    assert web.forwarded_headers.trusted_ips == ["10.0.0.0/8", "127.0.0.1", "::1"]
    assert len(web.forwarded_headers.trusted_networks) == 3
    assert web.http.max_header_bytes == 16384
    assert web.http.parser == "h11"
    assert static.entry_points["dns"].protocol == "udp"
    assert static.entry_points["dns"].udp.timeout == 10.0
    assert static.providers.file is not None
    assert static.providers.file.directory == "dynamic"
    assert static.providers.file.watch is True
    assert static.providers.kubernetes_ingress is not None
    assert static.providers.kubernetes_ingress.throttle_duration == 0.5
    assert static.providers.kubernetes_ingress.namespaces == ["default"]
    assert static.providers.kubernetes_gateway is not None
    assert static.providers.kubernetes_gateway.label_selector == "app=edge"
    assert static.providers_throttle_duration == 1.0
    assert static.ping is not None and static.ping.entry_point == "traefik"
    assert static.api is not None and static.api.insecure
    assert static.log.level == "DEBUG"
    assert static.log.format == "json"
    assert static.access_log is not None and static.access_log.buffering_size == 100
    assert static.entry_point_protocols() == {"web": "tcp", "dns": "udp", "traefik": "tcp"}


def test_static_defaults() -> None:
    static = decode_static({"entryPoints": {"web": {"address": ":80"}}})
    web = static.entry_points["web"]
    rt = web.transport.responding_timeouts
    assert (rt.read_timeout, rt.write_timeout, rt.idle_timeout) == (60.0, 0.0, 180.0)
    assert web.transport.life_cycle.request_accept_grace_timeout == 0.0
    assert web.transport.life_cycle.grace_time_out == 10.0
    assert web.http.max_header_bytes == 1048576
    assert web.http.parser == "httptools"
    assert web.forwarded_headers.insecure is False
    assert static.providers_throttle_duration == 2.0
    assert static.log.level == "INFO"
    assert static.ping is None and static.access_log is None and static.api is None


def test_api_dashboard_and_base_path_as_traefik() -> None:
    api = decode_static({"api": {}}).api
    assert api is not None and api.dashboard is True and api.base_path == "/"
    api = decode_static({"api": {"dashboard": False, "basePath": "/my/base_path-1.0:~"}}).api
    assert api is not None and not api.dashboard and api.base_path == "/my/base_path-1.0:~"
    api = decode_static({"api": {"dashboardName": "eu-1"}}).api
    assert api is not None and api.dashboard_name == "eu-1"


def test_static_same_in_toml_and_json(tmp_path) -> None:
    toml = tmp_path / "edge.toml"
    toml.write_text(
        '[entryPoints.web]\naddress = ":8000"\n'
        '[entryPoints.web.transport.respondingTimeouts]\nreadTimeout = "5s"\n'
        '[log]\nlevel = "warn"\n'
    )
    js = tmp_path / "edge.json"
    js.write_text(
        json.dumps(
            {
                "entryPoints": {
                    "web": {
                        "address": ":8000",
                        "transport": {"respondingTimeouts": {"readTimeout": 5}},
                    }
                },
                "log": {"level": "WARNING"},
            }
        )
    )
    assert load_static(toml) == load_static(js)
    assert load_static(toml).log.level == "WARN"


def test_providers_throttle_under_providers() -> None:
    static = decode_static({"providers": {"providersThrottleDuration": "500ms"}})
    assert static.providers_throttle_duration == 0.5
    with pytest.raises(ConfigError, match="both"):
        decode_static(
            {"providersThrottleDuration": "1s", "providers": {"providersThrottleDuration": "3s"}}
        )


def test_internal_entry_point_added_like_traefik() -> None:
    static = decode_static({"entryPoints": {"web": {"address": ":80"}}, "ping": {}})
    assert static.entry_points["traefik"].address == ":8080"


@pytest.mark.parametrize(
    ("obj", "path", "message"),
    [
        ({"entryPoints": {"web": {"adress": ":80"}}}, "$.entryPoints.web.adress", "unknown key"),
        (
            {"entryPoints": {"web": {"address": ":80", "http": {"maxHeaderBytes": "1k"}}}},
            "$.entryPoints.web.http.maxHeaderBytes",
            "expected int, got str",
        ),
        ({"entryPoints": {"web": {}}}, "$.entryPoints.web.address", "missing required key"),
        ({"entryPoint": {}}, "$.entryPoint", "unknown key"),
        (
            {
                "entryPoints": {
                    "a": {"address": ":1"},
                    "b": {"address": ":2", "transport": {"lifeCycle": {"graceTimeOut": "soon"}}},
                }
            },
            "$.entryPoints.b.transport.lifeCycle.graceTimeOut",
            "invalid duration 'soon'",
        ),
        (
            {
                "entryPoints": {
                    "web": {"address": ":80", "forwardedHeaders": {"trustedIPs": ["10.0.0.0/33"]}}
                }
            },
            "$.entryPoints.web.forwardedHeaders",
            "'10.0.0.0/33' is not an IP address or CIDR",
        ),
        ({"log": {"level": "chatty"}}, "$.log", "invalid log level 'chatty'"),
        (
            {"log": {"format": "xml"}},
            "$.log.format",
            "invalid value 'xml': expected one of 'common', 'json'",
        ),
        ({"providers": {"file": {}}}, "$.providers.file", "exactly one of filename, directory"),
        (
            {"providers": {"file": {"filename": "a.yml", "directory": "d"}}},
            "$.providers.file",
            "exactly one of filename, directory",
        ),
        (
            {"entryPoints": {"web": {"address": ":80"}}, "ping": {"entryPoint": "admin"}},
            "$",
            "ping: entryPoint 'admin' is not defined",
        ),
        (
            {"entryPoints": {"dns": {"address": ":53/udp"}}, "ping": {"entryPoint": "dns"}},
            "$",
            "UDP entry point",
        ),
        ({"accessLog": {"bufferingSize": -1}}, "$.accessLog.bufferingSize", "expected int >= 0"),
        ({"api": {"basePath": "edge"}}, "$.api", "basePath: 'edge' is not an absolute URL path"),
        ({"api": {"basePath": "/a b"}}, "$.api", "basePath: '/a b' is not an absolute URL path"),
        (
            {"entryPoints": {8080: {"address": ":80"}}},
            '$.entryPoints["8080"]',
            "invalid key: expected str, got int",
        ),
        ([], "$", "expected object, got array"),
    ],
)
def test_static_errors_name_the_key_path(obj: object, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(obj, source="edge.yaml")
    err = info.value
    assert err.path == path
    assert message in err.message
    assert err.source == "edge.yaml"
    assert str(err).startswith(f"edge.yaml: {path}: ")


def test_workers_auto_follows_the_cpus_a_pod_may_use(tmp_path):
    """``workers: auto`` in a container: the cgroup quota and the pod's CPU limit bound the count."""
    from edge.config.static import usable_cpus

    affinity = len(os.sched_getaffinity(0))
    none = tmp_path / "none"
    none.mkdir()
    assert usable_cpus({}, str(none)) == affinity
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 workers
    assert usable_cpus({}, str(v2)) == min(affinity, 2)
    (v2 / "cpu.max").write_text("max 100000\n")
    assert usable_cpus({}, str(v2)) == affinity
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cpus({}, str(v1)) == 1
    assert usable_cpus({"EDGE_CPU_LIMIT": "1"}, str(none)) == 1
    assert usable_cpus({"EDGE_CPU_LIMIT": "64"}, str(none)) == affinity
    assert usable_cpus({"EDGE_CPU_LIMIT": "0"}, str(none)) == affinity


def test_default_is_one_process():
    static = decode_static({})
    assert static.workers == 1 and static.worker_count == 1


@pytest.mark.parametrize("n", [1, 2, 16])
def test_number(n):
    static = decode_static({"workers": n})
    assert static.workers == n and static.worker_count == n


def test_auto_is_cpu_count():
    static = decode_static({"workers": "auto"})
    assert static.workers == "auto"
    assert static.worker_count == max(1, os.cpu_count() or 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expected int >= 1"),
        (-2, "expected int >= 1"),
        ("many", "invalid value 'many'"),
        ("4", "invalid value '4'"),
        (True, "got bool"),
        (1.5, "got float"),
        ([2], "got array"),
    ],
)
def test_wrong_values_name_the_key(value, message):
    with pytest.raises(ConfigError) as info:
        decode_static({"workers": value}, source="static.yaml")
    assert info.value.path == "$.workers"
    assert message in str(info.value)
    assert str(info.value).startswith("static.yaml: $.workers: ")


def test_from_a_file(tmp_path):
    path = tmp_path / "static.yaml"
    path.write_text("entryPoints:\n  web: {address: ':0'}\nworkers: auto\n")
    assert load_static(path).worker_count >= 1
    path.write_text("workers: 0\n")
    with pytest.raises(ConfigError, match=r"\$\.workers"):
        load_static(path)


def test_the_file_provider_watches_unless_told_not_to() -> None:
    """Traefik's providers.file.watch defaults to true (file.Provider.SetDefaults), and its
    documentation's examples leave it out; edge defaulted to false, so a Traefik static
    configuration never picked up a change to its dynamic files."""
    static = decode_static({"providers": {"file": {"directory": "/etc/edge/dynamic"}}})
    assert static.providers.file is not None and static.providers.file.watch is True
    static = decode_static({"providers": {"file": {"filename": "d.yaml", "watch": False}}})
    assert static.providers.file is not None and static.providers.file.watch is False


def test_static_max_sessions():
    static = decode_static({"entryPoints": {"dns": {"address": ":53/udp"}}})
    assert static.entry_points["dns"].udp.max_sessions == 10_000
    static = decode_static(
        {"entryPoints": {"dns": {"address": ":53/udp", "udp": {"maxSessions": 5}}}}
    )
    assert static.entry_points["dns"].udp.max_sessions == 5
    with pytest.raises(Exception, match="maxSessions"):
        decode_static({"entryPoints": {"dns": {"address": ":53/udp", "udp": {"maxSessions": 0}}}})


def test_kubernetes_crd_takes_traefiks_keys() -> None:
    static = decode_static(
        {
            "providers": {
                "kubernetesCRD": {
                    "endpoint": "https://10.0.0.1:6443",
                    "token": "t",
                    "certAuthFilePath": "/ca.crt",
                    "namespaces": ["apps"],
                    "labelSelector": "app=web",
                    "ingressClass": "edge-crd",
                    "throttleDuration": "250ms",
                    "allowCrossNamespace": True,
                    "allowExternalNameServices": True,
                    "allowEmptyServices": True,
                    "nativeLBByDefault": True,
                    "disableClusterScopeResources": True,
                }
            }
        }
    )
    crd = static.providers.kubernetes_crd
    assert crd is not None
    assert (crd.endpoint, crd.token, crd.cert_auth_file_path) == (
        "https://10.0.0.1:6443",
        "t",
        "/ca.crt",
    )
    assert (crd.namespaces, crd.label_selector, crd.ingress_class) == (
        ["apps"],
        "app=web",
        "edge-crd",
    )
    assert crd.throttle_duration == 0.25
    assert crd.allow_cross_namespace and crd.allow_external_name_services
    assert crd.allow_empty_services and crd.native_lb_by_default
    assert crd.disable_cluster_scope_resources
    defaults = decode_static({"providers": {"kubernetesCRD": {}}}).providers.kubernetes_crd
    assert defaults is not None and defaults.ingress_class == ""  # crd.py's default rule
    assert defaults.throttle_duration is None  # providersThrottleDuration then
    assert not defaults.disable_cluster_scope_resources  # Nodes are watched


# --- what Traefik adds and what it refuses ---------------------------------------------


def test_no_entry_point_gets_traefiks_http_on_port_80() -> None:
    """Traefik's SetEffectiveConfiguration: no entry point defined, ``http`` on ``:80``
    (before ``traefik`` is added for api.insecure), and the commands are told so."""
    for static in (decode_static(None), decode_static({}), decode_static({"log": {}})):
        assert list(static.entry_points) == ["http"]
        assert static.entry_points["http"].address == ":80"
        assert static.default_entry_point_added
    with_api = decode_static({"api": {"insecure": True}})
    assert sorted(with_api.entry_points) == ["http", "traefik"]
    written = decode_static({"entryPoints": {"http": {"address": ":80"}}})
    assert not written.default_entry_point_added


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (":80", ":80"),
        (":80", "127.0.0.1:80"),
        (":80", "[::1]:80"),
        ("0.0.0.0:80", "10.1.2.3:80"),
        ("[::]:80", "[::1]:80"),
        ("[0:0::1]:80", "[::1]:80"),
        (":53/udp", "127.0.0.1:53/udp"),
        ("localhost:80", "LOCALHOST:80"),
    ],
)
def test_two_entry_points_on_one_address_are_an_error_naming_both(a: str, b: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_static({"entryPoints": {"one": {"address": a}, "two": {"address": b}}})
    message = info.value.message
    assert "'one'" in message and "'two'" in message and a in message and b in message


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (":80", ":80/udp"),  # TCP and UDP are separate
        ("127.0.0.1:80", "127.0.0.2:80"),
        ("0.0.0.0:80", "[::]:80"),  # edge binds IPv6 sockets v6-only
        ("127.0.0.1:0", "127.0.0.1:0"),  # each gets its own port
        (":80", ":81"),
    ],
)
def test_entry_points_on_distinct_addresses(a: str, b: str) -> None:
    decode_static({"entryPoints": {"one": {"address": a}, "two": {"address": b}}})


def test_added_traefik_entry_point_collides_with_one_written() -> None:
    with pytest.raises(ConfigError) as info:
        decode_static({"entryPoints": {"web": {"address": ":8080"}}, "api": {"insecure": True}})
    assert "'web'" in info.value.message and "'traefik'" in info.value.message


def test_static_servers_transports_are_the_defaults_validation_applies() -> None:
    static = decode_static(
        {
            "entryPoints": {"web": {"address": ":80"}},
            "serversTransport": {
                "insecureSkipVerify": True,
                "rootCAs": ["ca.pem"],
                "maxIdleConnsPerHost": 7,
                "forwardingTimeouts": {"dialTimeout": "2s", "responseHeaderTimeout": "5s"},
            },
            "tcpServersTransport": {
                "dialTimeout": "3s",
                "dialKeepAlive": "-1s",
                "terminationDelay": "50ms",
                "tls": {"insecureSkipVerify": True},
            },
            "api": {},
        }
    )
    defaults = static.entry_point_protocols()["web"].defaults  # type: ignore[attr-defined]
    http = defaults.servers_transport
    assert (http.insecure_skip_verify, http.root_cas, http.max_idle_conns_per_host) == (
        True,
        ["ca.pem"],
        7,
    )
    assert http.forwarding_timeouts.dial_timeout == 2.0
    assert http.forwarding_timeouts.response_header_timeout == 5.0
    tcp = defaults.tcp_servers_transport
    assert (tcp.dial_timeout, tcp.dial_keep_alive, tcp.termination_delay) == (3.0, -1.0, 0.05)
    assert tcp.tls is not None and tcp.tls.insecure_skip_verify
    assert defaults.api
    plain = decode_static({}).entry_point_protocols()["http"].defaults  # type: ignore[attr-defined]
    assert not plain.api and plain.servers_transport.max_idle_conns_per_host == 200


@pytest.mark.parametrize(
    ("obj", "path", "words"),
    [
        ({"serversTransport": {"spiffe": {"ids": ["x"]}}}, "$.serversTransport", "spiffe"),
        (
            {"tcpServersTransport": {"tls": {"spiffe": {}}}},
            "$.tcpServersTransport.tls",
            "spiffe",
        ),
        ({"serversTransport": {"serverName": "a"}}, "$.serversTransport.serverName", "unknown"),
    ],
)
def test_static_servers_transport_refusals_name_the_key(obj, path: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(obj)
    assert info.value.path == path and words in info.value.message


def test_entry_point_kinds_keep_the_defaults_through_pickle() -> None:
    import pickle

    static = decode_static({"serversTransport": {"insecureSkipVerify": True}, "api": {}})
    kind = static.entry_point_protocols()["http"]
    copy = pickle.loads(pickle.dumps(kind))
    assert copy == "tcp" and copy.defaults == kind.defaults  # type: ignore[attr-defined]
    assert copy.defaults.servers_transport.insecure_skip_verify  # type: ignore[attr-defined]
    assert copy.defaults != decode_static({}).entry_point_protocols()["http"].defaults  # type: ignore[attr-defined]


def test_entry_point_options_a_traefik_user_writes_decode() -> None:
    static = decode_static(
        {
            "entryPoints": {
                "web": {"address": ":80", "asDefault": True, "reusePort": True},
                "admin": {
                    "address": ":8081",
                    "http": {"middlewares": ["auth@file", "strip"]},
                },
            }
        }
    )
    web, admin = static.entry_points["web"], static.entry_points["admin"]
    assert (web.as_default, web.reuse_port, web.http.middlewares) == (True, True, [])
    assert (admin.as_default, admin.reuse_port) == (False, False)
    assert admin.http.middlewares == ["auth@file", "strip"]


@pytest.mark.parametrize("name", ["", " ", "@file", "auth@"])
def test_an_entry_point_middleware_that_names_nothing_is_an_error_naming_it(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_static(
            {"entryPoints": {"web": {"address": ":80", "http": {"middlewares": ["ok", name]}}}}
        )
    assert info.value.path == "$.entryPoints.web.http"
    assert f"middlewares[1] {name!r}" in info.value.message


def test_entry_point_kinds_carry_middlewares_and_as_default_through_pickle() -> None:
    import pickle

    static = decode_static(
        {
            "entryPoints": {
                "web": {"address": ":80", "asDefault": True, "http": {"middlewares": ["a"]}},
                "other": {"address": ":81"},
            }
        }
    )
    kinds = static.entry_point_protocols()
    copy = pickle.loads(pickle.dumps(kinds["web"]))
    assert copy == "tcp"
    assert (copy.http_middlewares, copy.as_default) == (("a",), True)  # type: ignore[attr-defined]
    assert (kinds["other"].http_middlewares, kinds["other"].as_default) == ((), False)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("a", "b"), [(":80", ":80"), (":80", "127.0.0.1:80"), (":53/udp", ":53/udp")]
)
def test_two_entry_points_on_one_address_both_with_reuse_port_bind_it(a: str, b: str) -> None:
    shared = {"one": {"address": a, "reusePort": True}, "two": {"address": b, "reusePort": True}}
    assert set(decode_static({"entryPoints": shared}).entry_points) == {"one", "two"}
    # one of the two without it: the kernel would refuse the second bind, so edge does first
    shared["two"]["reusePort"] = False
    with pytest.raises(ConfigError) as info:
        decode_static({"entryPoints": shared})
    assert "'one'" in info.value.message and "'two'" in info.value.message


def test_entry_point_observability_decodes_every_traefik_key() -> None:
    """``entryPoints.<n>.observability``: all four of Traefik's keys, each true (minimal)
    when left out."""
    static = decode_static(
        {
            "entryPoints": {
                "quiet": {
                    "address": ":81",
                    "observability": {
                        "accessLogs": False,
                        "metrics": False,
                        "tracing": False,
                        "traceVerbosity": "detailed",
                    },
                },
                "web": {"address": ":80"},
            }
        }
    )
    quiet = static.entry_points["quiet"].observability
    web = static.entry_points["web"].observability
    assert (quiet.access_logs, quiet.metrics, quiet.tracing, quiet.trace_verbosity) == (
        False,
        False,
        False,
        "detailed",
    )
    assert (web.access_logs, web.metrics, web.tracing, web.trace_verbosity) == (
        True,
        True,
        True,
        "minimal",
    )
