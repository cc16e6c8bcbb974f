"""A client that leaves takes its request with it; a request's every byte has a deadline.

Real edge processes between real sockets: a client that closes while its request
waits for a backend that never answers (or in the middle of its body) leaves no
socket of edge's in CLOSE-WAIT and no upstream connection behind, over plain
HTTP under both codecs and over terminated TLS; a client that only half-closed
after a complete request still gets its answer; readTimeout bounds a whole
request, its body included; a backend's malformed chunk is a 502 with a warning;
a WebSocket tunnel and a raw TCP splice whose client left let go of their
backend. Counts come from ``ss`` (edge's sockets in CLOSE-WAIT) and from the
hung backend itself (connections edge still holds to it).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import ssl
import subprocess
import threading
import time

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, Whoami, lb, need, read_until_closed

CODECS = ["httptools", "h11"]
CLIENTS = 1000


@contextlib.contextmanager
def serving(*args, **kwargs):
    edge = Edge(*args, **kwargs)
    try:
        yield edge
    finally:
        edge.stop()


class HungBackend:
    """A TCP server that accepts and reads every connection and never answers; it
    counts the connections still open from the other side."""

    def __init__(self, answer: bytes = b"", hold: bool = False) -> None:
        self.answer = answer  # written once a connection's first bytes came, then silence
        self.hold = hold  # an EOF is ignored: the connection is kept (and no longer read)
        self.held: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ)
        self.open: set[socket.socket] = set()
        self.accepted = 0
        self.received = b""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        answered: set[socket.socket] = set()
        while not self.stop.is_set():
            for key, _ in self.sel.select(0.05):
                sock = key.fileobj
                if sock is self.listener:
                    with contextlib.suppress(BlockingIOError):
                        while True:
                            conn, _ = self.listener.accept()
                            conn.setblocking(False)
                            self.sel.register(conn, selectors.EVENT_READ)
                            self.open.add(conn)
                            self.accepted += 1
                    continue
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    self.received += data[:200] if len(self.received) < 4096 else b""
                    if self.answer and sock not in answered:
                        answered.add(sock)
                        sock.send(self.answer)
                    continue
                self.sel.unregister(sock)
                self.open.discard(sock)
                answered.discard(sock)
                if self.hold:
                    self.held.append(sock)
                else:
                    sock.close()

    def wait_open(self, count: int, timeout: float) -> int:
        """Wait until at most ``count`` connections are open; the number open then."""
        deadline = time.monotonic() + timeout
        while len(self.open) > count and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.open)

    def wait_accepted(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.accepted < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.accepted >= count, f"the backend accepted {self.accepted} of {count}"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for sock in [*self.open, *self.held]:
            sock.close()
        self.listener.close()
        self.sel.close()


@pytest.fixture
def hung():
    backend = HungBackend()
    yield backend
    backend.close()


def descriptors(edge: Edge) -> int:
    return len(os.listdir(f"/proc/{edge.proc.pid}/fd"))


def wait_descriptors(edge: Edge, count: int, timeout: float) -> int:
    """Wait until edge holds at most ``count`` descriptors; the number it holds then."""
    deadline = time.monotonic() + timeout
    held = descriptors(edge)
    while held > count and time.monotonic() < deadline:
        time.sleep(0.05)
        held = descriptors(edge)
    return held


def close_wait(port: int) -> int:
    """Edge's sockets on ``port`` in CLOSE-WAIT: the client closed, edge did not."""
    out = subprocess.run(
        [need("ss"), "-Htn", "state", "close-wait", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    return len(out.splitlines())


def wait_close_wait(port: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    count = close_wait(port)
    while count and time.monotonic() < deadline:
        time.sleep(0.05)
        count = close_wait(port)
    return count


def wait_nothing_left(port: int, hung: HungBackend, timeout: float = 30.0) -> tuple[int, int]:
    """Wait until no client on ``port`` is in CLOSE-WAIT and no connection to ``hung``
    is open, both at once: the backend's count can touch 0 while clients still sit in
    edge's accept queue (in CLOSE-WAIT, not yet accepted), which a loaded machine takes
    seconds to work through. The two counts then."""
    deadline = time.monotonic() + timeout
    while ((waiting := close_wait(port)) or hung.open) and time.monotonic() < deadline:
        time.sleep(0.05)
    return waiting, len(hung.open)


def hang_routes(url: str, **router) -> dict:
    return {
        "http": {
            "routers": {"hang": {"rule": "Host(`hang.test`)", "service": "hang", **router}},
            "services": {"hang": lb(url)},
        }
    }


def connect_send_close(port: int, data: bytes, count: int) -> None:
    """``count`` clients, each connecting, sending ``data`` and closing (a full close)."""
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)


GET_HANG = b"GET /hang HTTP/1.1\r\nHost: hang.test\r\n\r\n"
PARTIAL_POST = b"POST /hang HTTP/1.1\r\nHost: hang.test\r\nContent-Length: 100\r\n\r\n0123456789"


# -- a client that leaves -------------------------------------------------------------


@pytest.mark.parametrize("parser", CODECS)
def test_clients_that_close_leave_nothing_behind(tmp_path, hung, parser):
    """1,000 clients send a request to a backend that never answers and close, then
    1,000 more that close in the middle of a request body: after each round edge holds
    none of their sockets (no CLOSE-WAIT) and no connection to the backend. Before,
    every one was held until the backend answered: for ever. Both are waited for
    together (:func:`wait_nothing_left`); how soon one client is freed is
    :func:`test_a_client_gone_is_freed_within_two_seconds`'s."""
    with serving(tmp_path, hang_routes(hung.url), parser=parser) as e:
        for request_bytes in (GET_HANG, PARTIAL_POST):
            accepted = hung.accepted
            connect_send_close(e.port, request_bytes, CLIENTS)
            hung.wait_accepted(accepted + CLIENTS // 2, timeout=20)  # the requests did reach it
            waiting, left = wait_nothing_left(e.port, hung)
            assert waiting == 0, f"{waiting} clients in CLOSE-WAIT after {request_bytes!r}"
            assert left == 0, f"{left} upstream connections still open after {request_bytes!r}"
        # ...and edge serves on.
        hung.answer = b"HTTP/1.1 204 No Content\r\n\r\n"
        reply = read_until_closed_request(
            e.port, b"GET / HTTP/1.1\r\nHost: hang.test\r\nConnection: close\r\n\r\n"
        )
        assert reply.startswith(b"HTTP/1.1 204")


def read_until_closed_request(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        return read_until_closed(s, timeout)[0]


@pytest.mark.parametrize("parser", CODECS)
def test_a_client_gone_is_freed_within_two_seconds(tmp_path, hung, parser):
    """The timing the sweep and the probe give one client: its request reached the
    backend, it closed, and within 2 s both of edge's sockets are gone; the access
    log says 499, as nginx logs a client's close."""
    log = tmp_path / "access.log"
    static = {"accessLog": {"filePath": str(log), "bufferingSize": 0}}
    with serving(tmp_path, hang_routes(hung.url), parser=parser, static_extra=static) as e:
        for request in (GET_HANG, PARTIAL_POST):
            before = hung.accepted
            with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
                s.sendall(request)
                hung.wait_accepted(before + 1, timeout=5)
            closed = time.monotonic()
            assert hung.wait_open(0, timeout=2.0) == 0
            assert wait_close_wait(e.port, timeout=0.2) == 0
            assert time.monotonic() - closed < 2.0
        deadline = time.monotonic() + 5
        while log.read_text().count('" 499 ') < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log.read_text().count('" 499 ') == 2, log.read_text()


@pytest.fixture(scope="module")
def slow():
    """A whoami that answers ``?delay=`` seconds late, for the module's half-closed clients."""
    backend = Whoami("slow")
    yield backend
    backend.stop()


@pytest.fixture(scope="module", params=CODECS)
def slow_edge(request, tmp_path_factory, slow):
    """One edge per codec routing hang.test to :func:`slow`; its tests only send requests."""
    tmp = tmp_path_factory.mktemp(f"slow-{request.param}")
    with serving(tmp, hang_routes(slow.url), parser=request.param) as e:
        yield e


@pytest.mark.parametrize("delay", ["0.1", "1.2"])
def test_a_half_closed_client_with_a_complete_request_gets_its_answer(slow_edge, delay):
    """shutdown(SHUT_WR) after a complete request is not leaving: the answer comes,
    after edge's interim 100 when it took longer than the probe's wait (1.2 s), with
    nothing before it when it was quick (0.1 s)."""
    request = f"GET /?delay={delay} HTTP/1.1\r\nHost: hang.test\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", slow_edge.port), timeout=10) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        reply, closed = read_until_closed(s, 10)
    assert closed
    final = reply
    if delay == "0.1":
        assert reply.startswith(b"HTTP/1.1 200 ")
    else:
        interim = b"HTTP/1.1 100 Continue\r\n\r\n"
        assert reply.startswith(interim), reply[:100]
        final = reply[len(interim) :]
    assert final.startswith(b"HTTP/1.1 200 ")
    assert b'"name":"slow"' in final.replace(b" ", b"")


def test_an_http10_half_closed_client_gets_its_answer_without_an_interim(slow_edge):
    """An HTTP/1.0 client may not be sent a 1xx: it is answered as it was."""
    with socket.create_connection(("127.0.0.1", slow_edge.port), timeout=10) as s:
        s.sendall(b"GET /?delay=0.8 HTTP/1.0\r\nHost: hang.test\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        reply, closed = read_until_closed(s, 10)
    assert closed and reply.startswith(b"HTTP/1.1 200 ")


# -- over TLS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cert_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    pki = PKI()
    pair = pki.issue("hang.test")
    return pair.write(folder, "hang"), pki.write_ca(folder)


def test_tls_clients_that_close_leave_nothing_behind(tmp_path, hung, cert_files):
    """The same over a terminated TLS connection: 1,000 clients finish the handshake,
    send a request to the hung backend and close the socket (no close_notify)."""
    (cert, key), ca = cert_files
    routes = hang_routes(hung.url, tls={})
    routes["tls"] = {"certificates": [{"certFile": str(cert), "keyFile": str(key)}]}
    ctx = ssl.create_default_context(cafile=str(ca))
    with serving(tmp_path, routes) as e:
        for _ in range(CLIENTS):
            with socket.create_connection(("127.0.0.1", e.port), timeout=5) as raw_sock:
                tls = ctx.wrap_socket(raw_sock, server_hostname="hang.test")
                tls.sendall(GET_HANG)
                tls.close()
        hung.wait_accepted(CLIENTS // 2, timeout=20)
        waiting, left = wait_nothing_left(e.port, hung)
        assert waiting == 0, f"{waiting} clients in CLOSE-WAIT"
        assert left == 0, f"{left} upstream connections still open"


def test_a_half_closed_tls_client_gets_its_answer(tmp_path, cert_files, slow):
    """TLS 1.3 with the client's write side shut: the answer still comes."""
    (cert, key), ca = cert_files
    routes = hang_routes(slow.url, tls={})
    routes["tls"] = {"certificates": [{"certFile": str(cert), "keyFile": str(key)}]}
    with serving(tmp_path, routes) as e:
        out = subprocess.run(
            [
                need("openssl"),
                "s_client",
                "-quiet",
                "-connect",
                f"127.0.0.1:{e.port}",
                "-servername",
                "hang.test",
                "-CAfile",
                str(ca),
                "-tls1_3",
            ],
            input=b"GET /?delay=1.2 HTTP/1.1\r\nHost: hang.test\r\nConnection: close\r\n\r\n",
            capture_output=True,
            timeout=15,
        )
        assert b"HTTP/1.1 200 " in out.stdout, out.stdout[:300] + out.stderr[-300:]


# -- deadlines for every byte -------------------------------------------------------------


@pytest.mark.parametrize("parser", CODECS)
def test_read_timeout_bounds_the_request_body(tmp_path, hung, parser):
    """Content-Length 100 with 10 bytes sent, the connection kept open: at readTimeout
    (1 s, idleTimeout 30 s) the client gets 408 and the upstream request is aborted.
    Before, both were held for as long as the client kept the connection."""
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "1s", "idleTimeout": "30s"}},
        }
    }
    with serving(tmp_path, hang_routes(hung.url), parser=parser, entrypoints=eps) as e:
        with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
            start = time.monotonic()
            s.sendall(PARTIAL_POST)
            hung.wait_accepted(1, timeout=5)
            reply, closed = read_until_closed(s, 6)
            took = time.monotonic() - start
        assert reply.startswith(b"HTTP/1.1 408 "), reply
        assert closed and 0.8 < took < 3.0, took
        assert hung.wait_open(0, timeout=2) == 0


