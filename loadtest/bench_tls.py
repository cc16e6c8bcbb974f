"""The CPU cost of one TLS connection through edge's terminator, without sockets.

Drives a real entrypoint (``TCPEntryPoint.arrive()``: the peek, the ClientHello
parser, the certificate snapshot, ``start_tls``'s :class:`TLSTransport`, the HTTP
connection and its pooled upstream) with an in-memory TLS client
(``ssl.SSLObject`` over ``MemoryBIO``) on fake raw transports, so the figure is
free of kernel and load-generator noise. Each connection makes a handshake, one
``GET`` with ``Connection: close`` and its response, then edge's close_notify,
as ``bench.py``'s https-handshake scenario (wrk) does.

    python loadtest/bench_tls.py [--bare] [--keepalive] [--full]
                                 [--connections N] [--profile | --instructions]
    python loadtest/bench_tls.py --live nginx|edge [--named] [--full] [--keep DIR]

``--bare``: the same client against a bare ``SSLObject`` server in the same
process (handshake, read the request, write a fixed response, close_notify):
OpenSSL's own work on both sides and the least Python can add. Edge's figure
minus the bare one is what edge does beyond OpenSSL.

``--keepalive``: one connection, and the unit is a request on it (bench.py's
https-keepalive): read a record, decrypt, proxy, encrypt, write.

``--full``: no session resumption (the client never offers its ticket); by
default the client resumes as wrk does (it keeps the session, TLS 1.3 PSK with
a new X25519 exchange, and the server sends its tickets every time).

``--live nginx|edge``: the server's side only, over real sockets: nginx (as
bench.py's, proxying to a backend nginx) or ``python -m edge run`` (an HTTPS
router to the same backend) under callgrind, a client in this process making
resumed connections (GET, close) at two counts, differenced: instructions per
connection in user space, and by library (libcrypto beside libcrypto). The
kernel's share (syscalls, TCP) is not in it. edge serves the certificate as its
default one, as bench.py does; ``--named``: as a ``tls.certificates`` entry, so
each handshake runs OpenSSL's SNI callback in Python to pick it. ``--keep DIR``:
the two callgrind files, for ``callgrind_annotate``. With ``--full``: full
handshakes with no tickets on either side (https-handshake-full's settings). (callgrind may put part of
libcrypto's count under ``_rust.abi3``, cryptography's module, run to run: add them.)

``--instructions``: instructions per unit, counted by callgrind (valgrind),
deterministic where timings on a shared machine are not: two runs at two counts,
differenced (start-up and warm-up cancel out). The client's work is in every
figure alike; compare edge with ``--bare``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import os
import pstats
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import uvloop

from edge.config.dynamic import Configuration
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.config.static import EntryPoint
from edge.entrypoints.tcp import TCPEntryPoint
from edge.http.server.upstream import UpstreamConnection
from edge.router.factory import build_router_sets
from edge.transports import TransportRegistry

sys.path.insert(0, str(Path(__file__).parent))
import callgrind  # a module beside this script

HOST = "bench.local"
REQUEST = b"GET / HTTP/1.1\r\nHost: bench.local\r\n\r\n"
REQUEST_CLOSE = b"GET / HTTP/1.1\r\nHost: bench.local\r\nConnection: close\r\n\r\n"
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sat, 21 Nov 2026 07:05:32 GMT\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\nhello world\n"
)


class Raw:
    """A socket transport's surface, recording what is written (to hand to the client)."""

    def __init__(self, protocol: asyncio.BaseProtocol, peer: tuple[str, int]) -> None:
        self.protocol = protocol
        self.peer = peer
        self.out: list[bytes] = []
        self.closing = False
        self.reading = True

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def writelines(self, parts) -> None:
        self.out.append(b"".join(parts))

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def write_eof(self) -> None: ...

    def can_write_eof(self) -> bool:
        return True

    def get_extra_info(self, name: str, default=None):
        if name == "peername":
            return self.peer
        if name == "sockname":
            return ("127.0.0.1", 443)
        return default

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.protocol

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (16384, 65536)

    def set_write_buffer_limits(self, high=None, low=None) -> None: ...


