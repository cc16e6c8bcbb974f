"""Backends the HTTP integration tests share: an HTTP/1.1 server (h11, in a thread)
that records what it parsed off the wire, scripted raw-socket backends, and the
edge and clients that talk to them. Every wait is bounded.
"""

from __future__ import annotations

import socket
import threading
import time

import h11

from tests.harness import Edge, raw, read_response
from tests.integration.peers import ThreadedServer

TIMEOUT = 5.0


class Received:
    """One request as the backend parsed it."""

    def __init__(self, conn: int, request: h11.Request) -> None:
        self.conn = conn
        self.method = request.method
        self.target = request.target
        self.headers = [(n.lower(), v) for n, v in request.headers]
        self.body = b""

    def header(self, name: bytes) -> list[bytes]:
        return [v for n, v in self.headers if n == name]


class H11Backend(ThreadedServer):
    """An HTTP/1.1 server answering 200 ``ok`` to every request head, recording what it parsed.

    ``after_body``: answer once the request's body is read instead (its answer then
    names the request: method, target, body length)."""

    def __init__(self, after_body: bool = False) -> None:
        self.after_body = after_body
        self.requests: list[Received] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(0.2)
        conn = h11.Connection(h11.SERVER)
        current: Received | None = None
        deadline = time.monotonic() + 4 * TIMEOUT
        try:
            while not self.stopped and time.monotonic() < deadline:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = c.recv(65536)
                    except TimeoutError:
                        continue
                    conn.receive_data(data)
                    if not data:
                        return
                elif type(event) is h11.Request:
                    current = Received(n, event)
                    with self.lock:
                        self.requests.append(current)
                    if not self.after_body:
                        self._answer(c, conn, b"ok")
                elif type(event) is h11.Data:
                    current.body += event.data
                elif type(event) is h11.EndOfMessage:
                    if self.after_body:
                        self._answer(
                            c,
                            conn,
                            b"%s %s %d" % (current.method, current.target, len(current.body)),
                        )
                    conn.start_next_cycle()
                else:  # ConnectionClosed
                    return
        except (h11.RemoteProtocolError, OSError) as exc:
            with self.lock:
                self.errors.append(f"connection {n}: {exc!r}")
        finally:
            c.close()

    @staticmethod
    def _answer(c: socket.socket, conn: h11.Connection, body: bytes) -> None:
        head = h11.Response(
            status_code=200, reason=b"OK", headers=[(b"Content-Length", b"%d" % len(body))]
        )
        c.sendall(conn.send(head) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))


def edge_with(tmp_path, parser, service: dict, middlewares: dict | None = None, **router) -> Edge:
    dyn = {
        "http": {
            "routers": {
                "app": {
                    "rule": "Host(`app.example`)",
                    "service": "app",
                    "middlewares": list(middlewares or {}),
                    **router,
                }
            },
            "services": {"app": service},
            "middlewares": middlewares or {},
        }
    }
    return Edge(tmp_path, dyn, parser=parser, entrypoints={"web": {"address": "127.0.0.1:0"}})


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` (one request) on a new connection: the response (read_response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(data)
        return read_response(s)


def pipelined(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; what edge answers until it closes or goes quiet."""
    return raw(port, data, timeout=TIMEOUT, quiet=0.5)


def settle(backend: H11Backend, count: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while len(backend.requests) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # anything more the backend still had to parse


class ClosingBackend(ThreadedServer):
    """Answers 200 (keep-alive) to each request head, except the ones numbered in
    ``drop`` (counted over all connections, from 1): those it reads, records and
    answers by closing the connection, as a server does that closes an idle
    connection just as a request arrives on it, or crashes on the request."""

    def __init__(self, drop: set[int]) -> None:
        self.drop = drop
        self.seen: list[tuple[int, bytes]] = []  # (connection, request line)
        self.lock = threading.Lock()
        super().__init__()

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(TIMEOUT)
        buf = b""
        try:
            while not self.stopped:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                with self.lock:
                    self.seen.append((n, head.split(b"\r\n", 1)[0]))
                    number = len(self.seen)
                if number in self.drop:
                    return
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        finally:
            c.close()


def one_by_one(port: int, requests: list[bytes]) -> list[bytes]:
    """Each request on one client connection, the next sent once its answer came: the answers."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        for request in requests:
            s.sendall(request)
            answers.append(read_response(s, bodiless=request.startswith(b"HEAD ")))
    return answers


class EarlyAnswerBackend(ThreadedServer):
    """Answers 413 as soon as a request head is in, without reading its body (a size
    limit, an auth check), then reads and drops what comes until EOF."""

    def _serve(self, c: socket.socket, n: int) -> None:
        c.settimeout(TIMEOUT)
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
            c.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\n\r\ntoo big!")
            while c.recv(65536):
                pass
        except OSError:
            pass
        finally:
            c.close()
