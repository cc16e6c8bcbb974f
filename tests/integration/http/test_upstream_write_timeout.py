"""serversTransport forwardingTimeouts.writeTimeout (nginx's proxy_send_timeout, which
ingress-nginx's annotation sets): an upstream that takes none of a request body for
that long is given up with 504; one that stops for less each time is served.

A whole ``edge run``; the upstream is a thread on a socket with a small receive buffer,
so edge's writes to it back up after a few MiB; every wait is bounded.
"""

from __future__ import annotations

import socket
import threading
import time

from tests.harness import Edge, lb, read_until_closed

BODY = 12 * 1024 * 1024  # well past the buffers on the way (a 4 MiB send buffer)
TIMEOUT = 20.0


class Upstream:
    """Accepts one connection and reads its request: after the head, nothing until
    closed (``pause`` None), or in bursts (2 MiB, then nothing for ``pause``
    seconds); answers 200 once the body is in."""

    def __init__(self, pause: float | None) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.sock.settimeout(TIMEOUT)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.pause = pause
        self.received = 0
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(TIMEOUT)
            deadline = time.monotonic() + TIMEOUT
            try:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                self.received = len(data.partition(b"\r\n\r\n")[2])
                if self.pause is None:
                    self.closed.wait(TIMEOUT)  # edge gives up long before
                    return
                while self.received < BODY and time.monotonic() < deadline:
                    burst = min(BODY, self.received + (2 << 20))
                    while self.received < burst:
                        got = conn.recv(burst - self.received)
                        if not got:
                            return
                        self.received += len(got)
                    time.sleep(self.pause)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                time.sleep(0.5)
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        self.thread.join(TIMEOUT)


def upload(port: int) -> tuple[bytes, float]:
    """POST a BODY-byte body (from a thread, so a blocked send cannot stall the test);
    the answer and the seconds it took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(
            b"POST /up HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % BODY
        )

        def send() -> None:
            block = b"x" * 65536
            try:
                for _ in range(BODY // len(block)):
                    s.sendall(block)
            except OSError:
                pass  # edge answered and closed: the rest is not wanted

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        out = read_until_closed(s, TIMEOUT, quiet=TIMEOUT)[0]
        took = time.monotonic() - started
    sender.join(TIMEOUT)
    return out, took


def edge_for(tmp_path, parser, upstream: Upstream, write_timeout: str = "1s") -> Edge:
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(upstream.url, serversTransport="t")},
            "serversTransports": {"t": {"forwardingTimeouts": {"writeTimeout": write_timeout}}},
        }
    }
    return Edge(tmp_path, dyn, parser=parser)


def test_an_upstream_that_takes_nothing_is_given_up_with_504(tmp_path, parser):
    upstream = Upstream(pause=None)
    e = edge_for(tmp_path, parser, upstream)
    try:
        out, took = upload(e.port)
        print(f"504 after {took:.2f} s")
        assert out.startswith(b"HTTP/1.1 504 "), out[:200]
        assert took < 8.0  # the buffers fill, then one to two timeouts
        assert upstream.received < BODY
        e.wait_for(r"the upstream took none of the request for 1s", start=0)
    finally:
        e.stop()
        upstream.close()


def test_an_upstream_that_reads_slowly_is_served(tmp_path, parser):
    """Bursts with 0.6 s between them: never 2 s (the writeTimeout) without a byte
    taken, so never cut, however long the whole body takes. The timeout is over three
    pauses: a thread woken late on a loaded machine does not make a pause one."""
    upstream = Upstream(pause=0.6)
    e = edge_for(tmp_path, parser, upstream, write_timeout="2s")
    try:
        out, took = upload(e.port)
        print(f"served after {took:.2f} s")
        assert out.startswith(b"HTTP/1.1 200 "), out[:200]
        assert upstream.received == BODY
        assert took > 3.0  # six stalls that add up to more than the timeout
    finally:
        e.stop()
        upstream.close()