def certificate(tmp: Path) -> tuple[str, str]:
    """An ECDSA P-256 certificate for HOST, as bench.py makes it (one per run)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench  # a script beside this one

    class Ctx:
        def path(self, name: str) -> Path:
            return tmp / name

    cert, key = bench.write_certificate(Ctx())  # type: ignore[arg-type]
    return str(cert), str(key)


def entrypoint(
    loop: asyncio.AbstractEventLoop, cert: str, key: str
) -> tuple[TCPEntryPoint, UpstreamConnection]:
    """An entrypoint with one HTTPS router for HOST, the bench certificate as the
    default one (as bench.py's edge), and a pooled connection to its server."""
    conf = msgspec.convert(
        {
            "http": {
                "routers": {"bench": {"rule": f"Host(`{HOST}`)", "service": "backend", "tls": {}}},
                "services": {
                    "backend": {"loadBalancer": {"servers": [{"url": "http://127.0.0.1:9"}]}}
                },
            },
            "tls": {
                "stores": {"default": {"defaultCertificate": {"certFile": cert, "keyFile": key}}}
            },
        },
        Configuration,
    )
    runtime = build_runtime(merge({"file": conf}), {"web": "tcp"})
    transports = TransportRegistry(loop)
    transports.update(runtime.servers_transports)
    sets = build_router_sets(runtime, transports, ["web"])
    ep = TCPEntryPoint("web", msgspec.convert({"address": "127.0.0.1:443"}, EntryPoint), loop)
    ep.switch(sets["web"])
    upstream = UpstreamConnection(ep.https.response_parser)
    upstream.connection_made(Raw(upstream, ("127.0.0.1", 9)))  # type: ignore[arg-type]
    backend = sets["web"].https.by_host[HOST].service.pick()
    backend.transport.put_idle(backend.server, upstream)
    return ep, upstream


class Client:
    """wrk's side: a TLS client that keeps its session (unless ``full``)."""

    def __init__(self, full: bool) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE
        self.full = full
        self.session: ssl.SSLSession | None = None
        self.reused = 0

    def open(self) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
        i, o = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.ctx.wrap_bio(
            i, o, server_hostname=HOST, session=None if self.full else self.session
        )
        return obj, i, o


def step(obj: ssl.SSLObject) -> bool:
    """Drive the client's handshake; True once it is done."""
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        return False
    return True


def read_all(obj: ssl.SSLObject) -> bytes:
    out = b""
    while True:
        try:
            chunk = obj.read(65536)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            return out
        if not chunk:
            return out
        out += chunk


def edge_connection(ep: TCPEntryPoint, upstream: UpstreamConnection, client: Client) -> int:
    """One connection through edge: handshake, GET (close), response, close_notify."""
    obj, cin, cout = client.open()
    step(obj)
    proto = ep.arrive()
    raw = Raw(proto, ("127.0.0.1", 40000))
    proto.connection_made(raw)  # type: ignore[arg-type]
    proto.data_received(cout.read())  # the ClientHello: peek, route, start_tls
    cin.write(raw.take())
    assert step(obj), "the handshake did not complete"
    obj.write(REQUEST_CLOSE)
    raw.protocol.data_received(cout.read())  # Finished and the request
    upstream.data_received(RESPONSE)
    cin.write(raw.take())
    body = read_all(obj)
    assert raw.closing and body.endswith(b"hello world\n"), "no response"
    raw.protocol.connection_lost(None)
    client.reused += obj.session_reused
    client.session = obj.session
    return len(body)


def bare_handshake(sctx: ssl.SSLContext, client: Client, first: bytes = b""):
    """A client and a bare SSLObject server, handshake done on the client's side;
    the client's Finished (and ``first``, written after it) not yet delivered."""
    obj, cin, cout = client.open()
    step(obj)
    sin, sout = ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = sctx.wrap_bio(sin, sout, server_side=True)
    sin.write(cout.read())
    step(srv)
    cin.write(sout.read())
    assert step(obj)
    if first:
        obj.write(first)
    return obj, cin, cout, srv, sin, sout


def bare_connection(sctx: ssl.SSLContext, client: Client) -> int:
    """The same exchange against a bare SSLObject server: OpenSSL's floor."""
    obj, cin, cout, srv, sin, sout = bare_handshake(sctx, client, REQUEST_CLOSE)
    sin.write(cout.read())
    step(srv)
    srv.read(65536)
    srv.write(RESPONSE)
    with contextlib.suppress(ssl.SSLWantReadError):
        srv.unwrap()
    cin.write(sout.read())
    body = read_all(obj)
    assert body.endswith(b"hello world\n")
    client.reused += obj.session_reused
    client.session = obj.session
    return len(body)


async def measure(
    n: int, *, bare: bool, keepalive: bool, full: bool, profile: bool, cert: str, key: str
) -> float:
    loop = asyncio.get_running_loop()
    client = Client(full)
    if bare:
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(cert, key)
        if keepalive:
            obj, cin, cout, srv, sin, sout = bare_handshake(sctx, client)
            sin.write(cout.read())
            step(srv)

            def one() -> None:
                obj.write(REQUEST)
                sin.write(cout.read())
                srv.read(65536)
                srv.write(RESPONSE)
                cin.write(sout.read())
                assert read_all(obj).endswith(b"hello world\n")

        else:

            def one() -> None:
                bare_connection(sctx, client)

    else:
        ep, upstream = entrypoint(loop, cert, key)
        if keepalive:
            obj, cin, cout = client.open()
            step(obj)
            proto = ep.arrive()
            raw = Raw(proto, ("127.0.0.1", 40000))
            proto.connection_made(raw)  # type: ignore[arg-type]
            proto.data_received(cout.read())
            cin.write(raw.take())
            step(obj)
            raw.protocol.data_received(cout.read())

            def one() -> None:
                obj.write(REQUEST)
                raw.protocol.data_received(cout.read())
                upstream.data_received(RESPONSE)
                cin.write(raw.take())
                assert read_all(obj).endswith(b"hello world\n")

        else:

            def one() -> None:
                edge_connection(ep, upstream, client)

    for _ in range(200):  # warm-up, and a check that each unit really completes
        one()
    if not keepalive and not full:
        assert client.reused >= 190, f"sessions not resumed ({client.reused}/200)"
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    start = time.perf_counter()
    for _ in range(n):
        one()
    elapsed = time.perf_counter() - start
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    return elapsed / n * 1e6


# -- --live: the server's side over real sockets, nginx beside edge --------------------

NGINX = """daemon off;
master_process off;
worker_processes 1;
pid {d}/{name}.pid;
error_log {d}/{name}-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {d}/{name}-body;
    proxy_temp_path {d}/{name}-proxy;
    upstream backend {{ server 127.0.0.1:{backend}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} {ssl};
        {tls}
        location = / {{ {answer} }}
    }}
}}
"""
NGINX_TLS = "ssl_certificate {cert}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3;"
NGINX_PROXY = 'proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";'
EDGE_STATIC = """entryPoints: {{web: {{address: "127.0.0.1:{port}"}}}}
providers: {{file: {{filename: {d}/dynamic.yaml}}}}
log: {{level: ERROR}}
"""
EDGE_DYNAMIC = """http:
  routers: {{bench: {{rule: "Host(`{host}`)", service: backend, tls: {{}}}}}}
  services: {{backend: {{loadBalancer: {{servers: [{{url: "http://127.0.0.1:{backend}"}}]}}}}}}
tls: {{stores: {{default: {{defaultCertificate: {{certFile: {cert}, keyFile: {key}}}}}}}}}
"""
# --named: the certificate as a tls.certificates entry, so OpenSSL's SNI callback picks it
# for the name (edge's default certificate is then its own generated one).
EDGE_NAMED = "tls: {{certificates: [{{certFile: {cert}, keyFile: {key}}}]}}\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_connection(
    port: int, ctx: ssl.SSLContext, session: ssl.SSLSession | None
) -> tuple[ssl.SSLSession, bool]:
    """One resumed (when ``session``) connection: GET with Connection: close, the whole
    answer; the session to offer next, and whether this one was resumed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        tls = ctx.wrap_socket(sock, server_hostname=HOST, session=session)
        tls.sendall(REQUEST_CLOSE)
        data = b""
        for _ in range(100):
            try:
                chunk = tls.recv(65536)
            except (ssl.SSLZeroReturnError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
        kept = tls.session, tls.session_reused
        tls.close()
    if not data.endswith(b"hello world\n") or kept[0] is None:
        raise SystemExit(f"unexpected answer: {data[:200]!r}")
    return kept  # type: ignore[return-value]


def live_run(
    who: str,
    n: int,
    tmp: Path,
    cert: str,
    key: str,
    backend: int,
    named: bool = False,
    full: bool = False,
) -> tuple[int, dict[str, int]]:
    """The server's instructions (total, by library) over ``n`` resumed connections and a
    probe (``full``: full handshakes, no tickets on either side, as https-handshake-full)."""
    port = free_port()
    out = tmp / f"callgrind.{who}.{n}"
    if who == "nginx":
        conf = tmp / "nginx.conf"
        tls = NGINX_TLS.format(cert=cert, key=key)
        if full:
            tls += " ssl_session_tickets off; ssl_conf_command NumTickets 0;"
        conf.write_text(
            NGINX.format(
                d=tmp,
                name="subject",
                backend=backend,
                port=port,
                ssl="ssl",
                tls=tls,
                answer=NGINX_PROXY,
            )
        )
        argv, stop, cwd = ["nginx", "-c", str(conf), "-p", str(tmp)], signal.SIGTERM, tmp
    else:
        dynamic = EDGE_DYNAMIC.format(host=HOST, backend=backend, cert=cert, key=key)
        if named:
            dynamic = dynamic[: dynamic.rindex("\ntls:") + 1] + EDGE_NAMED.format(
                cert=cert, key=key
            )
        if full:  # the tls section is one flow mapping on the last line
            dynamic = (
                dynamic.rstrip()[:-1] + ", options: {default: {disableSessionTickets: true}}}\n"
            )
        (tmp / "dynamic.yaml").write_text(dynamic)
        (tmp / "static.yaml").write_text(EDGE_STATIC.format(port=port, d=tmp))
        argv = [sys.executable, "-m", "edge", "run", "--config", str(tmp / "static.yaml")]
        stop, cwd = signal.SIGINT, Path(__file__).parent.parent
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONHASHSEED="0"),
    )
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + 120
        while True:  # the probe: until the route answers (under valgrind, seconds)
            try:
                session = client_connection(port, ctx, None)[0]
                break
            except (OSError, SystemExit):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{who} under callgrind did not answer") from None
                time.sleep(0.5)
        reused = 0
        for _ in range(n):
            session, resumed = client_connection(port, ctx, None if full else session)
            reused += resumed
        if (reused > 0) if full else (reused < n * 0.95):
            raise SystemExit(
                f"{who}: sessions {'resumed' if full else 'not resumed'} ({reused}/{n})"
            )
    finally:
        proc.send_signal(stop)
        proc.wait(60)
    total = int(re.search(r"^totals: (\d+)", out.read_text(), re.M).group(1))  # type: ignore[union-attr]
    return total, by_library(out)


def by_library(out: Path) -> dict[str, int]:
    """Instructions by shared object (callgrind_annotate, self cost)."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", str(out)],
        capture_output=True,
        text=True,
    ).stdout
    libs: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?.*\[(.*)\]\s*$", line)
        if m:
            libs[m.group(2).rsplit("/", 1)[-1].split(".so")[0]] += int(m.group(1).replace(",", ""))
    return dict(libs)


