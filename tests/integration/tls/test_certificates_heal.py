"""Certificates that fail for a transient reason heal, on a real edge (edge/tls/certs.py,
edge/app.py's Dataplane).

A descriptor shortage is made real: the test lowers a running edge's soft
RLIMIT_NOFILE (prlimit(2), what ``prlimit --pid`` calls) to its lowest free descriptor
number, so every descriptor edge asks for fails with EMFILE while those it holds (its
listeners, the connections the test opened before) keep working; putting the limit back
is every descriptor free again. Clients are Python's ssl and http.client.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import resource
import socket
import ssl
import sys
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, lb
from tests.integration.peers import https_get, peer_fingerprint

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prlimit(2) and /proc: Linux"
)


TOO_MANY = "a.crt: cannot read: Too many open files"


def open_descriptors(pid: int) -> set[int]:
    return {int(n) for n in os.listdir(f"/proc/{pid}/fd")}


def wait_accepted(pid: int, sock: socket.socket, timeout: float = 5.0) -> None:
    """Wait until process ``pid`` holds the other end of ``sock`` (a TCP connection on
    127.0.0.1): its socket's inode, from /proc/net/tcp, among the process's descriptors."""
    here, there = sock.getsockname()[1], sock.getpeername()[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        inodes = {
            row[9]
            for row in rows
            if int(row[1].split(":")[1], 16) == there and int(row[2].split(":")[1], 16) == here
        }
        links = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        if any(f"socket:[{inode}]" in links for inode in inodes if inode != "0"):
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} did not accept the connection from port {here}")


@contextlib.contextmanager
def descriptors_full(*pids: int) -> Iterator[None]:
    """Each process's descriptor table full until the block ends: its soft RLIMIT_NOFILE
    lowered to its lowest free descriptor number (an open, a memfd, an accept: EMFILE),
    then put back."""
    saved: dict[int, tuple[int, int]] = {}
    try:
        for pid in pids:
            _, hard = saved[pid] = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            used = open_descriptors(pid)
            lowest = next(n for n in itertools.count() if n not in used)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest, hard))
        yield
    finally:
        for pid, limits in saved.items():
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)


def https_routes(whoami, certificates: list[dict], *hosts: str) -> dict:
    return {
        "http": {
            "routers": {
                h.split(".")[0]: {"rule": f"Host(`{h}`)", "service": "who", "tls": {}}
                for h in hosts
            },
            "services": {"who": lb(whoami.url)},
        },
        "tls": {"certificates": certificates},
    }


def files(pair: tuple[str, str]) -> dict:
    return {"certFile": pair[0], "keyFile": pair[1]}


def fingerprint_or_error(port: int, server_name: str) -> str:
    """The fingerprint of the certificate served for ``server_name``, or why none was."""
    try:
        return peer_fingerprint(port, server_name)
    except (ssl.SSLError, OSError) as exc:
        return repr(exc)


def wait_count(e: Edge, pattern: str, count: int, timeout: float = 10.0) -> None:
    """Wait until ``pattern`` is in ``count`` lines of edge's log."""
    deadline = time.monotonic() + timeout
    while len(e.all_matches(pattern)) < count:
        assert time.monotonic() < deadline, f"{pattern!r} not seen {count} times:\n" + e.log
        time.sleep(0.05)


