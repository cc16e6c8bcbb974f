"""A Traefik user's configuration, as `edge check` and `edge run` take it: each option edge
lacks named as unsupported with its key path, the rest checked and, where nothing asks
for what edge lacks, served."""

from __future__ import annotations

import socket
import ssl
import string
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.harness import LISTEN_RE, ROOT, Edge, Proc, get, lb, read_until_closed

TRAEFIK_STATIC = {
    "entryPoints": {"web": {"address": "127.0.0.1:0"}},
    "api": {"debug": True},
    "tracing": {"otlp": {"grpc": {}}},
    "providers": {"file": {"filename": "dynamic.yaml"}, "docker": {"exposedByDefault": False}},
}


def traefik_dynamic(backend: str) -> dict:
    return {
        "http": {
            "routers": {
                "dashboard": {
                    "rule": "Host(`admin.test`)",
                    "service": "app",
                    "middlewares": ["auth"],
                },
                "app": {"rule": "Host(`app.test`)", "service": "app", "middlewares": ["limit"]},
                "sticky": {"rule": "Host(`sticky.test`)", "service": "sticky"},
                "site": {"rule": "Host(`site.test`)", "service": "app"},
                "typo": {"rule": "Host(`typo.test`) && Pth(`/`)", "service": "app"},
            },
            "middlewares": {
                "auth": {"basicAuth": {"users": ["admin:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/"]}},
                "limit": {"stripPrefix": {"prefixes": ["/api"], "forceSlash": True}},
            },
            "services": {
                "app": lb(backend),
                "sticky": lb(
                    backend,
                    sticky={"cookie": {"name": "lb"}},
                    responseForwarding={"flushInterval": "1s"},
                ),
                "mirror": {
                    "mirroring": {"service": "app", "mirrors": [{"name": "app", "percent": 10}]}
                },
            },
        },
        "tls": {"stores": {"default": {"defaultGeneratedCert": {"resolver": "le"}}}},
    }


