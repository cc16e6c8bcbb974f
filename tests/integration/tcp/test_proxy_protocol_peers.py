"""The PROXY protocol against real peers: HAProxy's headers parsed, ours read by nginx and HAProxy.

HAProxy (``send-proxy``, ``send-proxy-v2``, health checks) connects to a test
listener; the header it sends must parse and carry the client's address. Headers
from :func:`encode_v1` / :func:`encode_v2` go to nginx (``listen ... proxy_protocol``,
http and stream) and HAProxy (``accept-proxy``), which report the address they
read. Every process is started here with a configuration in ``tmp_path`` and
stopped at the end; every wait has a timeout.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from edge.tcp.proxyproto import NEED_MORE, ProxyHeader, encode_v1, encode_v2, parse
from tests.harness import need
from tests.integration.peers import HAPROXY_DEFAULTS, free_port, running

STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")


def capture(listener: socket.socket, payload_len: int) -> tuple[ProxyHeader, bytes]:
    """Accept one connection; read until a header and ``payload_len`` bytes after it."""
    listener.settimeout(10)
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(10)
        buf = b""
        for _ in range(100):
            result = parse(buf)
            if result is not NEED_MORE and len(buf) >= result.length + payload_len:
                return result, buf[result.length :]
            chunk = conn.recv(4096)
            if not chunk:
                break
            buf += chunk
    raise AssertionError(f"no complete header and payload in {buf!r}")


def ask(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; everything until the peer closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(data)
        chunks = []
        for _ in range(100):
            try:
                chunk = c.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def body(response: bytes) -> bytes:
    head, _, rest = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response
    return rest


# -- HAProxy as the sender ---------------------------------------------------------------


def test_haproxy_send_proxy_v1_and_v2(tmp_path):
    haproxy = need("haproxy")
    with (
        socket.create_server(("127.0.0.1", 0)) as cap1,
        socket.create_server(("127.0.0.1", 0)) as cap2,
        socket.create_server(("127.0.0.1", 0)) as cap3,
    ):
        p1, p2, ready = free_port(), free_port(), free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(
            HAPROXY_DEFAULTS.format(ready=ready)
            + f"""
frontend v1
  bind 127.0.0.1:{p1}
  default_backend v1
backend v1
  server s 127.0.0.1:{cap1.getsockname()[1]} send-proxy
frontend v2
  bind 127.0.0.1:{p2}
  unique-id-format edge-%ci-%cp
  default_backend v2
backend v2
  server s 127.0.0.1:{cap2.getsockname()[1]} send-proxy-v2 proxy-v2-options unique-id
backend checks
  server s 127.0.0.1:{cap3.getsockname()[1]} send-proxy-v2 check check-send-proxy inter 200ms
"""
        )
        # Probing a tcp frontend would send a header to the capture: wait on "ready".
        with running([haproxy, "-db", "-f", str(cfg)], tmp_path / "haproxy.log", ready):
            for port, version, cap in ((p1, 1, cap1), (p2, 2, cap2)):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                    c.sendall(b"hello after the header")
                    h, rest = capture(cap, len(b"hello after the header"))
                    client = c.getsockname()
                assert (h.version, h.command, h.family) == (version, "PROXY", "TCP4")
                assert h.source == client
                assert h.destination == ("127.0.0.1", port)
                assert rest == b"hello after the header"
                if version == 2:
                    assert h.tlv(0x05) == f"edge-{client[0]}-{client[1]}".encode()
            # A v2 health check says LOCAL: use the connection's own addresses.
            h, _ = capture(cap3, 0)
            assert (h.version, h.command, h.source) == (2, "LOCAL", None)


def test_haproxy_send_proxy_from_an_ipv6_client(tmp_path):
    haproxy = need("haproxy")
    try:
        cap = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    with cap:
        port, ready = free_port("::1"), free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(
            HAPROXY_DEFAULTS.format(ready=ready)
            + f"""
frontend f
  bind [::1]:{port}
  default_backend b
backend b
  server s [::1]:{cap.getsockname()[1]} send-proxy
