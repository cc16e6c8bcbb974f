"""The access log's common (and genericCLF) format is Traefik's CLF, field for field,
through a real edge."""

from __future__ import annotations

import json
import re

from tests.harness import Edge, get, lb
from tests.integration.config.test_logs import dyn, wait_lines

CLF = re.compile(
    r'^(?P<client>\S+) - - \[(?P<time>[^\]]+)\] "(?P<method>\S+) (?P<path>\S+) (?P<proto>[^"]+)" '
    r"(?P<status>\d+) (?P<size>\d+) "
    r'"(?P<referer>(?:[^"\\]|\\.)*)" "(?P<agent>(?:[^"\\]|\\.)*)" (?P<count>\d+) '
    r'"(?P<router>[^"]*)" "(?P<url>[^"]*)" (?P<ms>\d+)ms$'
)


def test_common_format_fields(tmp_path, whoami):
    """Referer and User-Agent as kept by fields.headers (Traefik drops headers by default)."""
    log_path = tmp_path / "access.log"
    headers = {"names": {"Referer": "keep", "user-agent": "keep"}}
    static = {"accessLog": {"filePath": str(log_path), "fields": {"headers": headers}}}
    e = Edge(tmp_path, dyn(whoami), static_extra=static)
    try:
        status, _, body = get(
            e.port,
            "/x",
            host="a.test",
            headers={"Referer": "http://r.test/", "User-Agent": 'say "hi"'},
        )
        assert status == 200
        assert get(e.port, "/y", host="a.test")[0] == 200
        lines = wait_lines(log_path, 2)
    finally:
        e.stop()
    first, second = (CLF.match(line) for line in lines[:2])
    assert first is not None and second is not None, lines
    assert first["referer"] == "http://r.test/" and first["agent"] == r"say \"hi\""
    assert int(first["size"]) == len(body)
    assert (first["router"], first["url"]) == ("a@file", whoami.url)
    assert (second["referer"], second["agent"]) == ("-", "-")
    assert int(second["count"]) == int(first["count"]) + 1


def test_own_answers_log_their_size(tmp_path, whoami):
    log_path = tmp_path / "access.log"
    e = Edge(tmp_path, dyn(whoami), static_extra={"accessLog": {"filePath": str(log_path)}})
    try:
        status, _, body = get(e.port, "/", host="nobody.test")
        assert status == 404
        (line,) = wait_lines(log_path, 1)
    finally:
        e.stop()
    fields = CLF.match(line)
    assert fields is not None and fields["status"] == "404"
    assert int(fields["size"]) == len(body) > 0


def test_durations_are_not_rounded_to_milliseconds(tmp_path, whoami):
    log_path = tmp_path / "access.log"
    static = {"accessLog": {"filePath": str(log_path), "format": "json"}}
    e = Edge(
        tmp_path,
        {
            "http": {
                "routers": {"a": {"rule": "Host(`a.test`)", "service": "s"}},
                "services": {"s": lb(whoami.url)},
            }
        },
        static_extra=static,
    )
    try:
        for _ in range(5):
            assert get(e.port, "/", host="a.test")[0] == 200
        records = [json.loads(line) for line in wait_lines(log_path, 5)]
    finally:
        e.stop()
    # A millisecond clock gives whole milliseconds, give or take float rounding (< 1 us).
    durations = [r["Duration"] for r in records]
    assert not all(min(d % 1_000_000, -d % 1_000_000) < 1_000 for d in durations), durations


def test_headers_are_dropped_by_default(tmp_path, whoami):
    """As in Traefik (fields.headers.defaultMode drop): referer and user agent read "-"
    unless kept; redacted, they read "REDACTED"."""
    log_path = tmp_path / "access.log"
    e = Edge(tmp_path, dyn(whoami), static_extra={"accessLog": {"filePath": str(log_path)}})
    try:
        headers = {"Referer": "http://r.test/", "User-Agent": "agent/1"}
        assert get(e.port, "/", host="a.test", headers=headers)[0] == 200
        (line,) = wait_lines(log_path, 1)
    finally:
        e.stop()
    fields = CLF.match(line)
    assert fields is not None, line
    assert (fields["referer"], fields["agent"]) == ("-", "-")


def test_dropped_fields_read_a_dash(tmp_path, whoami):
    log_path = tmp_path / "access.log"
    fields = {
        "names": {"RouterName": "drop", "ServiceURL": "drop", "DownstreamStatus": "drop"},
        "headers": {"names": {"User-Agent": "redact"}},
    }
    static = {"accessLog": {"filePath": str(log_path), "fields": fields}}
    e = Edge(tmp_path, dyn(whoami), static_extra=static)
    try:
        assert get(e.port, "/", host="a.test", headers={"User-Agent": "agent/1"})[0] == 200
        (line,) = wait_lines(log_path, 1)
    finally:
        e.stop()
    assert re.fullmatch(
        r'127\.0\.0\.1 - - \[[^\]]+\] "GET / HTTP/1\.1" - \d+ "-" "REDACTED" \d+ "-" "-" \d+ms',
        line,
    ), line


def test_generic_clf(tmp_path, whoami):
    """genericCLF: the common format's first fields, up to the user agent."""
    log_path = tmp_path / "access.log"
    static = {"accessLog": {"filePath": str(log_path), "format": "genericCLF"}}
    e = Edge(tmp_path, dyn(whoami), static_extra=static)
    try:
        status, _, body = get(e.port, "/g?x=1", host="a.test")
        assert status == 200
        (line,) = wait_lines(log_path, 1)
    finally:
        e.stop()
    assert re.fullmatch(
        rf'127\.0\.0\.1 - - \[[^\]]+ \+0000\] "GET /g\?x=1 HTTP/1\.1" 200 {len(body)} "-" "-"', line
    ), line
