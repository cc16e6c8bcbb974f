"""The dynamic configuration's models (edge.config.dynamic): every section, defaults,
values refused with the key path that holds them.

Middleware values written into heads as they are (header edits, addPrefix,
redirectScheme's scheme) are refused when they could write a line of their own: the
HTTP smuggling review (issue 12 item 4). A middleware's values are judged by
validation (``Middleware.check``): a bad one disables that middleware, not the file.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from edge.config.durations import enc_hook
from edge.config.dynamic import Configuration, UDPLoadBalancer, split_host_port
from edge.config.loader import decode_dynamic, load_dynamic
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.errors import ConfigError
from tests.unit.config.documents import EPS
from tests.unit.router.test_udp import udp


@pytest.mark.parametrize(
    ("middleware", "error"),
    [
        (
            {"headers": {"customRequestHeaders": {"X-A": "1\r\nTransfer-Encoding: chunked"}}},
            "may not hold CR, LF",
        ),
        ({"headers": {"customRequestHeaders": {"X-A": "1\nHost: evil"}}}, "may not hold CR, LF"),
        (
            {"headers": {"customResponseHeaders": {"X-A": "1\r\n\r\n<script>"}}},
            "may not hold CR, LF",
        ),
        ({"headers": {"customResponseHeaders": {"X-A": "a\x00b"}}}, "may not hold CR, LF"),
        ({"headers": {"customRequestHeaders": {"X A": "1"}}}, "invalid header name"),
        ({"headers": {"customRequestHeaders": {"X-A:": "1"}}}, "invalid header name"),
        ({"headers": {"customRequestHeaders": {"": "1"}}}, "invalid header name"),
        ({"addPrefix": {"prefix": "/v1 HTTP/1.1\r\nX-A: 1"}}, "whitespace or a control"),
        ({"addPrefix": {"prefix": "/v1\t"}}, "whitespace or a control"),
        ({"redirectScheme": {"scheme": "https\r\nSet-Cookie: a=b"}}, "invalid scheme"),
        ({"redirectScheme": {"scheme": "https://evil"}}, "invalid scheme"),
    ],
)
def test_middleware_that_would_write_a_line_of_its_own_is_refused(middleware, error):
    # Header edits, addPrefix and redirectScheme's scheme are written into heads as
    # they are: a CR or LF in one was a header, or a request, of the configuration's
    # own on every request through the route (Transfer-Encoding: chunked upstream
    # with no chunked body: a desync). Refused, naming the key: the configuration
    # decodes, and validation disables that middleware and the routers using it
    # (Traefik's Go server and client never write such a line).
    conf = decode_dynamic({"http": {"middlewares": {"m": middleware}}})
    [problem] = conf.http.middlewares["m"].check()
    assert error in problem
    assert problem.startswith(f"{next(iter(middleware))}.")
    rt = build_runtime(
        merge(
            {
                "file": decode_dynamic(
                    {
                        "http": {
                            "routers": {
                                "r": {"rule": "Host(`a`)", "service": "s", "middlewares": ["m"]}
                            },
                            "services": {
                                "s": {"loadBalancer": {"servers": [{"url": "http://a:1"}]}}
                            },
                            "middlewares": {"m": middleware},
                        }
                    }
                )
            }
        ),
        EPS,
    )
    assert rt.http_middlewares["m@file"].status == "disabled"
    assert rt.http_middlewares["m@file"].errors == [problem]
    assert rt.http_routers["r@file"].status == "disabled"


def test_middleware_values_edge_writes_as_they_are():
    conf = decode_dynamic(
        {
            "http": {
                "middlewares": {
                    "h": {
                        "headers": {"customRequestHeaders": {"X-A": "caf\u00e9 \tok", "X-B": ""}}
                    },
                    "p": {"addPrefix": {"prefix": "/v1/%20x"}},
                    "r": {"redirectScheme": {"scheme": "svn+ssh.x-1"}},
                }
            }
        }
    )
    assert conf.http.middlewares["h"].headers.custom_request_headers == {
        "X-A": "caf\u00e9 \tok",
        "X-B": "",
    }


def test_split_host_port() -> None:
    assert split_host_port("svc.ns:53") == ("svc.ns", 53)
    with pytest.raises(ValueError):
        split_host_port("svc.ns")


DYNAMIC_YAML = """
http:
  routers:
    whoami:
      rule: Host(`whoami.localhost`)
      service: whoami
      entryPoints: [web, websecure]
      priority: 10
      middlewares: [strip, add, hdr, redirect@other]
      tls:
        certResolver: le
        options: modern
        domains:
          - main: example.com
            sans: [www.example.com]
  services:
    whoami:
      loadBalancer:
        servers:
          - url: http://127.0.0.1:9001
          - url: https://[::1]:9002
            weight: 0
        passHostHeader: false
        serversTransport: slow
    split:
      weighted:
        services:
          - name: whoami
            weight: 3
          - name: other@k8s
  middlewares:
    strip:
      stripPrefix:
        prefixes: [/api]
    add:
      addPrefix:
        prefix: /v1
    hdr:
      headers:
        customRequestHeaders: {X-Env: test, X-Remove: ""}
        customResponseHeaders: {Server: ""}
    redirect:
      redirectScheme:
        scheme: https
        port: "8443"
        permanent: true
  serversTransports:
    slow:
      serverName: backend.internal
      insecureSkipVerify: true
      rootCAs: [/etc/ca.pem]
      maxIdleConnsPerHost: 10
      forwardingTimeouts:
        dialTimeout: 1s
        responseHeaderTimeout: 30s
        idleConnTimeout: 5m
