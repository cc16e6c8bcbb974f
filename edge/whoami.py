"""``edge whoami``: a tiny backend for the demo, the tests and the examples.

- HTTP: every request is answered with a JSON object holding the server's name,
  the method, path, query, host, headers and the client's address. The body of
  a request is read and counted, never stored (``bodyBytes``), so uploads of any
  size cost no memory. ``GET /data?size=N`` streams N bytes with flow control;
  ``&chunked=1`` sends it chunked; ``?status=S`` answers with status S; ``?delay=SECONDS`` waits before answering.
- TCP: echoes bytes. UDP: echoes datagrams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from urllib.parse import parse_qs

import httptools
import orjson

log = logging.getLogger("edge.whoami")

CHUNK = 64 * 1024
_FILL = b"x" * CHUNK


class WhoamiHTTP(asyncio.Protocol):
    def __init__(self, name: str) -> None:
        self.name = name
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.url = b""
        self.body_bytes = 0
        self.writable: asyncio.Event | None = None
        self.queue: list[tuple] = []
        self.busy = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else ""
        self.writable = asyncio.Event()
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._respond_now(400, b"upgrade not supported\n", close=True)
        except httptools.HttpParserError:
            self._respond_now(400, b"bad request\n", close=True)

    def connection_lost(self, exc) -> None:
        self.transport = None
        if self.writable is not None:
            self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.headers = []
        self.url = b""
        self.body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)

    def on_message_complete(self) -> None:
        request = (
            self.parser.get_method(),
            self.url,
            self.headers,
            self.body_bytes,
            self.parser.should_keep_alive(),
            self.parser.get_http_version(),
        )
        if self.busy:
            self.queue.append(request)
        else:
            self._handle(request)

    def _handle(self, request: tuple) -> None:
        method, url, headers, body_bytes, keep_alive, version = request
        parsed = httptools.parse_url(url)
        path = parsed.path.decode("latin-1")
        query = (parsed.query or b"").decode("latin-1")
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        status = int(params.get("status", 200))
        delay = float(params.get("delay", 0))
        if path == "/data" and "size" in params:
            self.busy = True
            task = asyncio.get_running_loop().create_task(
                self._stream(int(params["size"]), keep_alive, delay, params.get("chunked") == "1")
            )
            task.add_done_callback(_log_task_error)
            return
        host = ""
        hdrs: dict[str, list[str]] = {}
        for name, value in headers:
            n = name.decode("latin-1")
            v = value.decode("latin-1")
            if n.lower() == "host":
                host = v
            hdrs.setdefault(n, []).append(v)
        body = orjson.dumps(
            {
                "name": self.name,
                "method": method.decode(),
                "path": path,
                "query": query,
                "host": host,
                "headers": hdrs,
                "remoteAddr": self.peer,
                "bodyBytes": body_bytes,
                "version": version,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )
        body_out = b"" if method == b"HEAD" else body
        head = (
            b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (status, len(body), b"" if keep_alive else b"Connection: close\r\n")
        )
        if delay > 0:
            self.busy = True
            asyncio.get_running_loop().call_later(delay, self._write, head + body_out, keep_alive)
        else:
            self._write(head + body_out, keep_alive)

    def _write(self, data: bytes, keep_alive: bool) -> None:
        if self.transport is None:
            return
        self.transport.write(data)
        self.busy = False
        if not keep_alive:
            self.transport.close()
            return
        if self.queue:
            self._handle(self.queue.pop(0))

    def _respond_now(self, status: int, body: bytes, close: bool) -> None:
        if self.transport is not None:
            self.transport.write(
                b"HTTP/1.1 %d Error\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)
            )
            if close:
                self.transport.close()

    async def _stream(self, size: int, keep_alive: bool, delay: float, chunked: bool) -> None:
        if delay:
            await asyncio.sleep(delay)
        t = self.transport
        if t is None:
            return
        framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % size
        t.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n%s\r\n%s\r\n"
            % (framing, b"" if keep_alive else b"Connection: close\r\n")
        )
        left = size
        while left > 0 and self.transport is not None:
            await self.writable.wait()
            if self.transport is None:
                return
            n = min(left, CHUNK)
            if chunked:
                self.transport.writelines((b"%x\r\n" % n, _FILL[:n], b"\r\n"))
            else:
                self.transport.write(_FILL[:n])
            left -= n
        self._write(b"0\r\n\r\n" if chunked else b"", keep_alive)


def _log_task_error(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("whoami stream failed: %s", task.exception())


class EchoTCP(asyncio.Protocol):
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)

    def eof_received(self) -> bool:
        if self.transport.can_write_eof():
            self.transport.write_eof()
        return False


class EchoUDP(asyncio.DatagramProtocol):
    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        self.transport.sendto(data, addr)


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


async def serve(name: str, http: list[str], tcp: list[str], udp: list[str], ready=None) -> None:
    """Serve until cancelled or SIGTERM/SIGINT. ``ready`` gets the bound addresses."""
    loop = asyncio.get_running_loop()
    servers = []
    bound: dict[str, list[tuple[str, int]]] = {"http": [], "tcp": [], "udp": []}
    for addr in http:
        host, port = split_address(addr)
        srv = await loop.create_server(lambda: WhoamiHTTP(name), host, port, backlog=1024)
        servers.append(srv)
        bound["http"].append(srv.sockets[0].getsockname()[:2])
    for addr in tcp:
        host, port = split_address(addr)
        srv = await loop.create_server(EchoTCP, host, port)
        servers.append(srv)
        bound["tcp"].append(srv.sockets[0].getsockname()[:2])
    transports = []
    for addr in udp:
        host, port = split_address(addr)
        t, _ = await loop.create_datagram_endpoint(EchoUDP, local_addr=(host, port))
        transports.append(t)
        bound["udp"].append(t.get_extra_info("sockname")[:2])
    for kind, addrs in bound.items():
        for host, port in addrs:
            log.info("whoami %s: %s on %s:%d", name, kind, host, port)
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for srv in servers:
            srv.close()
        for t in transports:
            t.close()
