"""``edge whoami``: a tiny backend for the demo, the tests and the examples.

- HTTP: every request is answered with a JSON object holding the server's name,
  the method, path, query, host, headers and the client's address. The body of
  a request is read and counted, never stored (``bodyBytes``), so uploads of any
  size cost no memory. ``GET /data?size=N`` streams N bytes with flow control;
  ``&chunked=1`` sends it chunked; ``?status=S`` answers with status S; ``?delay=SECONDS`` waits before answering.
- TCP: echoes bytes. TLS: terminates TLS with the certificate given and echoes the
  bytes inside (the backend of a passthrough route: a client sees its certificate).
  UDP: echoes datagrams.

Every address is bound before anything is served; one that cannot be bound (taken,
not local, not allowed) is a :class:`ListenError` naming the address and what should
have listened there, and whatever was bound already is closed. ``python -m
edge.whoami`` runs it with every option (:func:`main`); ``edge whoami`` with those
its subcommand declares.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs

import httptools
import orjson

from edge.errors import ConfigError

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
        self.writable = asyncio.Event()  # set while the transport takes writes
        self.writable.set()
        self.queue: list[tuple] = []
        self.busy = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else ""

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._respond_now(400, b"upgrade not supported\n", close=True)
        except httptools.HttpParserError:
            self._respond_now(400, b"bad request\n", close=True)

    def connection_lost(self, exc) -> None:
        self.transport = None
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


class ListenError(ConfigError):
    """An address whoami was given cannot be listened on (in use, not local, not
    allowed). A :class:`~edge.errors.ConfigError`: the address is a value of its
    configuration, and ``edge``'s command line prints such an error as one line and
    exits 1."""

    def __init__(self, name: str, kind: str, address: str, exc: OSError) -> None:
        cause: BaseException | None = exc
        while isinstance(cause, OSError) and not cause.errno:  # uvloop chains the errno
            cause = cause.__cause__
        errno = cause.errno if isinstance(cause, OSError) else None
        reason = os.strerror(errno).lower() if errno else str(exc)
        super().__init__(f"whoami {name}: cannot listen on {address} ({kind}): {reason}")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """The TLS echo's context: the certificate chain and key files (PEM); a file that
    cannot be read or does not hold them is a :class:`~edge.errors.ConfigError`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"whoami: certificate {cert} with key {key}: {exc}") from exc
    return context


Bound = dict[str, list[tuple[str, int]]]


async def serve(
    name: str,
    http: Sequence[str],
    tcp: Sequence[str],
    udp: Sequence[str],
    ready: Callable[[Bound], object] | None = None,
    *,
    tls: Sequence[str] = (),
    tls_context: ssl.SSLContext | None = None,
) -> None:
    """Serve until cancelled or SIGTERM/SIGINT. ``ready`` gets the bound addresses by
    kind (``http``, ``tcp``, ``tls``, ``udp``). ``tls`` addresses need ``tls_context``.
    Raises :class:`ListenError` when an address cannot be bound."""
    if tls and tls_context is None:
        raise ConfigError(f"whoami {name}: a TLS echo address needs a certificate and key")
    loop = asyncio.get_running_loop()
    servers: list[asyncio.Server] = []
    transports: list[asyncio.BaseTransport] = []
    bound: Bound = {"http": [], "tcp": [], "tls": [], "udp": []}
    streams: list[tuple[str, str, Callable[[], asyncio.Protocol], ssl.SSLContext | None]] = [
        *(("http", a, lambda: WhoamiHTTP(name), None) for a in http),
        *(("tcp", a, EchoTCP, None) for a in tcp),
        *(("tls", a, EchoTCP, tls_context) for a in tls),
    ]
    try:
        for kind, addr, factory, context in streams:
            host, port = split_address(addr)
            try:
                srv = await loop.create_server(factory, host, port, ssl=context, backlog=1024)
            except OSError as exc:
                raise ListenError(name, kind, addr, exc) from exc
            servers.append(srv)
            bound[kind].append(srv.sockets[0].getsockname()[:2])
        for addr in udp:
            host, port = split_address(addr)
            try:
                t, _ = await loop.create_datagram_endpoint(EchoUDP, local_addr=(host, port))
            except OSError as exc:
                raise ListenError(name, "udp", addr, exc) from exc
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
        await stop.wait()
    finally:
        for srv in servers:
            srv.close()
        for transport in transports:
            transport.close()


DEFAULT_HTTP = "127.0.0.1:8001"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """whoami's options, on ``parser``."""
    parser.add_argument("--name", default="whoami", help="the name its answers carry")
    parser.add_argument(
        "--http", action="append", metavar="ADDR", help="HTTP address, host:port (repeatable)"
    )
    parser.add_argument(
        "--tcp", action="append", metavar="ADDR", help="TCP echo address (repeatable)"
    )
    parser.add_argument(
        "--tls",
        action="append",
        metavar="ADDR",
        help="TLS echo address (repeatable): terminates TLS with --cert/--key, echoes inside",
    )
    parser.add_argument("--cert", metavar="FILE", help="the TLS echo's certificate chain (PEM)")
    parser.add_argument("--key", metavar="FILE", help="the TLS echo's private key (PEM)")
    parser.add_argument(
        "--udp", action="append", metavar="ADDR", help="UDP echo address (repeatable)"
    )


def command(args: argparse.Namespace) -> int:
    """Run whoami with ``args`` (from :func:`add_arguments`); with no address at all,
    HTTP on :data:`DEFAULT_HTTP`."""
    from edge.eventloop import run

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tls = getattr(args, "tls", None) or []
    cert, key = getattr(args, "cert", None), getattr(args, "key", None)
    context = None
    if tls:
        if not (cert and key):
            raise ConfigError("whoami: --tls needs --cert and --key")
        context = server_context(cert, key)
    http = args.http or ([] if (args.tcp or args.udp or tls) else [DEFAULT_HTTP])
    run(serve(args.name, http, args.tcp or [], args.udp or [], tls=tls, tls_context=context))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m edge.whoami``: every option, an error as one line and exit status 1."""
    parser = argparse.ArgumentParser(
        prog="python -m edge.whoami", description="a tiny echo backend"
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return command(args)
    except ConfigError as exc:
        print(f"edge: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
