"""Fixtures the integration tests share: a test CA and certificates on disk, and
the peers behind edge that several capabilities route to (a TCP echo, openssl
s_server behind TLS passthrough, nginx reading a PROXY protocol header). Scoped as
each test file had them.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import WHOAMI_RE, Proc, need
from tests.integration import peers
from tests.integration.peers import (
    free_port,
)


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def certs(tmp_path_factory, pki) -> dict:
    """Server certificates from the test CA on disk, and a backend's from another CA."""
    folder = tmp_path_factory.mktemp("tls")
    pairs = {name: pki.issue(name) for name in ("a.test", "echo.test", "good.test")}
    backend = PKI("backend CA").issue("pt.test")
    files = {name: pair.write(folder, name) for name, pair in pairs.items()}
    return {
        "ca": pki.write_ca(folder),
        "pairs": pairs,
        "files": files,
        "backend": backend,
        "backend_files": backend.write(folder, "backend"),
        "folder": folder,
    }


@pytest.fixture(scope="module")
def s_server(certs):
    """``openssl s_server -rev``: TLS with the backend CA's certificate for pt.test; echoes lines reversed."""
    crt, key = certs["backend_files"]
    p = peers.s_server(crt, key, naccept=1000)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def echo():
    """``edge whoami --tcp``: a TCP echo server."""
    p = Proc(["whoami", "--name", "echo", "--tcp", "127.0.0.1:0"])
    p.port = int(p.wait_for(WHOAMI_RE).group(4))
    yield p
    p.stop()


@pytest.fixture
def nginx_proxy_protocol(tmp_path):
    """nginx with ``listen ... proxy_protocol``: answers with the address the PROXY header gave."""
    nginx = need("nginx")
    port = free_port()
    folder = tmp_path / "nginx"
    folder.mkdir()
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""
worker_processes 1; daemon off; master_process off; pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {folder}/body; proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi; uwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;
    server {{
        listen 127.0.0.1:{port} proxy_protocol;
        location / {{ return 200 "$proxy_protocol_addr $proxy_protocol_port\n"; }}
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [nginx, "-p", str(folder), "-c", str(conf), "-e", f"{folder}/error.log"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("nginx did not start:\n" + (folder / "error.log").read_text())
    yield port
    proc.terminate()
    proc.wait(10)
