"""Large bodies through a live edge cost the kernel no page faults per buffer: the
allocator keeps what each read frees (edge.allocator). Measured on edge's own
process: minor faults per 1 MiB response over a keep-alive connection, after a
warm-up; before edge.allocator, glibc gave the memory back and faulted it in again,
about two faults per 4 KiB page streamed."""

from __future__ import annotations

import http.client

import pytest

from edge import allocator
from tests.harness import Edge, Whoami, lb

SIZE = 1 << 20
ROUNDS = 20


def minflt(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


@pytest.mark.skipif(
    not allocator.is_glibc(), reason="glibc's mallopt thresholds: this C library is not glibc"
)
def test_streaming_1mib_bodies_faults_no_pages(tmp_path):
    backend = Whoami()
    dyn = {
        "http": {
            "routers": {"app": {"rule": "Host(`app.example`)", "service": "app"}},
            "services": {"app": lb(backend.url)},
        }
    }
    edge = Edge(tmp_path, dyn)
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    try:

        def fetch() -> None:
            conn.request("GET", f"/data?size={SIZE}", headers={"Host": "app.example"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert len(resp.read()) == SIZE

        for _ in range(5):
            fetch()
        before = minflt(edge.proc.pid)
        for _ in range(ROUNDS):
            fetch()
        per_response = (minflt(edge.proc.pid) - before) / ROUNDS
        assert per_response < 32, f"{per_response:.0f} page faults per 1 MiB response"
    finally:
        conn.close()
        edge.stop()
        backend.stop()
