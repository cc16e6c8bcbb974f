"""The README's demo, as a user runs it: `edge demo` on the bundled configuration."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import ROOT, Proc, get

DEMO_PORTS = (8000, 8080, 9101, 9102, 9103, 9104)


@pytest.fixture(autouse=True)
def one_demo_at_a_time() -> Iterator[None]:
    """The demo listens on fixed ports, as the README runs it: one demo at a time on
    this machine, even with the suite spread over pytest-xdist's workers (a lock file
    in the temp dir, released when its test ends)."""
    with open(Path(tempfile.gettempdir()) / "edge-tests-demo-ports.lock", "w") as lock:
        deadline = time.monotonic() + 60
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail("another test held the demo's ports for 60 s")
                time.sleep(0.1)
        yield


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_demo_routes_hosts_and_prefix():
    busy = [p for p in DEMO_PORTS if not _free(p)]
    if busy:
        pytest.skip(f"the demo's fixed ports {busy} are in use on this machine")
    demo = Proc(["demo"])
    try:
        deadline = time.monotonic() + 15
        while get(8080, "/ready")[0] != 200:
            assert time.monotonic() < deadline, demo.log
            time.sleep(0.1)
        names = [json.loads(get(8000, "/", host="a.localhost")[2])["name"] for _ in range(8)]
        assert sorted(set(names)) == ["app-a-1", "app-a-2"]
        assert names.count("app-a-1") == 6  # weights 3:1
        assert json.loads(get(8000, "/", host="b.localhost")[2])["name"] == "app-b-1"
        api = json.loads(get(8000, "/api/users")[2])
        assert api["name"] == "api-1" and api["path"] == "/users"
        assert get(8000, "/", host="nothing.localhost")[0] == 404
        assert get(8080, "/ping")[0] == 200
    finally:
        assert demo.stop() == 0, demo.log
    for port in DEMO_PORTS:  # edge and every whoami it started are gone
        deadline = time.monotonic() + 5
        while not _free(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _free(port), f"port {port} still bound after the demo stopped"


def test_ctrl_c_drains_edge_before_the_backends_stop():
    """Ctrl-C in a terminal is SIGINT to the whole foreground process group: edge drains
    (a request in flight gets its answer), then the demo stops its backends."""
    busy = [p for p in DEMO_PORTS if not _free(p)]
    if busy:
        pytest.skip(f"the demo's fixed ports {busy} are in use on this machine")
    demo = subprocess.Popen(
        [sys.executable, "-m", "edge", "demo"],
        cwd=ROOT,
        process_group=0,  # as a shell puts a job in its own group
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 15
        while get(8080, "/ready")[0] != 200:
            assert time.monotonic() < deadline and demo.poll() is None, "demo never became ready"
            time.sleep(0.1)
        answer: list = []
        slow = threading.Thread(
            target=lambda: answer.append(get(8000, "/?delay=2", host="b.localhost", timeout=15))
        )
        slow.start()
        deadline = time.monotonic() + 5  # edge forwarded it to app-b: it is in flight
        while not _in_flight(9103):
            assert time.monotonic() < deadline, "the slow request never arrived"
            time.sleep(0.02)
        os.killpg(demo.pid, signal.SIGINT)
        slow.join(timeout=15)
        assert answer and answer[0][0] == 200, answer
        assert json.loads(answer[0][2])["name"] == "app-b-1"
        assert demo.wait(timeout=20) == 0
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(timeout=5)
        _, err = demo.communicate(timeout=5)
    assert "stopping: draining" in err, err
    for port in DEMO_PORTS:  # edge and every whoami it started are gone
        deadline = time.monotonic() + 5
        while not _free(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _free(port), f"port {port} still bound after the demo stopped"


def _in_flight(port: int) -> bool:
    """A connection to ``port`` is established (``ss``, from the kernel)."""
    out = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( dport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=5,
    )
    return bool(out.stdout.strip())
