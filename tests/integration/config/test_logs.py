"""Logs a user reads: the access log (common and json, buffered), json logs, the parser in use."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from tests.harness import Edge, Proc, get, lb


def wait_lines(path, count: int, timeout: float = 5.0) -> list[str]:
    """The access log's lines, but the harness's own /ready polling."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            lines = [line for line in path.read_text().splitlines() if "/ready" not in line]
            if len(lines) >= count:
                return lines
        time.sleep(0.05)
    raise TimeoutError(f"{path} has fewer than {count} lines")


def dyn(whoami) -> dict:
    return {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
            "services": {"s": lb(whoami.url)},
        }
    }


@pytest.mark.parametrize("fmt", ["common", "json"])
def test_access_log_to_file(tmp_path, whoami, fmt):
    log_path = tmp_path / "access.log"
    e = Edge(
        tmp_path,
        dyn(whoami),
        static_extra={"accessLog": {"filePath": str(log_path), "format": fmt}},
    )
    try:
        assert get(e.port, "/x?y=1", host="a.test")[0] == 200
        assert get(e.port, "/", host="none.test")[0] == 404
        lines = wait_lines(log_path, 2)
    finally:
        e.stop()
    if fmt == "json":
        first, second = (json.loads(line) for line in lines[:2])
        assert first["RequestPath"] == "/x?y=1" and first["DownstreamStatus"] == 200
        assert first["RouterName"] == "a@file" and first["ServiceURL"] == whoami.url
        assert second["DownstreamStatus"] == 404 and "RouterName" not in second  # as Traefik
    else:
        assert re.match(
            r'127\.0\.0\.1 - - \[.+\] "GET /x\?y=1 HTTP/1\.1" 200 \d+ .*"a@file"', lines[0]
        ), lines[0]
        assert '" 404 ' in lines[1]


def test_json_log_format(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), static_extra={"log": {"level": "INFO", "format": "json"}})
    try:
        get(e.port, "/", host="a.test")
    finally:
        e.stop()
    records = [json.loads(line) for line in e.lines if line.startswith("{")]
    assert records, e.log
    assert any("listening on" in r["msg"] and r["level"] == "info" for r in records)


def test_http_parser_flag_overrides_the_static_file(tmp_path, whoami):
    e = Edge(tmp_path, dyn(whoami), parser="httptools")
    e.stop()
    assert "(httptools)" in e.log
    run = Proc(["run", "--config", str(e.static_path), "--http-parser", "h11"])
    try:
        run.wait_for(r"entrypoint web: listening on .* \(h11\)")
    finally:
        run.stop()


def wait_text(path: Path, needle: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never reached {path}")


@pytest.mark.parametrize("workers", [1, 2])
def test_sigusr1_reopens_the_access_log_for_logrotate(tmp_path, whoami, workers):
    """Traefik's SIGUSR1 closes and reopens its log files, which logrotate's postrotate
    sends after moving them away. Edge had no handler, and SIGUSR1's default action
    ends the process: a Traefik logrotate configuration killed edge (and every worker
    its pkill reached)."""
    log_path = tmp_path / "access.log"
    routes = {
        "http": {
            "routers": {"a": {"rule": "Host(`a.test`)", "service": "app"}},
            "services": {"app": lb(whoami.url)},
        }
    }
    extra = {"accessLog": {"filePath": str(log_path)}, "workers": workers}
    e = Edge(tmp_path, routes, static_extra=extra)
    try:
        assert get(e.port, "/before", host="a.test")[0] == 200
        wait_text(log_path, "GET /before ")
        rotated = tmp_path / "access.log.1"
        log_path.rename(rotated)
        e.signal(signal.SIGUSR1)
        processes = 1 + (workers if workers > 1 else 0)  # the supervisor sends it on
        deadline = time.monotonic() + 5
        while len(e.all_matches("log files reopened")) < processes:
            assert e.proc.poll() is None, f"edge ended on SIGUSR1:\n{e.log}"
            assert time.monotonic() < deadline, e.log
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while not log_path.exists():  # opened again where it was (by the writer's thread)
            assert time.monotonic() < deadline, e.log
            time.sleep(0.05)
        for i in range(8):  # with workers, let every worker log one
            assert get(e.port, f"/after{i}", host="a.test")[0] == 200
        text = wait_text(log_path, "GET /after")
        assert "/before" not in text
        assert "/after" not in rotated.read_text()
        assert e.proc.poll() is None  # still serving
    finally:
        assert e.stop() == 0
