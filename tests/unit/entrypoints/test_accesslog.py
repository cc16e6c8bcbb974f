"""The access log's parts that need no edge: Go's spellings, what the configuration
resolves to, the TCP and UDP lines, and the writer's thread against real files (a
regular file, /dev/full, a path that cannot be opened, a FIFO nobody reads)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from types import SimpleNamespace

import pytest

from edge.config.loader import decode_static
from edge.entrypoints import accesslog
from edge.entrypoints.accesslog import (
    GO_CIPHERS,
    AccessLogger,
    LogWriter,
    _fraction,
    _split_host_port,
    canonical,
)
from edge.udp.sessions import Counters, Tally


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def logger(tmp_path, loop, **config) -> AccessLogger:
    static = decode_static({"accessLog": {"filePath": str(tmp_path / "access.log"), **config}})
    assert static.access_log is not None
    return AccessLogger(static.access_log, loop)


def written(log: AccessLogger, path) -> list[str]:
    log.flush()
    assert log.writer.wait_idle(5)
    return path.read_text().splitlines()


@pytest.mark.parametrize(
    ("name", "spelt"),
    [
        ("user-agent", "User-Agent"),
        ("X-FORWARDED-FOR", "X-Forwarded-For"),
        ("www-authenticate", "Www-Authenticate"),
        ("content-md5", "Content-Md5"),
        ("x", "X"),
        ("bad name", "bad name"),  # not a token: left as it is, as Go does
        ("ünï", "ünï"),
    ],
)
def test_header_names_are_spelt_as_go_spells_them(name, spelt):
    assert canonical(name) == spelt


@pytest.mark.parametrize(
    ("value", "split"),
    [
        ("a.test", ("a.test", "-")),
        ("a.test:8080", ("a.test", "8080")),
        ("[::1]:80", ("::1", "80")),
        ("[::1]", ("[::1]", "-")),
        ("::1", ("::1", "-")),
        ("a.test:", ("a.test:", "-")),
    ],
)
def test_hosts_split_as_traefik_splits_them(value, split):
    assert _split_host_port(value) == split


def test_fractions_of_a_second_as_go_writes_them():
    assert _fraction(0) == ""
    assert _fraction(500_000_000) == ".5"
    assert _fraction(123_456_789) == ".123456789"
    assert _fraction(1_000) == ".000001"


def test_cipher_names_are_go_s():
    assert GO_CIPHERS["ECDHE-ECDSA-AES128-GCM-SHA256"] == "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    # Go has two names for ChaCha20 suites; CipherSuiteName gives the longer one.
    assert (
        GO_CIPHERS["ECDHE-RSA-CHACHA20-POLY1305"] == "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
    )


# -- what the configuration resolves to --------------------------------------------------


def test_fields_names_fold_case_and_override_the_default(tmp_path, loop):
    log = logger(
        tmp_path,
        loop,
        fields={"defaultMode": "drop", "names": {"routername": "keep", "DURATION": "keep"}},
    )
    try:
        assert {"RouterName", "Duration"} <= log.keep
        assert "ClientHost" not in log.keep and "StartUTC" not in log.keep
        assert not log.want_tls and not log.want_user and not log.headers_on
    finally:
        log.close()


def test_headers_are_looked_at_only_where_one_is_kept(tmp_path, loop):
    off = logger(tmp_path, loop, format="json")
    some = logger(tmp_path, loop, format="json", fields={"headers": {"names": {"X-A": "redact"}}})
    try:
        assert not off.headers_on and off.header_default == "drop"
        assert some.headers_on and some.header_modes == {b"x-a": "redact"}
    finally:
        off.close()
        some.close()


def test_status_code_filters_are_ranges(tmp_path, loop):
    log = logger(tmp_path, loop, filters={"statusCodes": ["404", "500-502"], "minDuration": "1s"})
    try:
        assert log.filters is not None
        assert log.filters.statuses == {404, 500, 501, 502}
        assert log.filters.min_duration == 1.0 and not log.filters.retry
    finally:
        log.close()
    empty = logger(tmp_path, loop, filters={})
    try:
        assert empty.filters is None  # empty filters keep every line, as Traefik's
    finally:
        empty.close()


# -- TCP and UDP lines ----------------------------------------------------------------


def relay(up: int, down: int, seconds: float) -> SimpleNamespace:
    return SimpleNamespace(
        splice=SimpleNamespace(bytes_a_to_b=up, bytes_b_to_a=down),
        server=SimpleNamespace(service="echo@file", address="10.0.0.2:5432"),
        client_ip="192.0.2.7",
        peer=("192.0.2.7", 40001),
        route_name="db@file",
        opened=time.monotonic() - seconds,
    )


def test_a_tcp_line_in_json(tmp_path, loop):
    log = logger(tmp_path, loop, format="json")
    try:
        log.relay("web", relay(10, 2000, 1.5))  # type: ignore[arg-type]
        (line,) = written(log, tmp_path / "access.log")
    finally:
        log.close()
    r = json.loads(line)
    assert r.pop("time") and r.pop("StartUTC") and r.pop("StartLocal")
    assert 1.5e9 <= r.pop("Duration") < 3e9
    assert r == {
        "ClientAddr": "192.0.2.7:40001",
        "ClientHost": "192.0.2.7",
        "ClientPort": "40001",
        "DownstreamContentSize": 2000,
        "RequestContentSize": 10,
        "RequestProtocol": "TCP",
        "RouterName": "db@file",
        "ServiceAddr": "10.0.0.2:5432",
        "ServiceName": "echo@file",
        "entryPointName": "web",
        "level": "info",
        "msg": "",
    }


def test_a_udp_line_in_common_format_and_min_duration(tmp_path, loop):
    log = logger(tmp_path, loop, filters={"minDuration": "1s"})
    shared = Counters("dns@file", "resolvers@file")
    tally = Tally(shared)
    tally.datagrams_to_server += 2
    tally.bytes_to_server += 60
    tally.datagrams_to_client += 2
    tally.bytes_to_client += 300

    def session(seconds: float) -> SimpleNamespace:
        return SimpleNamespace(
            counters=tally,
            server=SimpleNamespace(address="10.0.0.53:53"),
            client=("::ffff:192.0.2.8", 5353),
            opened=time.monotonic() - seconds,
        )

    try:
        log.session("dns", session(0.1))  # type: ignore[arg-type]  # shorter: filtered out
        log.session("dns", session(2.0))  # type: ignore[arg-type]
        (line,) = written(log, tmp_path / "access.log")
    finally:
        log.close()
    head, _, tail = line.partition("] ")
    assert head.startswith("192.0.2.8 - - [") and head.endswith("+0000")
    assert tail.startswith('"UDP dns@file resolvers@file 10.0.0.53:53" 60 300 ')
    assert 2000 <= int(tail.rsplit(" ", 1)[1].removesuffix("ms")) < 3000


def test_a_tally_counts_its_session_and_the_shared_counters():
    shared = Counters("r", "s")
    shared.bytes_to_server = 100  # other sessions'
    a, b = Tally(shared), Tally(shared)
    a.bytes_to_server += 10
    b.bytes_to_server += 5
    a.datagrams_to_client += 1
    a.dropped += 1
    assert (a.bytes_to_server, b.bytes_to_server, shared.bytes_to_server) == (10, 5, 115)
    assert (a.datagrams_to_client, shared.datagrams_to_client) == (1, 1)
    assert shared.dropped == 1 and (a.router, a.service) == ("r", "s")
    moved = Counters("r", "s2")  # a reload gave the router another service
    a.shared = moved
    a.bytes_to_server += 1
    assert (a.bytes_to_server, moved.bytes_to_server, shared.bytes_to_server) == (11, 1, 115)


# -- the writer -----------------------------------------------------------------------


def test_the_writer_appends_whole_batches(tmp_path):
    path = tmp_path / "sub" / "access.log"  # its folder made, as Traefik makes it
    writer = LogWriter(str(path))
    try:
        assert writer.submit(b"one\ntwo\n", 2) and writer.submit(b"three\n", 1)
        assert writer.wait_idle(5)
    finally:
        assert writer.close(5)
    assert path.read_text() == "one\ntwo\nthree\n" and writer.written == 3
    assert writer.report() == (0, None)


def test_a_full_device_drops_and_counts():
    writer = LogWriter("/dev/full")
    try:
        writer.submit(b"a\nb\n", 2)
        writer.submit(b"c\n", 1)
        assert writer.wait_idle(5)
    finally:
        writer.close(5)
    dropped, error = writer.report()
    assert dropped == 3 and error == "/dev/full: No space left on device"
    assert writer.report() == (0, None)  # reported once


def test_a_path_that_cannot_be_opened_is_tried_again(tmp_path, monkeypatch):
    monkeypatch.setattr(accesslog, "RETRY_OPEN", 0.2)
    blocker = tmp_path / "logs"
    blocker.write_text("")
    path = blocker / "access.log"
    writer = LogWriter(str(path))
    try:
        writer.submit(b"lost\n", 1)
        assert writer.wait_idle(5)
        dropped, error = writer.report()
        assert dropped == 1 and error == f"cannot open {path}: Not a directory"
        blocker.unlink()
        blocker.mkdir()
        time.sleep(0.3)  # the next try, RETRY_OPEN after the last
        writer.submit(b"kept\n", 1)
        assert writer.wait_idle(5)
    finally:
        writer.close(5)
    assert path.read_text() == "kept\n"


def test_too_much_waiting_is_dropped_not_queued(tmp_path, monkeypatch):
    """A FIFO nobody opens: the thread waits in open(); submit never does, and past
    MAX_PENDING bytes it drops."""
    monkeypatch.setattr(accesslog, "MAX_PENDING", 1000)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = LogWriter(str(fifo))
    try:
        started = time.monotonic()
        results = [writer.submit(b"x" * 99 + b"\n", 1) for _ in range(20)]
        assert time.monotonic() - started < 1
        assert results.count(True) == 10 and results.count(False) == 10
        assert writer.report() == (10, "more than 1000 bytes wait to be written")
        # A reader comes: what waited is written.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            got = b""
            deadline = time.monotonic() + 5
            while len(got) < 1000 and time.monotonic() < deadline:
                try:
                    got += os.read(reader, 65536)
                except BlockingIOError:
                    time.sleep(0.01)
        finally:
            os.close(reader)
        assert got == (b"x" * 99 + b"\n") * 10
    finally:
        writer.close(2)


def test_close_gives_up_on_a_blocked_write(tmp_path):
    """A reader that never reads: writes block once the pipe is full; close() returns
    after its timeout instead of hanging the stop."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer = LogWriter(str(fifo))
    try:
        writer.submit(b"y" * (1 << 20), 1)  # more than a pipe holds
        started = time.monotonic()
        assert writer.close(0.3) is False
        assert time.monotonic() - started < 2
    finally:
        os.close(reader)  # the blocked write fails (EPIPE): the thread ends
    writer._thread.join(5)
    assert not writer._thread.is_alive()
    assert writer.report()[0] == 1
