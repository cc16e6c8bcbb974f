"""Flow control both ways: 1 GiB through edge with a deliberately slow peer, memory bounded.

Download: the backend streams 1 GiB as fast as it can, the client reads at a
capped rate. Upload: the client sends 1 GiB as fast as it can, the backend
reads at a capped rate. Without flow control edge would buffer the difference
(hundreds of MiB); with it, edge's resident memory stays within a few MiB of
its idle size. Sampled from /proc every 50 ms during the transfer.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.harness import Edge, lb

GIB = 1 << 30
RATE = 300 * (1 << 20)  # the slow peer's bytes per second
CHUNK = 1 << 20
MAX_GROWTH = 48 * (1 << 20)  # allowed RSS growth over the idle process


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                self.peak = max(self.peak, rss(self.pid))
            except (OSError, RuntimeError):
                return


def paced_recv(sock: socket.socket, total: int, deadline: float) -> int:
    """Read ``total`` bytes at RATE; returns what was read."""
    got = 0
    start = time.monotonic()
    while got < total and time.monotonic() < deadline:
        data = sock.recv(min(CHUNK, total - got))
        if not data:
            break
        got += len(data)
        ahead = got / RATE - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    return got


class SlowReader(threading.Thread):
    """A backend that reads a request body at RATE and answers with the count."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0

    def run(self) -> None:
        self.sock.settimeout(60)
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(60)
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            head, _, rest = head.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            self.received = len(rest) + paced_recv(conn, length - len(rest), time.monotonic() + 60)
            body = b"%d" % self.received
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_download_1gib_to_slow_client_memory_bounded(tmp_path, parser, whoami):
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {"d": {"rule": "Host(`d.test`)", "service": "d"}},
                "services": {"d": lb(whoami.url)},
            }
        },
        parser=parser,
    )
    try:
        baseline = rss(e.proc.pid)
        sampler = Sampler(e.proc.pid)
        sampler.start()
        with socket.create_connection(("127.0.0.1", e.port), timeout=30) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
            s.sendall(b"GET /data?size=%d HTTP/1.1\r\nHost: d.test\r\n\r\n" % GIB)
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(1)
            assert head.startswith(b"HTTP/1.1 200")
            got = paced_recv(s, GIB, time.monotonic() + 60)
        sampler.stop.set()
        sampler.join()
        assert got == GIB
        growth = sampler.peak - baseline
        print(f"download: baseline {baseline >> 20} MiB, peak {sampler.peak >> 20} MiB")
        assert growth < MAX_GROWTH, f"edge grew by {growth >> 20} MiB while streaming"
    finally:
        e.stop()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_upload_1gib_to_slow_backend_memory_bounded(tmp_path, parser):
    backend = SlowReader()
    backend.start()
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {"u": {"rule": "Host(`u.test`)", "service": "u"}},
                "services": {"u": lb(f"http://127.0.0.1:{backend.port}")},
            }
        },
        parser=parser,
    )
    try:
        baseline = rss(e.proc.pid)
        sampler = Sampler(e.proc.pid)
        sampler.start()
        block = b"u" * CHUNK
        with socket.create_connection(("127.0.0.1", e.port), timeout=60) as s:
            s.sendall(b"POST /up HTTP/1.1\r\nHost: u.test\r\nContent-Length: %d\r\n\r\n" % GIB)
            for _ in range(GIB // CHUNK):
                s.sendall(block)
            resp = b""
            while not resp.endswith(b"%d" % GIB) and len(resp) < 4096:
                data = s.recv(4096)
                if not data:
                    break
                resp += data
        sampler.stop.set()
        sampler.join()
        backend.join(10)
        assert backend.received == GIB
        assert resp.startswith(b"HTTP/1.1 200")
        growth = sampler.peak - baseline
        print(f"upload: baseline {baseline >> 20} MiB, peak {sampler.peak >> 20} MiB")
        assert growth < MAX_GROWTH, f"edge grew by {growth >> 20} MiB while streaming"
    finally:
        e.stop()