@pytest.mark.parametrize("parser", CODECS)
def test_read_timeout_bounds_a_connection_that_sends_nothing(tmp_path, parser):
    """A new connection that sends nothing is closed at readTimeout (1 s), not at
    idleTimeout (30 s), in silence; one that sent a request then idles gets idleTimeout."""
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "1s", "idleTimeout": "30s"}},
        }
    }
    backend = Whoami("w")
    try:
        with serving(tmp_path, hang_routes(backend.url), parser=parser, entrypoints=eps) as e:
            with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
                start = time.monotonic()
                reply, closed = read_until_closed(s, 6)
                took = time.monotonic() - start
            assert closed and reply == b"" and 0.8 < took < 3.0, (reply, took)
            with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: hang.test\r\n\r\n")
                time.sleep(2.0)  # past readTimeout, within idleTimeout
                s.sendall(b"GET / HTTP/1.1\r\nHost: hang.test\r\nConnection: close\r\n\r\n")
                reply, closed = read_until_closed(s, 5)
            assert reply.count(b"HTTP/1.1 200 ") == 2, reply
    finally:
        backend.stop()


@pytest.mark.parametrize("parser", CODECS)
def test_an_upload_within_read_timeout_is_not_cut(tmp_path, parser):
    """A body sent slowly but in full within readTimeout is forwarded and answered."""
    eps = {
        "web": {
            "address": "127.0.0.1:0",
            "transport": {"respondingTimeouts": {"readTimeout": "2s"}},
        }
    }
    backend = Whoami("w")
    try:
        with serving(tmp_path, hang_routes(backend.url), parser=parser, entrypoints=eps) as e:
            with socket.create_connection(("127.0.0.1", e.port), timeout=10) as s:
                s.sendall(
                    b"POST / HTTP/1.1\r\nHost: hang.test\r\nContent-Length: 30\r\nConnection: close\r\n\r\n"
                )
                for _ in range(3):
                    time.sleep(0.4)
                    s.sendall(b"0123456789")
                reply, _ = read_until_closed(s, 5)
            assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    finally:
        backend.stop()


