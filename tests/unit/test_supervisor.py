"""The supervisor's pure parts: readiness bookkeeping, port reservation, worker log lines."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket

import pytest

from edge.config.loader import decode_static
from edge.ipc import Origins
from edge.logs import JSONFormatter
from edge.supervisor import (
    Readiness,
    WorkersOpened,
    join_host_port,
    reserve,
    reserve_ports,
    tag_worker_logs,
)

# --- readiness --------------------------------------------------------------------------


def test_not_ready_before_the_configuration_is_complete():
    r = Readiness([1, 2])
    assert r.acked(1, 0) == [] and r.acked(2, 0) == []
    assert r.acked(1, 1) == [] and r.acked(2, 1) == []  # generation 1, but not complete yet
    assert not r.all_ready


def test_ready_only_when_every_worker_acked_the_complete_generation():
    r = Readiness([1, 2, 3])
    for k in (1, 2, 3):
        r.acked(k, 0)
    assert r.configured(2) == []  # generation 2 holds every provider's first configuration
    assert r.acked(1, 2) == []
    assert r.acked(2, 1) == []  # an older generation does not count
    assert r.acked(2, 2) == []
    assert not r.all_ready
    assert sorted(r.acked(3, 3)) == [1, 2, 3]  # a newer one does
    assert r.all_ready and all(r.is_ready(k) for k in (1, 2, 3))
    assert r.acked(1, 4) == []  # told once


def test_acks_before_configured():
    r = Readiness([1, 2])
    r.acked(1, 1)
    r.acked(2, 1)
    assert sorted(r.configured(1)) == [1, 2]
    assert r.configured(5) == []  # the first complete generation is remembered
    assert r.required == 1


def test_no_provider_means_generation_zero():
    r = Readiness([1, 2])
    assert r.configured(0) == []
    assert r.acked(1, 0) == []
    assert sorted(r.acked(2, 0)) == [1, 2]


def test_a_dead_worker_blocks_the_first_readiness():
    r = Readiness([1, 2])
    r.configured(1)
    r.acked(1, 1)
    r.died(2)
    assert not r.all_ready
    r.spawned(2, 1)
    assert sorted(r.acked(2, 1)) == [1, 2]


def test_restarted_worker_ready_once_it_caught_up():
    r = Readiness([1, 2])
    r.configured(1)
    r.acked(1, 1)
    r.acked(2, 1)
    assert r.all_ready
    r.died(2)
    assert not r.is_ready(2) and r.is_ready(1)  # the others stay ready
    r.spawned(2, 5)  # restarted while generation 5 is the latest
    assert r.acked(2, 0) == []  # started, nothing applied
    assert r.acked(2, 4) == []  # not the latest (cannot happen, but must not count)
    assert r.acked(2, 5) == [2]
    assert r.is_ready(2)


def test_applied_by_all():
    r = Readiness([1, 2])
    assert r.applied_by_all() == -1
    r.acked(1, 3)
    r.acked(2, 2)
    assert r.applied_by_all() == 2
    r.died(1)
    assert r.applied_by_all() == -1


# --- ports ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "address"),
    [
        ("", 80, ":80"),
        ("127.0.0.1", 8080, "127.0.0.1:8080"),
        ("::1", 443, "[::1]:443"),
        ("localhost", 1, "localhost:1"),
    ],
)
def test_join_host_port(host, port, address):
    assert join_host_port(host, port) == address


def test_reserved_port_is_shared_with_so_reuseport():
    (held,) = reserve("127.0.0.1", 0)
    try:
        port = held.getsockname()[1]
        assert port != 0
        assert held.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
        # A worker binds the same port (SO_REUSEPORT) and accepts; the reservation never does.
        worker = socket.socket()
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        worker.bind(("127.0.0.1", port))
        worker.listen()
        worker.settimeout(2)
        for _ in range(20):
            client = socket.create_connection(("127.0.0.1", port), timeout=2)
            conn, _ = worker.accept()
            conn.close()
            client.close()
        worker.close()
        # Nobody listening: refused, although the port stays reserved.
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        other = socket.socket()  # a program without SO_REUSEPORT cannot take it
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        other.close()
    finally:
        held.close()


def test_reserve_a_taken_port_fails_with_the_address():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(OSError, match=r"127\.0\.0\.1:\d+"):
            reserve("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


def test_reserve_ports_rewrites_every_entrypoint():
    # UDP ports are reserved too (issue 9): a connected reservation socket gets no datagrams.
    # ping needs "traefik": defined here on port 0 (the default :8080 may be taken).
    static = decode_static(
        {
            "entryPoints": {
                "web": {
                    "address": "127.0.0.1:0",
                    "transport": {"lifeCycle": {"graceTimeOut": "2s"}},
                },
                "traefik": {"address": "127.0.0.1:0"},
                "dns": {"address": "127.0.0.1:0/udp"},
            },
            "ping": {},
        }
    )
    worker_static, reserved = reserve_ports(static)
    try:
        assert set(reserved) == {"web", "traefik", "dns"}
        for name in ("web", "traefik", "dns"):
            ep = worker_static.entry_points[name]
            assert ep.host == "127.0.0.1"
            assert ep.port == reserved[name][0].getsockname()[1] != 0
        assert worker_static.entry_points["web"].transport.life_cycle.grace_time_out == 2.0
        assert worker_static.entry_points["dns"].protocol == "udp"
        assert reserved["dns"][0].type == socket.SOCK_DGRAM
        assert worker_static.entry_points["web"].port != worker_static.entry_points["traefik"].port
    finally:
        for socks in reserved.values():
            for s in socks:
                s.close()


# --- worker log lines -------------------------------------------------------------------


@pytest.fixture
def root_handler():
    root = logging.getLogger()
    saved = list(root.handlers)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root.handlers = [handler]
    yield handler, stream
    root.handlers = saved


def test_worker_lines_name_the_worker(root_handler):
    handler, stream = root_handler
    handler.setFormatter(logging.Formatter("%(message)s"))
    tag_worker_logs(3)
    logging.getLogger("edge.test").warning("hello %s", "there")
    assert "[worker 3] edge.test: hello there" in stream.getvalue()


def test_worker_json_lines_have_a_worker_field(root_handler):
    handler, stream = root_handler
    handler.setFormatter(JSONFormatter())
    tag_worker_logs(2)
    logging.getLogger("edge.test").warning('quote " and brace }')
    entry = json.loads(stream.getvalue())
    assert (
        entry["worker"] == 2
        and entry["msg"] == 'quote " and brace }'
        and entry["logger"] == "edge.test"
    )


def test_reserve_ports_names_the_entrypoint_it_cannot_bind():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        static = decode_static({"entryPoints": {"web": {"address": f"127.0.0.1:{port}"}}})
        with pytest.raises(OSError, match=rf"entrypoint web: .*127\.0\.0\.1:{port}"):
            reserve_ports(static)
    finally:
        busy.close()


def test_workers_opened_is_the_union_over_live_workers():
    """The ports the workers could not bind, as the Gateway source reads them: each
    worker's word replaces its last, a dead worker's goes with it, followers hear only
    changes, and what a provider names reaches the workers as one Origins message."""
    sent: list[Origins] = []

    async def scenario() -> list[dict[str, str]]:
        opened = WorkersOpened(asyncio.get_running_loop(), sent.append)
        seen: list[dict[str, str]] = []
        opened.follow(lambda: seen.append(dict(opened.errors)))
        opened.reported(1, {":8443": "Address already in use"})
        opened.reported(2, {":8443": "Permission denied", ":53/udp": "Permission denied"})
        opened.reported(2, {":8443": "Permission denied", ":53/udp": "Permission denied"})
        opened.reported(1, {})  # worker 1 bound it: worker 2 still cannot
        opened.gone(2)  # worker 2 exited
        opened.gone(2)
        opened.name_origins("gw", {":8443": ("Gateway default/gw listener https",)})
        opened.name_origins("gw", {":8443": ("Gateway default/gw listener https",)})
        await asyncio.sleep(0)
        return seen

    seen = asyncio.run(scenario())
    assert seen == [
        {":8443": "Address already in use"},
        {":8443": "Address already in use", ":53/udp": "Permission denied"},
        {":8443": "Permission denied", ":53/udp": "Permission denied"},
        {},
    ]
    assert sent == [Origins({"gw": {":8443": ["Gateway default/gw listener https"]}})]
