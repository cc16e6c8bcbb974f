"""Logs a user reads: the access log (common and json, buffered), json logs, the parser in use."""

from __future__ import annotations

import json
import re
import time

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
        assert second["DownstreamStatus"] == 404 and second["RouterName"] == ""
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