def live(
    who: str,
    small: int = 100,
    large: int = 600,
    keep: Path | None = None,
    named: bool = False,
    full: bool = False,
) -> None:
    for tool in ("valgrind", "nginx"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--live needs {tool}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        cert, key = certificate(tmp)
        backend = free_port()
        (tmp / "backend.conf").write_text(
            NGINX.format(
                d=tmp,
                name="backend",
                backend=free_port(),
                port=backend,
                ssl="",
                tls="",
                answer='return 200 "hello world\\n";',
            )
        )
        server = subprocess.Popen(
            ["nginx", "-c", str(tmp / "backend.conf"), "-p", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            (a, la), (b, lb) = (
                live_run(who, n, tmp, cert, key, backend, named, full) for n in (small, large)
            )
        finally:
            server.send_signal(signal.SIGQUIT)
            server.wait(30)
        if keep is not None:  # the two callgrind files, for callgrind_annotate
            keep.mkdir(parents=True, exist_ok=True)
            for n in (small, large):
                shutil.copy(tmp / f"callgrind.{who}.{n}", keep)
    per = large - small
    kind = "full-handshake" if full else "resumed"
    print(
        f"{who}: {(b - a) / per:,.0f} instructions per {kind} TLS connection, server side (callgrind)"
    )
    for lib in sorted(set(la) | set(lb), key=lambda k: la.get(k, 0) - lb.get(k, 0)):
        cost = (lb.get(lib, 0) - la.get(lib, 0)) / per
        if abs(cost) >= 1000:
            print(f"  {cost:12,.0f}  {lib}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--connections", type=int, default=2_000, help="units measured (connections, or requests)"
    )
    p.add_argument("--bare", action="store_true", help="a bare SSLObject server instead of edge")
    p.add_argument("--keepalive", action="store_true", help="requests on one connection")
    p.add_argument("--full", action="store_true", help="full handshakes: the client never resumes")
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--instructions", action="store_true", help="count instructions per unit with callgrind"
    )
    p.add_argument(
        "--live", choices=("nginx", "edge"), help="the server's side over real sockets (callgrind)"
    )
    p.add_argument(
        "--keep", type=Path, help="--live: copy its two callgrind files into this folder"
    )
    p.add_argument(
        "--named",
        action="store_true",
        help="--live edge: the certificate picked by name (SNI callback)",
    )
    args = p.parse_args()
    if args.live:
        live(args.live, keep=args.keep, named=args.named, full=args.full)
        return
    who = "bare SSLObject" if args.bare else "edge"
    kind = (
        "HTTPS keep-alive request"
        if args.keepalive
        else f"TLS connection ({'full handshake' if args.full else 'resumed'}, GET, close)"
    )
    if args.instructions:
        flags = [
            f
            for f, on in (
                ("--bare", args.bare),
                ("--keepalive", args.keepalive),
                ("--full", args.full),
            )
            if on
        ]
        small, large = (2_000, 12_000) if args.keepalive else (200, 1_200)
        per = callgrind.per_unit(__file__, "--connections", flags, small, large)
        print(f"{who}: {per:,.0f} instructions per {kind} (callgrind)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = certificate(Path(tmp))
        us = uvloop.run(
            measure(
                args.connections,
                bare=args.bare,
                keepalive=args.keepalive,
                full=args.full,
                profile=args.profile,
                cert=cert,
                key=key,
            )
        )
    print(f"{who}: {us:.1f} us per {kind} ({args.connections}, client included)")


if __name__ == "__main__":
    main()
