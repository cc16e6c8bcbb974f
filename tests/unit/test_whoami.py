"""edge/whoami.py: the echo modes and the refusal of an address it cannot bind.

``serve`` runs in this process on real loopback sockets (port 0) and real clients talk
to it: the TLS echo presents the certificate it was given and echoes inside TLS; the
TCP and UDP echoes send back what they get. A busy address is a ``ListenError`` naming
it, and what was bound before it is released. Both command lines (``edge whoami`` and
``python -m edge.whoami``) print that as one line and exit 1, without a traceback.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import socket
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from edge.errors import ConfigError
from edge.whoami import Bound, ListenError, serve, server_context
from tests.fixtures.tls.pki import PKI
from tests.harness import ROOT

TIMEOUT = 10.0
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")


def run_with_whoami(check: Callable[[Bound], Awaitable[None]], **serve_args) -> None:
    """Start ``serve`` with ``serve_args``, run ``check`` on the bound addresses, stop it."""

    async def main() -> None:
        bound: asyncio.Future[Bound] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve(ready=bound.set_result, **serve_args))
        try:
            await asyncio.wait_for(asyncio.shield(bound), TIMEOUT)
            await asyncio.wait_for(check(bound.result()), TIMEOUT)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[str, str, str]:
    """A server certificate and key on disk, and the certificate's SHA-256 fingerprint."""
    pair = PKI().issue("echo.example.test")
    cert, key = pair.write(tmp_path_factory.mktemp("whoami"), "echo")
    return cert, key, pair.fingerprint


def busy_tcp_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def test_tls_echo_presents_its_certificate_and_echoes(tls_files):
    cert, key, fingerprint = tls_files
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE

    async def check(bound: Bound) -> None:
        assert bound["tls"] and not bound["http"]
        host, port = bound["tls"][0]
        for message in (b"hello\n", b"x" * 100_000):  # one record, then many
            reader, writer = await asyncio.open_connection(
                host, port, ssl=client, server_hostname="echo.example.test"
            )
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            assert hashlib.sha256(der).hexdigest() == fingerprint
            writer.write(message)
            assert await reader.readexactly(len(message)) == message
            writer.close()

    run_with_whoami(
        check,
        name="echo",
        http=[],
        tcp=[],
        udp=[],
        tls=["127.0.0.1:0"],
        tls_context=server_context(cert, key),
    )


def test_tcp_and_udp_echo():
    async def check(bound: Bound) -> None:
        reader, writer = await asyncio.open_connection(*bound["tcp"][0])
        writer.write(b"ping\n")
        assert await reader.readexactly(5) == b"ping\n"
        writer.write_eof()
        assert await reader.read() == b""  # half-close passed on
        writer.close()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.setblocking(False)
            udp.connect(bound["udp"][0])
            loop = asyncio.get_running_loop()
            await loop.sock_sendall(udp, b"datagram")
            assert await loop.sock_recv(udp, 100) == b"datagram"

    run_with_whoami(check, name="echo", http=[], tcp=["127.0.0.1:0"], udp=["127.0.0.1:0"])


def test_tls_without_a_certificate_is_refused():
    with pytest.raises(ConfigError, match="needs a certificate"):
        asyncio.run(serve("echo", [], [], [], tls=["127.0.0.1:0"]))


def test_unreadable_certificate_names_the_files(tmp_path):
    missing = str(tmp_path / "none.crt")
    with pytest.raises(ConfigError, match=re.escape(missing)):
        server_context(missing, str(tmp_path / "none.key"))


def test_busy_port_is_a_listen_error_and_releases_what_was_bound():
    taken, busy = busy_tcp_port()
    with taken, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
        probe.close()  # a free port, bound by whoami first, then released
        with pytest.raises(ListenError) as caught:
            asyncio.run(serve("web", [f"127.0.0.1:{first}", f"127.0.0.1:{busy}"], [], []))
    message = str(caught.value)
    assert (
        message == f"whoami web: cannot listen on 127.0.0.1:{busy} (http): address already in use"
    )
    with socket.socket() as again:  # the first listener was closed on the way out
        again.bind(("127.0.0.1", first))


@pytest.mark.parametrize(
    "command",
    [["-m", "edge", "whoami", "--name", "web"], ["-m", "edge.whoami", "--name", "web"]],
    ids=["edge whoami", "python -m edge.whoami"],
)
@pytest.mark.parametrize("kind", ["http", "udp"])
def test_command_line_on_a_busy_port_prints_one_line_and_exits_1(command, kind):
    if kind == "http":
        taken, port = busy_tcp_port()
    else:
        taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    with taken:
        done = subprocess.run(
            [sys.executable, *command, f"--{kind}", f"127.0.0.1:{port}"],
            cwd=Path(ROOT),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if not LOG_RECORD.match(line)]
    assert said == [
        f"edge: whoami web: cannot listen on 127.0.0.1:{port} ({kind}): address already in use"
    ], done.stderr
    assert done.stdout == ""
