"""Middlewares as Traefik's CRD writes them, end to end: emulator -> kubernetesCRD
provider -> edge -> real HTTP servers on 127.0.0.1, asked with curl.

An ``errors`` Middleware whose ``service`` is a Kubernetes Service reference: a failing
backend's 500 is replaced by the page Service's answer. A ``forwardAuth`` Middleware to
a purpose-built auth server: its 200 lets the request through to the backend, its 401
reaches the client; the same over TLS, the auth server's CA and edge's client
certificate read from Secrets (``tls.caSecret``, ``tls.certSecret``). Fixtures and
helpers are those of ``test_crd_provider.py`` and ``test_provider.py``; every wait is
bounded by a deadline.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge.providers.kubernetes.provider import KubernetesCRDProvider
from tests.fixtures.tls.pki import PKI
from tests.harness import need
from tests.integration.http.test_forward_auth import Peer, header
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_crd_provider import _crd, _fast, endpoints, service
from tests.integration.kubernetes.test_crd_provider import static_config as crd_static
from tests.kube.emulator import Emulator


def backend_answer(request) -> tuple[int, list, bytes, float]:
    """The application: ``/fail`` answers 500, anything else 200 ``app <target>``."""
    target = request[2]
    if target.startswith(b"/fail"):
        return 500, [(b"Content-Length", b"4")], b"boom", 0.0
    body = b"app " + target
    return 200, [(b"Content-Length", b"%d" % len(body))], body, 0.0


def page_answer(request) -> tuple[int, list, bytes, float]:
    """The error pages: 200 ``page <target>``."""
    body = b"page " + request[2]
    return 200, [(b"Content-Length", b"%d" % len(body))], body, 0.0


def auth_answer(request) -> tuple[int, list, bytes, float]:
    """The auth server: 200 for ``X-Token: good``, else 401 ``denied``."""
    if header(request[3], b"x-token") == [b"good"]:
        return 200, [(b"Content-Length", b"0")], b"", 0.0
    return 401, [(b"Content-Length", b"6"), (b"WWW-Authenticate", b"Token")], b"denied", 0.0


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def peers() -> Iterator[dict[str, Peer]]:
    made = {"app": Peer(backend_answer), "pages": Peer(page_answer), "auth": Peer(auth_answer)}
    yield made
    for peer in made.values():
        peer.stop()


def curl(port: int, host: str, path: str, *extra: str) -> tuple[int, str]:
    out = subprocess.run(
        [need("curl"), "-s", "-m", "10", "-w", "\n%{http_code}", "-H", f"Host: {host}",
         *extra, f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


def route(name: str, host: str, middleware: str) -> dict:
    return _crd(
        "IngressRoute",
        name,
        {
            "entryPoints": ["web"],
            "routes": [
                {
                    "match": f"Host(`{host}`)",
                    "kind": "Rule",
                    "middlewares": [{"name": middleware}],
                    "services": [{"name": "app", "port": 80}],
                }
            ],
        },
    )


def secret(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def crd_provider(edge: KP.InProcessEdge) -> KubernetesCRDProvider:
    assert edge.app is not None
    return next(p for p in edge.app.providers if isinstance(p, KubernetesCRDProvider))


def start(emu: Emulator) -> KP.InProcessEdge:
    edge = KP.InProcessEdge(crd_static(emu), tweak=_fast)
    edge.start()
    assert KP.until(lambda: edge.ready() == 200, 10.0), "edge never became ready"
    return edge


def test_errors_and_forward_auth_middlewares_from_the_crd(
    emu: Emulator, peers: dict[str, Peer]
) -> None:
    """An errors Middleware naming the page Service by a Service reference replaces
    the failing backend's 500 with the page's answer, keeping the status, and serves
    the backend's other answers as they are; a forwardAuth Middleware
    lets the request through on the auth server's 200 and hands its 401 to the
    client."""
    emu.create(service("app", 80))
    emu.create(endpoints("app-1", "app", peers["app"].port))
    emu.create(service("pages", 8000))
    emu.create(endpoints("pages-1", "pages", peers["pages"].port))
    emu.create(
        _crd(
            "Middleware",
            "oops",
            {
                "errors": {
                    "status": ["500-599"],
                    "query": "/{status}.html",
                    "service": {"name": "pages", "port": 8000},
                }
            },
        )
    )
    address = f"http://127.0.0.1:{peers['auth'].port}/verify"
    emu.create(_crd("Middleware", "guard", {"forwardAuth": {"address": address}}))
    emu.create(route("errors", "errors.test", "oops"))
    emu.create(route("auth", "auth.test", "guard"))
    edge = start(emu)
    try:
        port = edge.port()
        assert KP.until(lambda: curl(port, "errors.test", "/ok") == (200, "app /ok"), 10.0)
        assert curl(port, "errors.test", "/fail") == (500, "page /500.html")
        assert [r[2] for r in peers["pages"].received] == [b"/500.html"]

        assert KP.until(lambda: curl(port, "auth.test", "/in", "-H", "X-Token: good")[0] == 200)
        assert curl(port, "auth.test", "/in", "-H", "X-Token: good") == (200, "app /in")
        assert curl(port, "auth.test", "/in", "-H", "X-Token: bad") == (401, "denied")
        assert curl(port, "auth.test", "/in") == (401, "denied")
        assert [r[2] for r in peers["auth"].received] == [b"/verify"] * len(peers["auth"].received)
        provider = crd_provider(edge)
        assert provider.conversion.problems == []
        services = provider.conversion.configuration.http
        assert services is not None and "default-oops-errorpage-service" in services.services
    finally:
        KP.stop_all([edge])


def test_forward_auth_over_tls_with_secrets_from_the_crd(
    emu: Emulator, peers: dict[str, Peer], pki: PKI, tmp_path: Path
) -> None:
    """forwardAuth.tls's caSecret verifies the auth server and certSecret is the client
    certificate edge presents to it (the server requires one): 200 serves, 401 reaches
    the client; a caSecret that does not exist refuses that Middleware, naming the key,
    and its route answers 404."""
    server = pki.issue("localhost").write(tmp_path, "auth")
    client = pki.issue(cn="edge-client", client=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.write_ca(tmp_path))
    context.load_cert_chain(*server)
    context.verify_mode = ssl.CERT_REQUIRED
    auth = Peer(auth_answer, context)
    try:
        emu.create(service("app", 80))
        emu.create(endpoints("app-1", "app", peers["app"].port))
        emu.create(secret("auth-ca", {"ca.crt": pki.cert_pem}))
        emu.create(secret("edge-client", {"tls.crt": client.cert_pem, "tls.key": client.key_pem}))
        address = f"https://localhost:{auth.port}/verify"
        tls = {"caSecret": "auth-ca", "certSecret": "edge-client"}
        emu.create(_crd("Middleware", "guard", {"forwardAuth": {"address": address, "tls": tls}}))
        missing = {"address": address, "tls": {"caSecret": "nothere"}}
        emu.create(_crd("Middleware", "broken", {"forwardAuth": missing}))
        emu.create(route("auth", "auth.test", "guard"))
        emu.create(route("broken", "broken.test", "broken"))
        edge = start(emu)
        try:
            port = edge.port()
            good = ("-H", "X-Token: good")
            assert KP.until(lambda: curl(port, "auth.test", "/in", *good)[0] == 200, 10.0)
            assert curl(port, "auth.test", "/in", *good) == (200, "app /in")
            assert curl(port, "auth.test", "/in") == (401, "denied")
            subjects = [dict(rdn[0] for rdn in cert["subject"]) for cert in auth.peer_certs]
            assert subjects and all(s == {"commonName": "edge-client"} for s in subjects)
            assert curl(port, "broken.test", "/in", *good)[0] == 404
            provider = crd_provider(edge)
            reasons = [str(p) for p in provider.conversion.problems]
            assert (
                "Middleware default/broken: spec: forwardAuth.tls.caSecret: "
                "secret default/nothere not found"
            ) in reasons, reasons
        finally:
            KP.stop_all([edge])
    finally:
        auth.stop()