def check(tmp_path: Path, static: dict, dynamic: dict) -> subprocess.CompletedProcess[str]:
    (tmp_path / "dynamic.yaml").write_text(yaml.safe_dump(dynamic))
    (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
    return subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", str(tmp_path / "edge.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_names_each_unsupported_option_and_checks_the_rest(tmp_path):
    out = check(tmp_path, TRAEFIK_STATIC, traefik_dynamic("http://127.0.0.1:1"))
    lines = out.stdout.splitlines()
    nope = "not supported by this version of edge"
    dyn = str(tmp_path / "dynamic.yaml")
    for line in [
        f"static configuration: {tmp_path / 'edge.yaml'}: $.api.debug: {nope} (ignored)",
        f"static configuration: {tmp_path / 'edge.yaml'}: $.tracing.otlp.grpc: {nope} (ignored)",
        f"static configuration: {tmp_path / 'edge.yaml'}: $.providers.docker: {nope} (ignored)",
        f"dynamic configuration: {dyn}: $.tls.stores.default.defaultGeneratedCert: {nope} (ignored)",
        "middleware auth@file: enabled",  # basicAuth, as Traefik serves it
        f"middleware limit@file: disabled: $.http.middlewares.limit.stripPrefix.forceSlash: {nope}",
        # mirroring, sticky cookies and responseForwarding, as Traefik serves them
        "service mirror@file: enabled",
        "service sticky@file: enabled",
        "router sticky@file: enabled",
        "router site@file: enabled",
        "router dashboard@file: enabled",
    ]:
        assert line in lines, out.stdout
    assert any(line.startswith("router app@file: disabled") for line in lines), out.stdout
    # The rest is still checked: a typo in a rule is reported as one.
    typo = next(line for line in lines if line.startswith("router typo@file: disabled"))
    assert "unknown matcher 'Pth'" in typo
    assert lines[-1] == "configuration is invalid" and out.returncode == 1

    # A refused static option makes the configuration invalid, and says so.
    static = dict(
        TRAEFIK_STATIC,
        entryPoints={"web": {"address": ":80", "http": {"encodeQuerySemicolons": True}}},
    )
    out = check(
        tmp_path,
        static,
        {
            "http": {
                "routers": {"r": {"rule": "Host(`a`)", "service": "s"}},
                "services": {"s": lb("http://127.0.0.1:1")},
            }
        },
    )
    assert (
        f"static configuration: {tmp_path / 'edge.yaml'}: $.entryPoints.web.http.encodeQuerySemicolons: {nope} (refused)"
        in out.stdout
    )
    assert "router r@file: enabled" in out.stdout and out.returncode == 1


def test_run_serves_what_needs_nothing_edge_lacks_and_says_what_it_ignores(tmp_path, whoami):
    dynamic = traefik_dynamic(whoami.url)
    edge = Edge(
        tmp_path, dynamic, static_extra={"api": {"debug": True}, "tracing": {"otlp": {"grpc": {}}}}
    )
    try:
        assert get(edge.port, "/", host="site.test")[0] == 200
        assert get(edge.port, "/", host="sticky.test")[0] == 200
        assert get(edge.port, "/", host="app.test")[0] == 404  # never served without forceSlash
        assert get(edge.port, "/", host="admin.test")[0] == 401  # basicAuth asks who
        edge.wait_for(r"\$\.api\.debug: not supported by this version of edge \(ignored\)", start=0)
        edge.wait_for(
            r"\$\.tracing\.otlp\.grpc: not supported by this version of edge \(ignored\)", start=0
        )
        edge.wait_for(
            r"middleware limit@file: \$\.http\.middlewares\.limit\.stripPrefix\.forceSlash: not supported",
            start=0,
        )
    finally:
        edge.stop()


def test_run_refuses_to_start_on_a_refused_static_option(tmp_path):
    static = {
        "entryPoints": {"web": {"address": "127.0.0.1:0", "http": {"encodeQuerySemicolons": True}}},
        "certificatesResolvers": {"le": {"acme": {"email": "a@b.c"}}},
    }  # fmt: skip
    (tmp_path / "edge.yaml").write_text(yaml.safe_dump(static))
    out = subprocess.run(
        [sys.executable, "-m", "edge", "run", "--config", str(tmp_path / "edge.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "$.certificatesResolvers: not supported by this version of edge (refused)" in out.stderr
    assert (
        "$.entryPoints.web.http.encodeQuerySemicolons: not supported by this version of edge (refused)"
        in out.stderr
    )
    assert "cannot start: remove the options this version of edge does not support" in out.stderr


# --- Traefik's own fixture shapes --------------------------------------------------------
#
# tests/fixtures/traefik/ holds configurations written in the shapes of Traefik's
# integration/fixtures and reference docs (single-file layout, lower-case keys, lists
# as one string, TOML, YAML and JSON). Each is checked by `edge check` and, where
# edge has what it asks for, served by `edge run` on it. Placeholders: ${WHOAMI},
# ${WHOAMI2} (HTTP backends), ${ECHO} (TCP echo), ${UDP_ECHO}, ${CERT}, ${KEY}
# (a certificate for a.test).

FIXTURES = ROOT / "tests" / "fixtures" / "traefik"
WAIT = 15.0  # seconds a fixture's first answer may take (2 CPUs shared by many)


@dataclass(frozen=True)
class HTTP:
    """A request on ``entrypoint`` and what must come back (``body``: a substring)."""

    entrypoint: str
    path: str
    status: int
    host: str | None = None
    body: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    location: str = ""
    tls: bool = False


@dataclass(frozen=True)
class TCP:
    """Bytes sent on ``entrypoint``: echoed when ``echoed``, else the connection closes."""

    entrypoint: str
    echoed: bool = True


@dataclass(frozen=True)
class Case:
    """A fixture: the lines `edge check` prints (``{dir}``: the folder it was run in)
    and whether it says the configuration is valid; what `edge run` serves on it."""

    file: str
    features: str
    verdict: str  # served / partly / refused, and why: the table in the closing note
    lines: tuple[str, ...]
    valid: bool
    serve: tuple[HTTP | TCP, ...] = ()


NOPE = "not supported by this version of edge"
CASES = [
    Case(
        "simple-default.toml", "static only, [global]", "served (nothing to route)",
        (f"static configuration: simple-default.toml: $.global: {NOPE} (ignored)",), True,
    ),
    Case(
        "simple-web.toml", "single file, lower-case keys (entrypoints, loadbalancer), api.insecure", "served",
        ("router home@file: enabled", f"static configuration: simple-web.toml: $.log.noColor: {NOPE} (ignored)"), True,
        (HTTP("web", "/", 200, host="web.test", body='"name":"w1"'),),
    ),
    Case(
        "router-errors.toml", "routers broken each their own way: entry point, TLS options, middleware, TCP matcher", "partly: each broken router disabled with its reason",
        (
            "router fine@file: enabled",
            "router lost@file: disabled: entryPoint 'nowhere' does not exist",
            "router no-options@file: disabled: TLS options 'missing@file' do not exist",
            "router no-middleware@file: disabled: middleware 'ghost@file' does not exist",
            "tcp router wrong-matcher@file: disabled: rule 'Host(`db.test`)': column 1: matcher 'Host' is not allowed in tcp rules",
            "udp router lost@file: disabled: entryPoint 'nowhere' does not exist",
        ),
        False,
        (HTTP("web", "/", 200, host="fine.test"), HTTP("web", "/", 404, host="lost.test"), HTTP("web", "/", 404, host="mw.test")),
    ),
    Case(
        "service-errors.toml", "an empty service beside a good one", "partly: the empty service and its router disabled",
        (
            "dynamic configuration: {dir}/service-errors.toml: $.http.services.empty: a service must have exactly one of: loadBalancer, weighted, failover, mirroring, highestRandomWeight (disabled)",
            "router to-good@file: enabled",
            "router to-empty@file: disabled: service 'empty@file' is disabled: $.http.services.empty: a service must have exactly one of",
        ),
        False,
        (HTTP("web", "/", 200, host="good.test"), HTTP("web", "/", 404, host="empty.test")),
    ),
    Case(
        "tcp-service-errors.toml", "TCP: an empty service beside a good one", "partly: the empty service and its router disabled",
        ("tcp router to-good@file: enabled", "tcp router to-empty@file: disabled: service 'empty@file' is disabled: $.tcp.services.empty: a TCP service must have exactly one of"),
        False,
    ),
    Case(
        "udp-service-errors.toml", "UDP: an empty service beside a good one", "partly: the empty service and its router disabled",
        ("udp router to-good@file: enabled", "udp router to-empty@file: disabled: service 'empty@file' is disabled: $.udp.services.empty: a UDP service must have exactly one of"),
        False,
    ),
    Case(
        "wrr.toml", "weighted services as arrays of tables, services after use", "served",
        ("router split@file: enabled", "service split@file: enabled"), True,
        (HTTP("web", "/split", 200),),
    ),
    Case(
        "muxer.toml", "negated Host and QueryRegexp matchers", "served",
        ("router not-host@file: enabled", "router not-query@file: enabled"), True,
        (HTTP("byHost", "/", 200, host="public.test"), HTTP("byHost", "/", 404, host="private.test"),
         HTTP("byQuery", "/?x=1", 200), HTTP("byQuery", "/?debug=1", 404)),
    ),
    Case(
        "secure-api.toml", "api@internal behind the user's router and stripPrefix", "served",
        ("router api@file: enabled", "middleware unprefix@file: enabled"), True,
        (HTTP("web", "/secure/api/http/routers/api@file", 200, body='"status":"enabled"'),
         HTTP("web", "/api/http/routers", 404)),
    ),
    Case(
        "internal-entrypoint.toml", "a router on the internal traefik entry point", "served",
        ("router public@file: enabled", "router internal@file: enabled"), True,
        (HTTP("web", "/who", 200, body='"name":"w1"'), HTTP("traefik", "/who", 200, body='"name":"w2"')),
    ),
    Case(
        "max-header-size.toml", "entryPoints.web.http.maxHeaderBytes, a service as its servers' array", "served",
        ("router limited@file: enabled",), True,
        (HTTP("web", "/", 200, host="127.0.0.1"), HTTP("web", "/", 431, host="127.0.0.1", headers=(("X-Big", "x" * 4096),))),
    ),
    Case(
        "sanitize-path.toml", "sanitizePath false, redirectScheme, core.defaultRuleSyntax", "served",
        ("middleware to-https@file: enabled",), True,
        (HTTP("web", "/plain", 200), HTTP("web", "/upgrade", 302, host="up.test", location="https://up.test/upgrade"),
         HTTP("raw", "/plain", 200)),
    ),
    Case(
        "rule-syntax-v2.toml", "core.defaultRuleSyntax v2, a router in v3", "partly: the v3 router with a v2 list disabled",
        ("rule syntax: v2 unless a router says otherwise (core.defaultRuleSyntax)", "router two-paths@file: enabled",
         "router v3-list@file (rule syntax v3): disabled: rule 'PathPrefix(`/up`, `/down`)': column 1: PathPrefix takes exactly 1 argument, got 2"),
        False,
        (HTTP("web", "/right", 200), HTTP("web", "/up", 404)),
    ),
    Case(
        "rule-syntax-v3.toml", "a v2 list without ruleSyntax, and with ruleSyntax v2", "partly: the undeclared v2 rule disabled",
        ("router either@file: enabled", "router declared-v2@file (rule syntax v2): enabled",
         "router old-list@file: disabled: rule 'PathPrefix(`/up`, `/down`)': column 1: PathPrefix takes exactly 1 argument, got 2"),
        False,
        (HTTP("web", "/right", 200), HTTP("web", "/out", 200), HTTP("web", "/down", 404)),
    ),
    Case(
        "forwarded-headers.toml", "[entryPoints.web.ForwardedHeaders] capitalised, trustedIPs as one string", "served",
        ("router who@file: enabled",), True,
        (HTTP("web", "/", 200, headers=(("X-Forwarded-Proto", "https"),), body='"X-Forwarded-Proto":["https"]'),),
    ),
    Case(
        "custom-headers.toml", "headers.customRequestHeaders (header name case kept)", "served",
        ("middleware tag@file: enabled",), True,
        (HTTP("web", "/tagged", 200, body='"X-Edge-Fixture":["custom-value"]'),),
    ),
    Case(
        "service-middleware.toml", "middlewares written on a service", "partly: that service and its router disabled",
        ("dynamic configuration: {dir}/service-middleware.toml: $.http.services.wrapped.middlewares: unknown key (disabled)",
         "router direct@file: enabled", "router through@file: disabled: service 'wrapped@file' is disabled: $.http.services.wrapped.middlewares: unknown key"),
        False,
        (HTTP("web", "/plain", 200), HTTP("web", "/wrapped", 404)),
    ),
    Case(
        "accept-grace.toml", "transport.lifeCycle.requestAcceptGraceTimeout, [ping]", "served",
        ("router svc@file: enabled",), True,
        (HTTP("web", "/svc", 200), HTTP("traefik", "/ping", 200)),
    ),
    Case(
        "https-redirect.toml", "redirectScheme with port, stripPrefix, addPrefix, entryPoints and middlewares as strings", "served",
        ("router shop@file: enabled", "router prefixed@file: enabled", "middleware to-tls@file: enabled"), True,
        (HTTP("web", "/cart", 302, host="shop.test", location="https://shop.test:8443/cart"),
         HTTP("web", "/x", 200, host="prefixed.test", body='"path":"/v1/x"')),
    ),
    Case(
        "tls-options.toml", "TLS options by name, cipherSuites as one string, default redefined", "partly: the router naming unknown options disabled",
        ("router modern@file: enabled", "router strict@file: enabled", "router unknown@file: disabled: TLS options 'unknown@file' do not exist"),
        False,
        (HTTP("websecure", "/", 200, host="a.test", tls=True),),
    ),
    Case(
        "sni-strict.toml", "default options sniStrict, the default store's certificate", "served",
        ("router only@file: enabled",), True,
        (HTTP("websecure", "/", 200, host="a.test", tls=True), HTTP("websecure", "/", 0, host="other.test", tls=True)),
    ),
    Case(
        "entrypoint-tls.toml", "entryPoints.*.http.tls with and without options", "served",
        ("router secure@file: enabled", "router capped@file: enabled"), True,
        (HTTP("websecure", "/", 200, host="a.test", tls=True), HTTP("websecure-options", "/", 200, host="a.test", tls=True)),
    ),
    Case(
        "tcp-catch-all.toml", "TCP HostSNI(`*`) without TLS", "served",
        ("tcp router everything@file: enabled",), True,
        (TCP("tcp"),),
    ),
    Case(
        "tcp-mixed.toml", "HTTP, HTTPS and TLS passthrough on one entry point; api@internal router", "served (HTTP part checked here)",
        ("router plain@file: enabled", "router secure@file: enabled", "tcp router pass@file: enabled"), True,
        (HTTP("tcp", "/test", 200),),
    ),
    Case(
        "tcp-allowlist.toml", "TCP ipAllowList, sourceRange as one comma-separated string", "served",
        ("tcp router open@file: enabled", "tcp router closed@file: enabled"), True,
        (TCP("allowed"), TCP("blocked", echoed=False)),
    ),
    Case(
        "tcp-tls-options.toml", "TCP routers naming TLS options, clientAuth without caFiles", "partly: the router with unusable options disabled",
        ("tcp router modern@file: enabled", "tcp router no-ca@file: disabled: $.tls.options.no-ca@file: clientAuth: clientAuthType RequireAndVerifyClientCert needs caFiles"),
        False,
    ),
    Case(
        "tcp-wrr.toml", "TCP weighted services", "served",
        ("tcp router split@file: enabled", "tcp service split@file: enabled"), True,
        (TCP("tcp"),),
    ),
    Case(
        "udp-wrr.toml", "UDP weighted services, an HTTP service of the same name", "served (HTTP part checked here)",
        ("udp router datagrams@file: enabled", "udp service shared@file: enabled", "router web@file: enabled"), True,
        (HTTP("web", "/who", 200),),
    ),
    Case(
        "proxy-protocol.toml", "entryPoints.*.proxyProtocol.trustedIPs", "checked (PROXY protocol has its own tests)",
        ("router who@file: enabled",), True,
    ),
    Case(
        "directory.toml", "providers.file.directory relative to the static file", "served",
        ("router first@file: enabled", "router second@file: enabled"), True,
        (HTTP("web", "/first", 200, body='"name":"w1"'), HTTP("web", "/second", 200, body='"name":"w2"')),
    ),
    Case(
        "acme.toml", "certificatesResolvers.acme, a router's tls.certResolver", "refused: edge has no ACME",
        (f"static configuration: acme.toml: $.certificatesResolvers: {NOPE} (refused)",), False,
    ),
    Case(
        "plugin.yaml", "experimental.plugins, a plugin middleware (YAML)", "refused: edge has no plugins",
        (f"static configuration: plugin.yaml: $.experimental: {NOPE} (refused)",
         f"middleware rewrite@file: disabled: $.http.middlewares.rewrite.plugin: {NOPE}"),
        False,
    ),
    Case(
        "docs-lowercase.yaml", "docs shapes in lower case (loadbalancer, passhostheader, serverstransports), a spiffe transport", "partly: the spiffe transport's service and router disabled",
        ("router docs@file: enabled",
         f"service secured@file: disabled: serversTransport 'spiffe@file': $.http.serverstransports.spiffe.spiffe: {NOPE}"),
        False,
        (HTTP("web", "/", 200, host="docs.test", body='"host":"127.0.0.1:'), HTTP("web", "/", 404, host="spiffe.test")),
    ),
    Case(
        "one-bad-element.yaml", "a misspelt key, a missing required key, a bad server URL among good elements", "partly: the three bad elements and their routers disabled",
        (
            "dynamic configuration: {dir}/one-bad-element.yaml: $.http.routers.misspelt.sevice: unknown key (disabled)",
            "router good@file: enabled",
            "router misspelt@file: disabled: $.http.routers.misspelt.sevice: unknown key",
            "router redirect@file: disabled: middleware 'no-scheme@file' is disabled: $.http.middlewares.no-scheme.redirectScheme.scheme: missing required key",
            "router to-broken@file: disabled: service 'broken@file' is disabled: $.http.services.broken.loadBalancer.servers[0]: invalid server url 'ftp://127.0.0.1:21'",
        ),
        False,
        (HTTP("web", "/", 200, host="good.test"), HTTP("web", "/", 404, host="misspelt.test"),
         HTTP("web", "/", 404, host="broken.test"), HTTP("web", "/", 404, host="redirect.test")),
    ),
    Case(
        "access-log.json", "JSON single file, accessLog json, entryPoints as a string", "served",
        ("router logged@file: enabled",), True,
        (HTTP("web", "/logged", 200),),
    ),
    Case(
        "metrics-buckets.yaml", "metrics.prometheus.buckets as one string", "served",
        ("router measured@file: enabled",), True,
        (HTTP("web", "/measured", 200),),
    ),
]  # fmt: skip


def fixture_folder(tmp: Path, values: dict[str, str]) -> Path:
    """Every fixture written to ``tmp`` with its placeholders filled in."""
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file():
            out = tmp / path.relative_to(FIXTURES)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(string.Template(path.read_text()).safe_substitute(values))
    return tmp


@pytest.fixture(scope="module")
def traefik_fixtures(tmp_path_factory, whoami, whoami2, echo, certs) -> Path:
    cert, key = certs["files"]["a.test"]
    values = {
        "WHOAMI": whoami.url,
        "WHOAMI2": whoami2.url,
        "ECHO": f"127.0.0.1:{echo.port}",
        "UDP_ECHO": "127.0.0.1:9",
        "CERT": str(cert),
        "KEY": str(key),
    }
    return fixture_folder(tmp_path_factory.mktemp("traefik"), values)


def test_at_least_thirty_fixtures_each_with_a_case() -> None:
    files = sorted(p.name for p in FIXTURES.iterdir() if p.is_file())
    assert sorted(c.file for c in CASES) == files
    assert len(files) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_edge_check_reads_a_traefik_fixture(case: Case, traefik_fixtures: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edge", "check", "--config", case.file],
        cwd=traefik_fixtures,
        capture_output=True,
        text=True,
        timeout=60,
    )
    printed = out.stdout.splitlines()
    for line in case.lines:
        line = line.replace("{dir}", str(traefik_fixtures))
        assert any(p.startswith(line) for p in printed), (line, out.stdout, out.stderr)
    assert printed[-1] == ("configuration is valid" if case.valid else "configuration is invalid")
    assert out.returncode == (0 if case.valid else 1), out.stdout + out.stderr


SERVED = [c for c in CASES if c.serve]


@pytest.mark.parametrize("case", SERVED, ids=[c.file for c in SERVED])
def test_edge_run_serves_a_traefik_fixture(case: Case, traefik_fixtures: Path) -> None:
    edge = Proc(["run", "--config", case.file], cwd=traefik_fixtures)
    try:
        ports = listening(edge, case)
        first, *rest = case.serve
        deadline = time.monotonic() + WAIT
        while not answers(first, ports):  # the first configuration applied
            if time.monotonic() > deadline or edge.proc.poll() is not None:
                raise AssertionError(f"{first} never answered as expected:\n{edge.log}")
            time.sleep(0.1)
        for expected in rest:
            assert answers(expected, ports), (expected, edge.log)
    finally:
        edge.stop()


def listening(edge: Proc, case: Case) -> dict[str, int]:
    wanted = {s.entrypoint for s in case.serve}
    ports: dict[str, int] = {}
    deadline = time.monotonic() + WAIT
    while not wanted <= ports.keys():
        if time.monotonic() > deadline or edge.proc.poll() is not None:
            raise AssertionError(
                f"entry points {wanted - ports.keys()} never listened:\n{edge.log}"
            )
        ports.update((m.group(1), int(m.group(3))) for m in edge.all_matches(LISTEN_RE.pattern))
        time.sleep(0.05)
    return ports


def answers(expected: HTTP | TCP, ports: dict[str, int]) -> bool:
    port = ports[expected.entrypoint]
    if isinstance(expected, TCP):
        return tcp_echoes(port) == expected.echoed
    headers = dict(expected.headers)
    if expected.tls:
        status, got, body = tls_get(port, expected.path, expected.host or "a.test")
    else:
        status, got, body = get(port, expected.path, host=expected.host, headers=headers)
    if status != expected.status:
        return False
    if expected.location and got.get("Location") != expected.location:
        return False
    return expected.body in body.decode("utf-8", "replace")


def tcp_echoes(port: int) -> bool:
    """Whether a line sent on ``port`` comes back (read as soon as it has, not after 2 s
    of quiet: the echo keeps its connection open); False when the connection closes or
    is reset first, or 5 s pass."""
    line = b"hello edge\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(line)
        try:
            data = s.makefile("rb").readline(len(line) + 1)
        except OSError:
            return False
    return data == line


def tls_get(port: int, path: str, host: str) -> tuple[int, dict, bytes]:
    """GET over TLS with ``host`` as server name and Host; the certificate is not
    verified (it comes from the test CA: what is checked here is the route)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=host) as s,
        ):
            s.sendall(request.encode())
            data, _ = read_until_closed(s, timeout=5)
    except (ConnectionError, ssl.SSLError, OSError):
        return 0, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.1 "):
        return 0, {}, b""
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), headers, body