"""
        )
        with (
            running([haproxy, "-db", "-f", str(cfg)], tmp_path / "haproxy.log", ready),
            socket.create_connection(("::1", port), timeout=10) as c,
        ):
            c.sendall(b"x")
            h, _ = capture(cap, 1)
            client = c.getsockname()[:2]
        assert (h.family, h.source, h.destination) == ("TCP6", client, ("::1", port))


# -- our headers read by HAProxy and nginx -----------------------------------------------------

CASES = [
    ("v1 TCP4", encode_v1(("203.0.113.7", 4242), ("198.51.100.1", 443)), "203.0.113.7", 4242),
    ("v1 TCP6", encode_v1(("2001:db8::7", 1), ("2001:db8::1", 443)), "2001:db8::7", 1),
    ("v2 TCP4", encode_v2(("203.0.113.8", 65535), ("198.51.100.1", 80)), "203.0.113.8", 65535),
    ("v2 TCP6", encode_v2(("2001:db8::8", 1), ("2001:db8::1", 80)), "2001:db8::8", 1),
    ("v2 mapped", encode_v2(("::ffff:192.0.2.9", 5), ("192.0.2.1", 80)), "192.0.2.9", 5),
]


def test_haproxy_accept_proxy_reads_our_headers(tmp_path):
    haproxy = need("haproxy")
    port, ready = free_port(), free_port()
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(
        HAPROXY_DEFAULTS.format(ready=ready)
        + f"""
frontend f
  mode http
  bind 127.0.0.1:{port} accept-proxy
  http-request return status 200 content-type text/plain lf-string "%[src] %[src_port] %[dst] %[dst_port]"
"""
    )
    with running([haproxy, "-db", "-f", str(cfg)], tmp_path / "haproxy.log", ready):
        for name, header, ip, sport in CASES:
            got = body(
                ask(port, header + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            )
            src_ip, src_port, dst_ip, dst_port = got.decode().split()
            assert (src_ip, int(src_port)) == (ip, sport), name
            want_dst = parse(header).destination
            assert (dst_ip, int(dst_port)) == want_dst, name
        # HAProxy closes a connection whose header is broken: nothing is answered.
        assert ask(port, b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\nGET / HTTP/1.1\r\n\r\n") == b""


def nginx_run(tmp_path: Path, conf: str, port: int):
    nginx = need("nginx")
    (tmp_path / "logs").mkdir(exist_ok=True)
    path = tmp_path / "nginx.conf"
    path.write_text(conf)
    args = [
        nginx,
        "-p",
        str(tmp_path),
        "-c",
        str(path),
        "-g",
        f"daemon off; master_process off; pid {tmp_path}/nginx.pid;"
        f" error_log {tmp_path}/error.log;",
    ]
    return running(args, tmp_path / "nginx.log", port)


def test_nginx_http_proxy_protocol_reads_our_headers(tmp_path):
    port = free_port()
    conf = f"""
events {{ worker_connections 64; }}
http {{
  access_log off;
  server {{
    listen 127.0.0.1:{port} proxy_protocol;
    return 200 "$proxy_protocol_addr $proxy_protocol_port $proxy_protocol_server_addr $proxy_protocol_server_port";
  }}
}}
"""
    with nginx_run(tmp_path, conf, port):
        for name, header, ip, sport in CASES:
            request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            got = body(ask(port, header + request)).decode().split()
            dst = parse(header).destination
            assert got == [ip, str(sport), dst[0], str(dst[1])], name


def test_nginx_stream_proxy_protocol_reads_our_headers(tmp_path):
    if not STREAM_MODULE.exists():
        pytest.skip(f"nginx stream module not installed: {STREAM_MODULE} (libnginx-mod-stream)")
    port = free_port()
    conf = f"""
load_module {STREAM_MODULE};
events {{ worker_connections 64; }}
stream {{
  server {{
    listen 127.0.0.1:{port} proxy_protocol;
    return "$proxy_protocol_addr:$proxy_protocol_port\\n";
  }}
}}
"""
    with nginx_run(tmp_path, conf, port):
        for name, header, ip, sport in CASES:
            assert ask(port, header) == f"{ip}:{sport}\n".encode(), name