tcp:
  routers:
    pg:
      rule: HostSNI(`pg.example.com`)
      service: pg
      entryPoints: [websecure]
      tls:
        passthrough: true
  services:
    pg:
      loadBalancer:
        servers:
          - address: 10.0.0.5:5432
        serversTransport: tcp-slow
        proxyProtocol:
          version: 1
    both:
      weighted:
        services: [{name: pg, weight: 2}]
  serversTransports:
    tcp-slow:
      dialTimeout: 2s
      terminationDelay: 50ms
      tls:
        serverName: pg.internal
udp:
  routers:
    dns:
      service: dns
      entryPoints: [dns]
  services:
    dns:
      loadBalancer:
        servers:
          - address: 1.1.1.1:53
    dns2:
      weighted:
        services: [{name: dns}]
tls:
  certificates:
    - certFile: /certs/a.crt
      keyFile: /certs/a.key
      stores: [default]
  options:
    modern:
      minVersion: VersionTLS13
      sniStrict: true
      alpnProtocols: [http/1.1]
      cipherSuites: [TLS_AES_128_GCM_SHA256]
  stores:
    default:
      defaultCertificate:
        certFile: /certs/d.crt
        keyFile: /certs/d.key
"""


def test_dynamic_every_section(tmp_path) -> None:
    path = tmp_path / "dyn.yml"
    path.write_text(DYNAMIC_YAML)
    conf = load_dynamic(path)
    assert conf.http is not None and conf.tcp is not None
    assert conf.udp is not None and conf.tls is not None
    router = conf.http.routers["whoami"]
    assert router.entry_points == ["web", "websecure"]
    assert router.priority == 10
    assert router.middlewares == ["strip", "add", "hdr", "redirect@other"]
    assert router.tls is not None and router.tls.options == "modern"
    assert router.tls.domains[0].sans == ["www.example.com"]
    lb = conf.http.services["whoami"].load_balancer
    assert lb is not None
    assert [(s.url, s.weight) for s in lb.servers] == [
        ("http://127.0.0.1:9001", 1),
        ("https://[::1]:9002", 0),
    ]
    assert lb.pass_host_header is False and lb.servers_transport == "slow"
    weighted = conf.http.services["split"].weighted
    assert weighted is not None and [(w.name, w.weight) for w in weighted.services] == [
        ("whoami", 3),
        ("other@k8s", 1),
    ]
    mws = conf.http.middlewares
    assert mws["strip"].strip_prefix is not None and mws["strip"].kind == "stripPrefix"
    assert mws["add"].add_prefix is not None and mws["add"].add_prefix.prefix == "/v1"
    assert mws["hdr"].headers is not None
    assert mws["hdr"].headers.custom_request_headers == {"X-Env": "test", "X-Remove": ""}
    rs = mws["redirect"].redirect_scheme
    assert rs is not None and (rs.scheme, rs.port, rs.permanent) == ("https", "8443", True)
    st = conf.http.servers_transports["slow"]
    assert st.server_name == "backend.internal" and st.insecure_skip_verify
    assert st.root_cas == ["/etc/ca.pem"] and st.max_idle_conns_per_host == 10
    ft = st.forwarding_timeouts
    assert (ft.dial_timeout, ft.response_header_timeout, ft.idle_conn_timeout) == (1, 30, 300)

    pg = conf.tcp.services["pg"].load_balancer
    assert pg is not None and pg.servers[0].address == "10.0.0.5:5432"
    assert pg.proxy_protocol is not None and pg.proxy_protocol.version == 1
    assert conf.tcp.routers["pg"].tls is not None and conf.tcp.routers["pg"].tls.passthrough
    tt = conf.tcp.servers_transports["tcp-slow"]
    assert (tt.dial_timeout, tt.termination_delay) == (2.0, 0.05)
    assert tt.tls is not None and tt.tls.server_name == "pg.internal"

    assert conf.udp.routers["dns"].service == "dns"
    udp_lb = conf.udp.services["dns"].load_balancer
    assert udp_lb is not None and udp_lb.servers[0].address == "1.1.1.1:53"

    assert conf.tls.certificates[0].stores == ["default"]
    opts = conf.tls.options["modern"]
    assert opts.min_version == "VersionTLS13" and opts.sni_strict
    store = conf.tls.stores["default"].default_certificate
    assert store is not None and store.cert_file == "/certs/d.crt"


def test_dynamic_defaults() -> None:
    conf = decode_dynamic(
        {
            "http": {
                "routers": {"r": {"rule": "Path(`/`)", "service": "s"}},
                "services": {"s": {"loadBalancer": {"servers": [{"url": "http://a"}]}}},
                "serversTransports": {"t": {}},
            },
            "tls": {"options": {"o": {}}},
        }
    )
    assert conf.http is not None and conf.tls is not None
    r = conf.http.routers["r"]
    assert (r.entry_points, r.priority, r.middlewares, r.tls) == ([], 0, [], None)
    lb = conf.http.services["s"].load_balancer
    assert lb is not None and lb.pass_host_header and lb.servers_transport == ""
    assert lb.servers[0].weight == 1
    st = conf.http.servers_transports["t"]
    assert st.max_idle_conns_per_host == 200
    ft = st.forwarding_timeouts
    assert (ft.dial_timeout, ft.response_header_timeout, ft.idle_conn_timeout) == (30, 0, 90)
    assert conf.tls.options["o"].min_version == "VersionTLS12"


def test_dynamic_round_trips_through_builtins(tmp_path) -> None:
    conf = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    dumped = msgspec.to_builtins(conf, enc_hook=enc_hook)
    json.dumps(dumped)  # JSON-able
    assert decode_dynamic(dumped) == conf


def test_configurations_compare_by_value() -> None:
    a = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    b = decode_dynamic(msgspec.yaml.decode(DYNAMIC_YAML))
    assert a == b and a is not b
    assert a != Configuration()


@pytest.mark.parametrize(
    ("obj", "path", "message"),
    [
        (
            {"http": {"routers": {"r": {"rule": "x", "service": "s", "entryPointz": []}}}},
            "$.http.routers.r.entryPointz",
            "unknown key",
        ),
        (
            {"http": {"routers": {"r": {"rule": "x"}}}},
            "$.http.routers.r.service",
            "missing required key",
        ),
        (
            {"http": {"services": {"s": {}}}},
            "$.http.services.s",
            "exactly one of: loadBalancer, weighted",
        ),
        (
            {"http": {"services": {"s": {"loadBalancer": {}, "weighted": {}}}}},
            "$.http.services.s",
            "exactly one of",
        ),
        (
            {
                "http": {
                    "services": {
                        "ok": {"loadBalancer": {}},
                        "s": {
                            "loadBalancer": {"servers": [{"url": "http://a"}, {"url": "ftp://b"}]}
                        },
                    }
                }
            },
            "$.http.services.s.loadBalancer.servers[1]",
            "scheme must be http, https or h2c",
        ),
        (
            {"http": {"services": {"s": {"loadBalancer": {"servers": [{"url": "http://"}]}}}}},
            "$.http.services.s.loadBalancer.servers[0]",
            "no host",
        ),
        (
            {
                "http": {
                    "services": {
                        "s": {"loadBalancer": {"servers": [{"url": "http://a", "weight": -1}]}}
                    }
                }
            },
            "$.http.services.s.loadBalancer.servers[0].weight",
            "expected int >= 0",
        ),
        ({"http": {"middlewares": {"m": {}}}}, "$.http.middlewares.m", "exactly one of"),
        (
            {"http": {"middlewares": {"m": {"stripPrefix": {}, "addPrefix": {"prefix": "/"}}}}},
            "$.http.middlewares.m",
            "found stripPrefix, addPrefix",
        ),
        (
            {
                "http": {"middlewares": {"m": {"basicAuthh": {}}}}
            },  # basicAuth itself: "not supported" (issue 13)
            "$.http.middlewares.m.basicAuthh",
            "unknown key",
        ),
        (
            {"http": {"routers": {"a@b": {"rule": "x", "service": "s"}}}},
            '$.http.routers["a@b"]',
            "must not contain '@'",
        ),
        (
            {"tcp": {"services": {"s": {"loadBalancer": {"servers": [{"address": "db"}]}}}}},
            "$.tcp.services.s.loadBalancer.servers[0]",
            "invalid address 'db'",
        ),
        (
            {"tcp": {"services": {"s": {"loadBalancer": {"proxyProtocol": {"version": 3}}}}}},
            "$.tcp.services.s.loadBalancer.proxyProtocol.version",
            "invalid value 3",
        ),
        (
            {"udp": {"services": {"s": {"loadBalancer": {"servers": [{"address": ":53"}]}}}}},
            "$.udp.services.s.loadBalancer.servers[0]",
            "expected host:port",
        ),
        (
            {"tls": {"options": {"o": {"minVersion": "TLS1.2"}}}},
            "$.tls.options.o.minVersion",
            "VersionTLS12",
        ),
        (
            {"tls": {"certificates": [{"certFile": "a"}]}},
            "$.tls.certificates[0].keyFile",
            "missing required key",
        ),
        (
            {"http": {"serversTransports": {"t": {"forwardingTimeouts": {"dialTimeout": "fast"}}}}},
            "$.http.serversTransports.t.forwardingTimeouts.dialTimeout",
            "invalid duration 'fast'",
        ),
        (
            {"http": {"routers": {"my router": {"rule": 1, "service": "s"}}}},
            '$.http.routers["my router"].rule',
            "expected str, got int",
        ),
    ],
)
def test_dynamic_errors_name_the_key_path(obj: object, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        decode_dynamic(obj)
    assert info.value.path == path
    assert message in info.value.message


def test_is_empty() -> None:
    assert Configuration().is_empty()
    assert decode_dynamic({"http": {"routers": {}}, "tls": {"certificates": []}}).is_empty()
    assert not decode_dynamic(
        {"tls": {"certificates": [{"certFile": "a", "keyFile": "b"}]}}
    ).is_empty()


def test_proxy_protocol_version_1_is_refused_for_udp():
    with pytest.raises(Exception, match="version 2"):
        decode_dynamic(udp({}, {}, {"pp": {"proxyProtocol": {"version": 1}}}))


def test_session_timeout_must_be_positive():
    with pytest.raises(msgspec.ValidationError, match="sessionTimeout"):
        msgspec.convert({"sessionTimeout": 0}, UDPLoadBalancer, dec_hook=_dec)


def _dec(type_, obj):
    from edge.config.durations import dec_hook

    return dec_hook(type_, obj)


def test_an_element_with_problems_needs_no_kind() -> None:
    """A stand-in for an element that did not decode (``problems``) is disabled by them,
    so it has no kind to invent; without problems exactly one kind is still required."""
    from edge.config import dynamic as dyn

    for cls in (dyn.Service, dyn.TCPService, dyn.UDPService, dyn.Middleware, dyn.TCPMiddleware):
        assert cls(problems=["$.x: unknown key"]).problems == ["$.x: unknown key"]
        with pytest.raises(ValueError, match="exactly one of"):
            cls()


def test_grpc_web_is_refused_saying_it_needs_http2_to_the_server():
    """Traefik's grpcWeb is read (so the API shows it) and refused by its own check,
    whose reason says why: gRPC goes to the server over HTTP/2. Its router is
    disabled; the rest serves."""
    doc = {
        "http": {
            "routers": {
                "grpc": {"rule": "Host(`g`)", "service": "s", "middlewares": ["gw"]},
                "plain": {"rule": "Host(`p`)", "service": "s"},
            },
            "middlewares": {"gw": {"grpcWeb": {"allowOrigins": ["*"]}}},
            "services": {"s": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:1"}]}}},
        }
    }
    conf = decode_dynamic(doc, source="d.json")
    rt = build_runtime(merge({"file": conf}), EPS)
    info = rt.http_middlewares["gw@file"]
    assert info.status == "disabled"
    assert info.errors == [
        "grpcWeb: not supported by this version of edge: it turns gRPC-Web into gRPC,"
        " which needs HTTP/2 to the server"
    ]
    assert rt.http_routers["grpc@file"].status == "disabled"
    assert rt.http_routers["plain@file"].status == "enabled"


def test_router_observability_decodes_and_leaves_unset_fields_to_the_entry_point() -> None:
    """Traefik's ``http.routers.<n>.observability``: each field set is the router's,
    each left out (None, ``""``) the entry point's; a verbosity Traefik lacks is refused
    with its key path."""
    doc = {
        "http": {
            "routers": {
                "quiet": {
                    "rule": "Host(`a`)",
                    "service": "s",
                    "observability": {"accessLogs": False, "traceVerbosity": "detailed"},
                },
                "plain": {"rule": "Host(`b`)", "service": "s"},
            }
        }
    }
    routers = decode_dynamic(doc).http.routers
    quiet = routers["quiet"].observability
    assert quiet is not None
    assert (quiet.access_logs, quiet.metrics, quiet.tracing, quiet.trace_verbosity) == (
        False,
        None,
        None,
        "detailed",
    )
    assert routers["plain"].observability is None
    doc["http"]["routers"]["quiet"]["observability"] = {"traceVerbosity": "loud"}
    with pytest.raises(ConfigError) as info:
        decode_dynamic(doc)
    assert "$.http.routers.quiet.observability.traceVerbosity" in str(info.value)
