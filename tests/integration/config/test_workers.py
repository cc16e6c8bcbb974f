"""``workers: 2``: a supervisor and two worker processes sharing each port (SO_REUSEPORT).

Which worker served a connection is read from the kernel, not from edge: the test keeps
its client connections open and looks up, in /proc/net/tcp and /proc/<pid>/fd, which
worker process holds the server side of each (local port = the entrypoint's port).
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import ssl
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.harness import LISTEN_RE, Edge, get, lb

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs /proc and SO_REUSEPORT"
)

WORKERS = {"workers": 2}


def dyn(whoami, extra_routers: dict | None = None) -> dict:
    routers = {"a": {"rule": "Host(`a.test`)", "service": "svc-a"}}
    routers.update(extra_routers or {})
    return {
        "http": {
            "routers": routers,
            "services": {"svc-a": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
        }
    }


# --- processes and sockets, from /proc --------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of ``pid``, or None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[1] == pid and st[0] not in ("Z", "X"):
                out.append(int(entry))
    return sorted(out)


def wait_workers(
    e: Edge, n: int = 2, exclude: tuple[int, ...] = (), timeout: float = 10.0
) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in children(e.proc.pid) if p not in exclude]
        if len(pids) >= n:
            return pids
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n} workers not found (have {pids}):\n{e.log}")
        time.sleep(0.05)


def owners(pids: list[int], port: int) -> dict[int, int]:
    """For each pid: how many established TCP connections it holds whose local port is ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()
            local_port = int(f[1].rsplit(":", 1)[1], 16)
            if local_port == port and f[3] == "01":  # ESTABLISHED
                inodes.add(f[9])
    counts = {}
    for pid in pids:
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                n += 1
        counts[pid] = n
    return counts


def open_connections(
    port: int, n: int, host: str
) -> tuple[list[http.client.HTTPConnection], list[int]]:
    """``n`` fresh keep-alive connections, one request each; they stay open."""
    conns, statuses = [], []
    for _ in range(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/", headers={"Host": host})
            resp = conn.getresponse()
            resp.read()
            statuses.append(resp.status)
        except (OSError, http.client.HTTPException):
            statuses.append(0)
        conns.append(conn)
    return conns, statuses


def status(port: int, host: str) -> int:
    """The status of one request on a fresh connection; 0 when the connection failed."""
    try:
        return get(port, "/", host=host)[0]
    except (OSError, http.client.HTTPException):
        return 0


def close_all(conns) -> None:
    for conn in conns:
        conn.close()


def wait_log(e: Edge, pattern: str, timeout: float = 10.0, start: int = 0) -> re.Match:
    return e.wait_for(pattern, timeout=timeout, start=start)


def wait_generation(e: Edge, generation: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done = [
            int(m.group(1))
            for m in e.all_matches(r"configuration generation (\d+) applied by all 2 workers")
        ]
        if done and max(done) >= generation:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"generation {generation} never applied by every worker:\n{e.log}")
        time.sleep(0.02)


# --- tests ------------------------------------------------------------------------------


def test_one_worker_is_one_process(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami))
    try:
        assert get(e.port, "/", host="a.test")[0] == 200
        assert children(e.proc.pid) == []
        assert "supervisor" not in e.log
    finally:
        assert e.stop() == 0


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory, whoami):
    """One supervisor with two workers for the tests that neither restart nor stop it."""
    e = Edge(tmp_path_factory.mktemp("workers"), dyn(whoami), static_extra=WORKERS)
    yield e
    assert e.stop() == 0


def applied_by_all(e: Edge) -> int:
    """The newest generation every worker applied (0 before the first)."""
    done = e.all_matches(r"configuration generation (\d+) applied by all 2 workers")
    return max((int(m.group(1)) for m in done), default=0)


def test_both_workers_serve(two_workers):
    e = two_workers
    pids = wait_workers(e)
    assert len(pids) == 2
    # The port is resolved once: one "listening on" line per entrypoint, every worker on it.
    listening = e.all_matches(LISTEN_RE.pattern)
    assert sorted(m.group(1) for m in listening) == ["traefik", "web"]
    assert (
        len(
            e.all_matches(
                rf"\[worker [12]\] edge.entrypoints: entrypoint web: sharing 127.0.0.1:{e.port} "
            )
        )
        == 2
    )
    conns, statuses = open_connections(e.port, 200, "a.test")
    try:
        assert statuses == [200] * 200
        counts = owners(pids, e.port)
        assert sum(counts.values()) == 200, counts
        assert all(n > 0 for n in counts.values()), counts
    finally:
        close_all(conns)


def test_dynamic_change_reaches_every_worker(two_workers, whoami):
    e = two_workers
    wait_generation(e, 1)
    assert get(e.port, "/", host="new.test")[0] == 404
    generation, mark = applied_by_all(e), len(e.lines)
    e.write_dynamic(dyn(whoami, {"new": {"rule": "Host(`new.test`)", "service": "svc-a"}}))
    wait_generation(e, generation + 1)
    conns, statuses = open_connections(e.port, 50, "new.test")
    try:
        assert statuses == [200] * 50
        assert all(n > 0 for n in owners(wait_workers(e), e.port).values())
    finally:
        close_all(conns)
    applied = re.compile(r"\[worker [12]\] edge: configuration applied: .*web: 2 routers")
    assert len([line for line in e.lines[mark:] if applied.search(line)]) == 2


def test_sighup_rereads_the_providers(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), static_extra=WORKERS, watch=False)
    try:
        pids = wait_workers(e)
        e.write_dynamic(dyn(whoami, {"new": {"rule": "Host(`new.test`)", "service": "svc-a"}}))
        time.sleep(0.3)
        assert status(e.port, "new.test") == 404  # not watching: nothing changed
        e.signal(signal.SIGHUP)
        wait_generation(e, 2)
        assert [status(e.port, "new.test") for _ in range(20)] == [200] * 20
        assert wait_workers(e) == pids  # the workers were not restarted
    finally:
        assert e.stop() == 0