class API:
    """One keep-alive connection to the API, opened before the table fills: it needs no
    new descriptor in edge to be answered."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def router(self, name: str) -> dict:
        self.conn.request("GET", f"/api/http/routers/{name}")
        resp = self.conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body
        return json.loads(body)

    def close(self) -> None:
        self.conn.close()


def test_a_name_whose_context_failed_for_want_of_descriptors_is_served_once_they_are_free(
    tmp_path, whoami
):
    """The issue's log: 'tls.certificates[1] ... cannot build a TLS context: [Errno 24]'.
    The failed build was cached for the snapshot's life: once the descriptors were free
    again the name still got unrecognized_name, after SIGHUP, after an edit of the
    routes, while the API showed its router enabled. Now the handshake during the
    shortage gets internal_error, and the first connection a second later builds the
    context: the right certificate, without SIGHUP or a file edit."""
    pki = PKI("heal CA")
    a, b = pki.issue("a.test"), pki.issue("b.test")
    certificates = [files(b.write(tmp_path, "b")), files(a.write(tmp_path, "a"))]
    e = Edge(
        tmp_path,
        https_routes(whoami, certificates, "a.test", "b.test"),
        static_extra={"api": {"insecure": True}},
    )
    try:
        pid = e.proc.pid
        applied = e.applied()
        assert (
            peer_fingerprint(e.port, "b.test") == b.fingerprint
        )  # a.test's context is not built yet
        sock = socket.create_connection(
            ("127.0.0.1", e.port), timeout=5
        )  # accepted before the table fills
        wait_accepted(pid, sock)
        client = ssl._create_unverified_context()
        with descriptors_full(pid):
            with pytest.raises(ssl.SSLError) as refused:
                client.wrap_socket(sock, server_hostname="a.test")
            e.wait_for(
                r"certificates\[1\] with TLS options default: cannot build a TLS context: \[Errno 24\]"
            )
        sock.close()
        freed = time.monotonic()
        for attempt in itertools.count():
            try:
                served = peer_fingerprint(e.port, "a.test")
                break
            except ssl.SSLError as exc:
                assert time.monotonic() - freed < 5, (
                    f"a.test still refused ({exc}) after {attempt} tries:\n{e.log}"
                )
                time.sleep(0.1)
        assert served == a.fingerprint
        assert https_get(e.port, "a.test")[0] == 200
        assert refused.value.reason == "TLSV1_ALERT_INTERNAL_ERROR", (
            refused.value
        )  # edge's problem, not the name
        api = API(e.ports["traefik"])
        try:
            assert api.router("a@file")["status"] == "enabled"
        finally:
            api.close()
        assert e.all_matches(r"certificates\[1\] with TLS options default: TLS context built")
        assert e.applied() == applied  # healed by the connection: no round was needed
    finally:
        assert e.stop() == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_certificate_files_unreadable_for_want_of_descriptors_are_read_again_within_seconds(
    tmp_path, whoami, workers
):
    """A renewed certificate read while edge had no descriptor left: the round left it
    out (EMFILE) and kept that snapshot while the files' stamps held, so a.test's router
    stayed disabled until the files were touched again or edge restarted. Now the
    error is marked transient, the API says so, and the data plane runs a round again
    (1 s, then doubling up to 5 s) until the files read: once the descriptors are
    free, the renewed certificate is served and the router enabled within seconds, with
    no SIGHUP and no edit. A missing file stays a permanent error: its router stays
    disabled with the reason, and nothing is retried once the rest reads."""
    pki = PKI("heal CA")
    first, renewed, b = pki.issue("a.test"), pki.issue("a.test"), pki.issue("b.test")
    certificates = [
        files(first.write(tmp_path, "a")),
        files(b.write(tmp_path, "b")),
        {"certFile": str(tmp_path / "missing.crt"), "keyFile": str(tmp_path / "missing.key")},
    ]
    routes = https_routes(whoami, certificates, "a.test", "b.test", "c.test")
    e = Edge(tmp_path, routes, static_extra={"api": {"insecure": True}, "workers": workers})
    try:
        if workers == 1:
            pids = [e.proc.pid]
        else:
            matches = [
                e.wait_for(rf"worker {k} \(pid (\d+)\): serving") for k in range(1, workers + 1)
            ]
            pids = [int(m.group(1)) for m in matches]
        assert peer_fingerprint(e.port, "a.test") == first.fingerprint
        apis = [
            API(e.ports["traefik"]) for _ in range(4 * workers)
        ]  # SO_REUSEPORT: some reach each worker
        try:
            c = apis[0].router("c@file")
            assert c["status"] == "disabled" and any(
                "missing.crt: no such file" in m for m in c["error"]
            ), c
            assert all(
                api.router("a@file")["status"] == "enabled" for api in apis
            )  # each connected now
            with descriptors_full(*pids):
                renewed.write(tmp_path, "a")  # renewed in place: the certificate poll runs a round
                # each serving process left the file out
                wait_count(
                    e, r"certificate left out: .*a\.crt: cannot read: Too many open files", workers
                )
                deadline = time.monotonic() + 5  # every worker's API: its own round committed
                while True:
                    shown = [api.router("a@file") for api in apis]
                    if all(
                        r["status"] == "disabled" and any(TOO_MANY in m for m in r["error"])
                        for r in shown
                    ):
                        break
                    assert time.monotonic() < deadline, shown
                    time.sleep(0.1)
            freed = time.monotonic()
            # Until the next round the entry point has no HTTPS router left (both files
            # unreadable, every TLS router lost its certificate): TLS gets plain HTTP.
            while {fingerprint_or_error(e.port, "a.test") for _ in range(4 * workers)} != {
                renewed.fingerprint
            }:
                assert time.monotonic() - freed < 12, (
                    "the renewed certificate is not served:\n" + e.log
                )
                time.sleep(0.2)
            # what the API said meanwhile: the reason, and that it passes
            assert all(
                any("Too many open files (transient: retried)" in m for m in r["error"])
                for r in shown
            )
            assert len(e.all_matches(r"reading them again in 1s")) >= workers
            for api in apis:
                router = api.router("a@file")
                assert router["status"] == "enabled" and "error" not in router, router
                c = api.router("c@file")
                assert c["status"] == "disabled" and any("no such file" in m for m in c["error"]), c
        finally:
            for api in apis:
                api.close()
        # Healed: no more rounds are asked for (the missing file is not retried).
        retries = len(e.all_matches(r"reading them again in"))
        time.sleep(2.5)
        assert len(e.all_matches(r"reading them again in")) == retries
    finally:
        assert e.stop() == 0
