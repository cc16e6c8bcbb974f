"""An access log that cannot be written never stalls or stops serving: a full device
(``/dev/full``, a 64 KiB tmpfs filled up), a path that cannot be opened, a pipe nobody
reads. Lines that cannot be written are dropped and counted, the log says so at most
once per ten seconds, and writing resumes once it can (room again, the path fixed, a
reader at the pipe, SIGUSR1).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

import pytest

from tests.harness import Edge, get, lb

DROPPED = r"access log: (\d+) lines dropped: (.*)"


def routes(whoami) -> dict:
    return {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }


def serve(e: Edge, count: int, path: str = "/") -> float:
    """``count`` requests, each answered 200; the longest one took (seconds)."""
    longest = 0.0
    for _ in range(count):
        started = time.monotonic()
        assert get(e.port, path, host="a.test", timeout=10)[0] == 200
        longest = max(longest, time.monotonic() - started)
    return longest


def dropped(e: Edge) -> int:
    return sum(int(m[1]) for m in e.all_matches(DROPPED))


def test_a_full_device_drops_lines_and_says_so_once(tmp_path, whoami):
    """/dev/full takes every write with ENOSPC: requests are served, every line is
    counted as dropped, and the error is logged once however many requests follow."""
    e = Edge(
        tmp_path,
        routes(whoami),
        static_extra={"accessLog": {"filePath": "/dev/full", "format": "json"}},
    )
    try:
        serve(e, 20)
        e.wait_for(DROPPED, timeout=10)
        serve(e, 20)
        time.sleep(0.5)
        lines = e.all_matches(DROPPED)
        assert len(lines) == 1, lines
        assert "/dev/full: No space left on device" in lines[0][2]
        assert get(e.ports["traefik"], "/ping")[0] == 200
    finally:
        code = e.stop()
    assert code == 0, e.log
    # Every line is counted: the first report's, and the rest in the last one at the stop.
    assert dropped(e) == 40, e.all_matches(DROPPED)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only), unmounted at the end."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_disk_that_fills_up_then_has_room_again(tmp_path, whoami, tiny_tmpfs):
    """The log's disk fills up: requests go on being served, lines are dropped and
    counted; once there is room again (the file emptied), lines are written again,
    each whole (a line a failed write cut is ended first)."""
    log = tiny_tmpfs / "access.log"
    static = {"accessLog": {"filePath": str(log), "format": "json"}}
    e = Edge(tmp_path, routes(whoami), static_extra=static)
    try:
        # Lines of about 1 KiB: the 64 KiB fill up within 100 requests.
        longest = serve(e, 150, "/" + "p" * 300)
        e.wait_for(DROPPED, timeout=10)
        assert longest < 5, longest
        assert "No space left on device" in e.all_matches(DROPPED)[0][2]
        with open(log, "r+b") as f:  # room again (edge appends: it writes at the new end)
            f.truncate(0)
        serve(e, 5, "/after")
        deadline = time.monotonic() + 5
        while log.read_text().count('"RequestPath":"/after"') < 5:
            assert time.monotonic() < deadline, e.log
            time.sleep(0.05)
        records = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    finally:
        code = e.stop()
    assert code == 0, e.log
    paths = [r["RequestPath"] for r in records]
    assert paths[-5:] == ["/after"] * 5, paths


def test_a_path_that_cannot_be_opened(tmp_path, whoami):
    """A log path whose folder is a file: edge starts and serves (it used to fail to
    start), says why lines are dropped, and writes them once the path can be opened:
    retried every second, and at once on SIGUSR1."""
    blocker = tmp_path / "logs"
    blocker.write_text("a file where the folder should be")
    log = blocker / "access.log"
    static = {"accessLog": {"filePath": str(log), "format": "json"}}
    e = Edge(tmp_path, routes(whoami), static_extra=static)
    try:
        serve(e, 3, "/before")
        line = e.wait_for(DROPPED, timeout=10)
        assert f"cannot open {log}: Not a directory" in line[2]
        blocker.unlink()
        blocker.mkdir()
        e.signal(signal.SIGUSR1)
        e.wait_for("log files reopened", timeout=5)
        serve(e, 3, "/after")
        deadline = time.monotonic() + 5
        while not (log.exists() and log.read_text().count('"RequestPath":"/after"') == 3):
            assert time.monotonic() < deadline, e.log
            time.sleep(0.05)
    finally:
        code = e.stop()
    assert code == 0, e.log


def test_a_pipe_nobody_reads_never_stalls_serving(tmp_path, whoami):
    """The log is a FIFO: at first with no reader (opening it blocks), then a reader
    that does not read (writing blocks once the pipe's buffer is full). The writer's
    thread waits; the requests do not. Once read, the lines waiting come out."""
    fifo = tmp_path / "access.fifo"
    os.mkfifo(fifo)
    static = {"accessLog": {"filePath": str(fifo), "format": "json"}}
    e = Edge(tmp_path, routes(whoami), static_extra=static)
    reader = None
    try:
        assert serve(e, 50, "/unread") < 5
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        # Lines of about 4 KiB: the pipe's 64 KiB fill up and the writes block.
        assert serve(e, 100, "/full/" + "p" * 3000) < 5
        assert get(e.ports["traefik"], "/ping")[0] == 200
        got = b""
        deadline = time.monotonic() + 20
        while got.count(b"\n") < 150 and time.monotonic() < deadline:
            if select.select([reader], [], [], 0.5)[0]:
                got += os.read(reader, 1 << 20)
    finally:
        code = e.stop()
        if reader is not None:
            os.close(reader)
    assert code == 0, e.log
    records = [json.loads(x) for x in got.splitlines()]
    assert len(records) == 150 and records[0]["RequestPath"] == "/unread"