def test_ready_only_after_every_worker_applied(tmp_path, whoami):
    class Broken(Edge):  # the first file does not parse: no configuration at all
        def write_dynamic(self, dynamic):
            self.dynamic_path.write_text("http:\n  routers:\n    a: [rule\n")

    e = Broken(tmp_path, dyn(whoami), static_extra=WORKERS, wait_ready=False)
    try:
        wait_log(e, r"worker 2 \(pid \d+\): serving")
        wait_log(e, r"worker 1 \(pid \d+\): serving")
        traefik = e.ports["traefik"]
        for _ in range(20):  # fresh connections: both workers answer
            assert get(traefik, "/ping")[0] == 200
            assert get(traefik, "/ready")[0] == 503
        Edge.write_dynamic(e, dyn(whoami))
        e.wait_ready()
        # 200 is only possible once the supervisor heard both acks.
        wait_log(e, r"configuration generation 1 applied by all 2 workers", timeout=2)
        wait_log(e, r"all 2 workers ready \(generation 1\)", timeout=2)
        lines = e.log.splitlines()
        first_ready = next(i for i, line in enumerate(lines) if "all 2 workers ready" in line)
        acks = [
            i
            for i, line in enumerate(lines)
            if re.search(r"worker [12]: applied generation 1", line)
        ]
        assert len(acks) == 2 and max(acks) < first_ready
        for _ in range(20):
            assert get(traefik, "/ready")[0] == 200
    finally:
        assert e.stop() == 0


def test_killed_worker_is_restarted_with_current_routes(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), static_extra=WORKERS)
    try:
        e.write_dynamic(dyn(whoami, {"new": {"rule": "Host(`new.test`)", "service": "svc-a"}}))
        wait_generation(e, 2)
        victim, survivor = wait_workers(e)
        mark = len(e.lines)
        os.kill(victim, signal.SIGKILL)
        # Meanwhile the other worker serves; only the instant of the kill may lose a connection.
        statuses = [status(e.port, "new.test") for _ in range(20)]
        assert statuses.count(200) >= 17, statuses
        m = wait_log(
            e,
            rf"worker (\d) \(pid {victim}\) killed by SIGKILL after [\d.]+s; restarting it",
            start=mark,
        )
        k = m.group(1)
        new = wait_log(e, rf"worker {k}: started, pid (\d+)", start=mark)
        new_pid = int(new.group(1))
        wait_log(e, rf"worker {k} \(pid {new_pid}\): ready", start=mark)
        assert sorted(wait_workers(e)) == sorted([survivor, new_pid])
        assert not alive(victim)
        conns, statuses = open_connections(e.port, 60, "new.test")
        try:
            assert statuses == [200] * 60
            counts = owners([survivor, new_pid], e.port)
            assert counts[new_pid] > 0 and counts[survivor] > 0, counts
        finally:
            close_all(conns)
        assert get(e.ports["traefik"], "/ready")[0] == 200
    finally:
        assert e.stop() == 0


def test_sigterm_drains_and_leaves_no_worker(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), static_extra=WORKERS)
    pids = wait_workers(e)
    result = {}

    def slow():
        result["slow"] = get(e.port, "/?delay=1", host="a.test", timeout=10)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)
    e.signal(signal.SIGTERM)
    t.join(timeout=10)
    try:
        assert result["slow"][0] == 200
        assert e.proc.wait(timeout=20) == 0
        assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]
        assert get(e.port, "/", host="a.test")[0] == 0  # nothing listens any more
        assert len(e.all_matches(r"worker \d \(pid \d+\) exited with status 0")) == 2
    finally:
        e.stop()


def test_supervisor_killed_takes_the_workers_down(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), static_extra=WORKERS)
    pids = wait_workers(e)
    try:
        e.proc.kill()
        e.proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids), e.log
        assert get(e.port, "/", host="a.test")[0] == 0
        assert "the supervisor is gone" in e.log
    finally:
        for p in pids:  # never leave an orphan behind, even when the test fails
            if alive(p):
                os.kill(p, signal.SIGKILL)
        e.stop()


def test_restarted_workers_resume_sessions_issued_before(tmp_path, whoami):
    """Guard (passes before): with workers: 2, both workers killed and restarted by the
    supervisor get its ticket secret again in Start, so a session issued before the
    crash resumes on them (and they serve the current routes)."""
    from tests.fixtures.tls.pki import PKI
    from tests.integration.peers import resumed_get

    cert = PKI("pipeline CA").issue("a.test").write(tmp_path, "a")
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app", "tls": {}}},
            "services": {"app": lb(whoami.url)},
        },
        "tls": {"certificates": [{"certFile": cert[0], "keyFile": cert[1]}]},
    }
    e = Edge(tmp_path, routes, static_extra={"workers": 2})
    try:
        before = wait_workers(e)
        ctx = ssl._create_unverified_context()
        session = resumed_get(e.port, "a.test", ctx=ctx).session
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        wait_workers(e, exclude=tuple(before), timeout=15)
        deadline = time.monotonic() + 15
        while len(e.all_matches(r"worker \d \(pid \d+\): ready")) < 4:  # 2 at start, 2 now
            assert time.monotonic() < deadline, e.log
            time.sleep(0.05)
        for _ in range(6):
            got = resumed_get(e.port, "a.test", session, ctx)
            assert got.answer.startswith(b"HTTP/1.1 200") and got.reused
    finally:
        assert e.stop() == 0