# -- a backend's malformed chunk --------------------------------------------------------


@pytest.mark.parametrize("parser", CODECS)
def test_a_malformed_upstream_chunk_is_a_502_with_a_warning(tmp_path, parser):
    """A backend whose chunk size is not hex: the client gets 502 (nothing of the
    response reached it) and the log names the server. Before: 0 bytes, no log."""
    backend = HungBackend(
        answer=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n"
    )
    try:
        with serving(tmp_path, hang_routes(backend.url), parser=parser) as e:
            reply = read_until_closed_request(
                e.port, b"GET / HTTP/1.1\r\nHost: hang.test\r\nConnection: close\r\n\r\n"
            )
            assert reply.startswith(b"HTTP/1.1 502 "), reply
            line = e.wait_for(
                rf"WARNING.*hang.*127\.0\.0\.1:{backend.port}.*invalid response", timeout=5
            )
            assert line
    finally:
        backend.close()


# -- tunnels --------------------------------------------------------------------------------


def test_a_websocket_tunnel_whose_client_left_lets_go_of_its_backend(tmp_path):
    """After a 101, 20 clients close; the backend ignores the EOF edge passes on and
    never closes: edge lets go of both sides within the tunnel's termination delay
    (1 s), its descriptors back where they were. Before, each pair was held for ever."""
    backend = HungBackend(
        answer=b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        hold=True,
    )
    upgrade = (
        b"GET /ws HTTP/1.1\r\nHost: hang.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    try:
        with serving(tmp_path, hang_routes(backend.url)) as e:
            before = descriptors(e)
            for _ in range(20):
                with socket.create_connection(("127.0.0.1", e.port), timeout=5) as s:
                    s.sendall(upgrade)
                    assert s.recv(4096).startswith(b"HTTP/1.1 101 ")
            assert len(backend.held) + len(backend.open) == 20
            assert wait_descriptors(e, before, timeout=2.5) <= before
            assert wait_close_wait(e.port, timeout=0.5) == 0
    finally:
        backend.close()


def test_a_tcp_splice_whose_client_left_lets_go_of_its_backend(tmp_path):
    """A raw TCP route: the client's close reaches the backend as EOF and, the backend
    ignoring it and never closing, edge closes both after terminationDelay (Traefik's
    100 ms): 200 such clients leave edge's descriptors where they were."""
    hung = HungBackend(hold=True)
    routes = {
        "tcp": {
            "routers": {"raw": {"rule": "HostSNI(`*`)", "service": "raw"}},
            "services": {
                "raw": {"loadBalancer": {"servers": [{"address": f"127.0.0.1:{hung.port}"}]}}
            },
        }
    }
    try:
        with serving(tmp_path, routes) as e:
            before = descriptors(e)
            connect_send_close(e.port, b"hello", 200)
            hung.wait_accepted(200, timeout=10)
            assert wait_descriptors(e, before, timeout=3) <= before
            assert wait_close_wait(e.port, timeout=1.0) == 0
    finally:
        hung.close()
