"""Prometheus metrics (edge.entrypoints.metrics): the hot path's counting, the sums
over label sets and processes, and the text exposition format 0.0.4."""

from __future__ import annotations

import asyncio
import math

import msgspec
import pytest
import uvloop

from edge.config.loader import Unsupported, decode_static
from edge.config.static import Prometheus
from edge.entrypoints import metrics as metrics_module
from edge.entrypoints.metrics import (
    DEFAULT_BUCKETS,
    FAMILIES,
    Registry,
    Samples,
    escape_label,
    render,
)
from edge.http.codec.headers import METHODS
from edge.http.server import exchange as exchange_module
from loadtest.bench_hotpath import LOADS, MIDDLEWARES, setup
from tests.unit.http.server.transport import Recorder

EP_TOTAL = "traefik_entrypoint_requests_total"
EP_DURATION = "traefik_entrypoint_request_duration_seconds"
EP = {"protocol": "http", "entrypoint": "web"}
ROUTER = {"protocol": "http", "router": "bench@file", "service": "backend@file"}
SERVICE = {"protocol": "http", "service": "backend@file"}
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello world\n"


def registry(**options) -> Registry:
    return Registry(Prometheus(**options))


class Edge:
    """An entry point's client connection counting into ``reg``'s meter of ``web``: the
    real connection, exchanges, router and pool of ``loadtest/bench_hotpath.py``'s
    setup, on transports that only record what is written (one route,
    ``Host(`bench.local`)`` to ``backend``)."""

    def __init__(self, reg: Registry, codec: str = "httptools", **setup_args) -> None:
        self.loop = uvloop.new_event_loop()
        self.meter = reg.meter("web")
        self.client, self.upstream = setup(
            self.loop, codec, transport=Recorder, metrics=self.meter, **setup_args
        )

    def exchange(self, request: bytes, response: bytes | None = OK) -> bytes:
        """Send ``request``; the server answers ``response`` if it goes upstream (None:
        edge answers itself). What the client got."""
        out = self.client.transport.data
        start = len(out)
        self.client.data_received(request)
        if response is not None:
            self.upstream.data_received(response)
        assert self.client.ex is None, "the exchange did not end"
        return bytes(out[start:])

    def close(self) -> None:
        self.loop.close()


def get(host: bytes = b"bench.local", method: bytes = b"GET", headers: bytes = b"") -> bytes:
    return b"%s / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (method, host, headers)


# -- counting: real exchanges ---------------------------------------------------------------


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_each_label_set_counts_its_exchanges(codec):
    reg = registry(add_routers_labels=True)
    edge = Edge(reg, codec)
    for _ in range(3):
        assert edge.exchange(get()).startswith(b"HTTP/1.1 200")
    post = b"POST /p HTTP/1.1\r\nHost: bench.local\r\nContent-Length: 7\r\n\r\npayload"
    failed = b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\nbad\n"
    assert edge.exchange(post, failed).startswith(b"HTTP/1.1 500")
    assert edge.exchange(get(b"nobody.test"), None).startswith(b"HTTP/1.1 404")
    edge.close()
    s = reg.collect()
    assert s.get(EP_TOTAL, code="200", method="GET", **EP) == 3
    assert s.get(EP_TOTAL, code="500", method="POST", **EP) == 1
    assert s.get(EP_TOTAL, code="404", method="GET", **EP) == 1
    assert s.get("traefik_entrypoint_responses_bytes_total", code="200", method="GET", **EP) == 36
    assert s.get("traefik_entrypoint_requests_bytes_total", code="500", method="POST", **EP) == 7
    assert s.get("traefik_router_requests_total", code="200", method="GET", **ROUTER) == 3
    assert s.get("traefik_service_requests_total", code="500", method="POST", **SERVICE) == 1
    # No router matched the 404: no router or service series for it.
    assert all(labels[0] != "404" for labels in s.values["traefik_router_requests_total"])
    assert all(labels[0] != "404" for labels in s.values["traefik_service_requests_total"])
    histogram = s.get(EP_DURATION, code="200", method="GET", **EP)
    assert sum(histogram[:-1]) == 3 and 0 < histogram[-1] < 3 * 0.1


def test_counters_keep_growing_across_scrapes():
    reg = registry()
    edge = Edge(reg)
    edge.exchange(get())
    first = reg.collect().get(EP_TOTAL, code="200", method="GET", **EP)
    edge.exchange(get())
    edge.exchange(get())
    again = reg.collect().get(EP_TOTAL, code="200", method="GET", **EP)
    edge.close()
    assert (first, again) == (1, 3)
    # Each scrape folds the cells: none of the counted routes is held after it.
    assert reg.meters["web"].cells == {}


def test_a_new_configuration_s_route_adds_to_the_same_series():
    reg = registry(add_routers_labels=True)
    first = Edge(reg)
    first.exchange(get())
    second = Edge(reg)  # the same configuration built again: other Route objects
    assert second.client.ctx.router is not first.client.ctx.router
    second.exchange(get())
    first.close()
    second.close()
    assert (
        reg.collect().get("traefik_router_requests_total", code="200", method="GET", **ROUTER) == 2
    )


def test_an_answer_before_any_server_is_the_router_s_not_the_service_s():
    reg = registry(add_routers_labels=True)
    edge = Edge(reg, middleware={"ipAllowList": {"sourceRange": ["192.0.2.1/32"]}})
    assert edge.exchange(get(), None).startswith(b"HTTP/1.1 403")
    edge.close()
    s = reg.collect()
    assert s.get("traefik_router_requests_total", code="403", method="GET", **ROUTER) == 1
    assert "traefik_service_requests_total" not in s.values


def test_a_router_s_answer_and_its_server_s_of_one_status_count_apart():
    """The same route, status and method, answered by a middleware (no server picked)
    and by the server, in turn: only the server's are the service's, on the cells'
    second use too (the exchange's lookup, not the meter's)."""
    reg = registry(add_routers_labels=True)
    edge = Edge(reg, middleware=MIDDLEWARES["basicAuth"])
    unauthorized = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 3\r\n\r\nup\n"
    for _ in range(3):
        served = edge.exchange(get(headers=LOADS["basicAuth"][0]), unauthorized)
        assert served.startswith(b"HTTP/1.1 401") and served.endswith(b"\r\n\r\nup\n")
        refused = edge.exchange(get(), None)
        assert refused.startswith(b"HTTP/1.1 401") and not refused.endswith(b"up\n")
    edge.close()
    s = reg.collect()
    assert s.get("traefik_router_requests_total", code="401", method="GET", **ROUTER) == 6
    assert s.get("traefik_service_requests_total", code="401", method="GET", **SERVICE) == 3


def test_a_meter_folds_its_cells_every_so_often(monkeypatch):
    """Cells hold each exchange's duration until a fold: one comes FOLD_EVERY after the
    first cell made since the last, scrape or not, so they never grow for long."""
    monkeypatch.setattr(metrics_module, "FOLD_EVERY", 0.05)
    reg = registry()
    edge = Edge(reg)
    meter = reg.meters["web"]
    edge.exchange(get())
    edge.exchange(get())
    assert [len(c.durations) for c in meter.cells.values()] == [2]
    edge.loop.run_until_complete(asyncio.sleep(0.5))
    assert meter.cells == {} and meter.timer is None
    edge.exchange(get())
    assert meter.timer is not None  # the next fold is due again
    edge.close()
    assert reg.collect().get(EP_TOTAL, code="200", method="GET", **EP) == 3


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_methods_outside_the_standard_ones_share_one_cell(codec):
    reg = registry()
    edge = Edge(reg, codec)
    odd = sorted(METHODS - {b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS"})
    odd = [m for m in odd if m not in (b"TRACE", b"PATCH")]
    for method in odd:
        assert edge.exchange(get(method=method)).startswith(b"HTTP/1.1 200"), method
    edge.exchange(get(method=b"PATCH"))
    edge.close()
    assert len(reg.meters["web"].cells) == 2  # EXTENSION_METHOD's and PATCH's
    s = reg.collect()
    assert s.get(EP_TOTAL, code="200", method="EXTENSION_METHOD", **EP) == len(odd) > 20
    assert s.get(EP_TOTAL, code="200", method="PATCH", **EP) == 1


def test_label_options_choose_the_families():
    reg = registry(add_entry_points_labels=False, add_services_labels=False)
    edge = Edge(reg)
    edge.exchange(get())
    edge.close()
    names = set(reg.collect().values)
    assert not any(
        n.startswith(("traefik_entrypoint_", "traefik_router_", "traefik_service_")) for n in names
    )


def test_the_access_log_still_gets_every_exchange():
    seen = []
    reg = registry()
    edge = Edge(reg, access_log=lambda ex, duration: seen.append((ex.status, duration)))
    edge.exchange(get(), b"HTTP/1.1 204 No Content\r\n\r\n")
    edge.close()
    assert [status for status, _ in seen] == [204]
    assert 0 < seen[0][1] < 1
    assert reg.collect().get(EP_TOTAL, code="204", method="GET", **EP) == 1


def test_a_duration_on_a_bound_falls_in_that_bucket(monkeypatch):
    """The exchange's clock made to say each duration: a bound is in its own bucket
    (Prometheus' ``le``), on the first one (which takes no bisect) or a later one."""
    clock = iter(())
    monkeypatch.setattr(exchange_module, "perf_counter", lambda: next(clock))
    reg = registry(buckets=[0.1, 1.0])
    edge = Edge(reg)
    for duration in (0.05, 0.1, 0.5, 1.0, 2.0):
        clock = iter((100.0, 100.0 + duration))  # the exchange's start, then its end
        edge.exchange(get())
    edge.close()
    buckets = reg.collect().get(EP_DURATION, code="200", method="GET", **EP)
    assert buckets[:-1] == [2, 2, 1]  # <= 0.1, <= 1.0, above
    assert buckets[-1] == pytest.approx(3.65)


def test_header_labels_label_requests_total_only():
    reg = registry(header_labels={"useragent": "User-Agent", "host": "Host"})
    edge = Edge(reg)
    edge.exchange(get(headers=b"user-agent: curl/8\r\n"))
    edge.exchange(get(headers=b"User-Agent: curl/8\r\n"))
    edge.exchange(get(headers=b"User-Agent: bot\r\nUser-Agent: other\r\n"))
    edge.exchange(get())
    edge.close()
    s = reg.collect()
    assert s.header_labels == ("useragent", "host")
    # Host is never a header's value, as in Traefik (Go takes it out of the headers).
    total = {"code": "200", "method": "GET", "host": "", **EP}
    assert s.get(EP_TOTAL, useragent="curl/8", **total) == 2
    assert s.get(EP_TOTAL, useragent="bot", **total) == 1  # a header's first value
    assert s.get(EP_TOTAL, useragent="", **total) == 1
    assert s.get(EP_DURATION, code="200", method="GET", **EP)[:-1] == [4, 0, 0, 0, 0]
    text = render(s).decode()
    assert (
        'traefik_entrypoint_requests_total{code="200",method="GET",protocol="http",'
        'entrypoint="web",useragent="curl/8",host=""} 2' in text
    )
    # They cross the workers' channel with the samples.
    back = Samples.from_rows(s.bounds, msgspec.msgpack.decode(msgspec.msgpack.encode(s.rows())))
    assert render(back) == render(s)


@pytest.mark.parametrize(
    ("labels", "why"),
    [({"code": "X-Code"}, "already"), ({"user-agent": "User-Agent"}, "not a Prometheus")],
)
def test_header_labels_must_be_new_label_names(labels, why):
    with pytest.raises(msgspec.ValidationError, match=why):
        msgspec.convert({"headerLabels": labels}, Prometheus)


def test_a_meter_nobody_scrapes_folds_its_cells_at_a_bound(monkeypatch):
    monkeypatch.setattr(metrics_module, "MAX_CELLS", 3)
    reg = registry()
    edge = Edge(reg, "h11")
    for status in (200, 201, 202, 203, 204):
        edge.exchange(get(), b"HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n" % status)
    edge.close()
    meter = reg.meters["web"]
    assert len(meter.cells) <= 3
    s = reg.collect()
    assert [s.get(EP_TOTAL, code=str(c), method="GET", **EP) for c in range(200, 205)] == [1] * 5


def test_metrics_exporters_edge_lacks_are_named_and_ignored():
    """``metrics.otlp`` (and Traefik's other exporters) only export beside the traffic:
    edge starts without them, Prometheus still read, and says which it ignores."""
    notices: list[Unsupported] = []
    config = {"metrics": {"prometheus": {"addRoutersLabels": True}, "otlp": {"http": {}}}}
    config["metrics"]["statsD"] = {"address": "localhost:8125"}
    static = decode_static(config, source="edge.yml", notices=notices)
    assert static.metrics is not None and static.metrics.prometheus is not None
    assert static.metrics.prometheus.add_routers_labels
    assert sorted(str(n) for n in notices) == [
        "edge.yml: $.metrics.otlp: not supported by this version of edge (ignored)",
        "edge.yml: $.metrics.statsD: not supported by this version of edge (ignored)",
    ]


def test_add_internals_is_the_registry_s_from_its_start():
    reg = Registry(Prometheus(), add_internals=True)
    assert reg.meter("web").internals and reg.meter("web").tls.internals
    assert not registry().meter("web").internals


def test_default_buckets_are_traefik_s():
    assert tuple(Prometheus().buckets) == DEFAULT_BUCKETS == (0.1, 0.3, 1.2, 5.0)


def test_buckets_must_be_finite():
    with pytest.raises(msgspec.ValidationError, match="buckets"):
        msgspec.convert({"buckets": [1, math.inf]}, Prometheus)


# -- the protocol label --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "protocol"),
    [
        ([], "http"),
        ([(b"Accept", b"text/html")], "http"),
        ([(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket")], "websocket"),
        ([(b"connection", b"keep-alive, upgrade"), (b"upgrade", b" WebSocket ")], "websocket"),
        ([(b"Connection", b"upgrade"), (b"Upgrade", b"h2c")], "http"),
        ([(b"Upgrade", b"websocket")], "http"),
        ([(b"Accept", b"text/event-stream")], "sse"),
        ([(b"ACCEPT", b"text/html, Text/Event-Stream")], "sse"),
        ([(b"Accept", b"text/event-stream;q=0.9")], "http"),  # an item, compared whole
        ([(b"Accept", b"text/html"), (b"Accept", b"text/event-stream")], "http"),  # the first
        ([(b"Content-Type", b"application/grpc")], "grpc"),
        ([(b"content-type", b"application/grpc+proto")], "grpc"),
        ([(b"Content-Type", b"application/grpc-web-text")], "grpc-web"),
        ([(b"Content-Type", b"Application/gRPC")], "http"),  # a prefix, as sent
        (
            [(b"Content-Type", b"application/grpc"), (b"Accept", b"text/event-stream")],
            "sse",
        ),
        (
            [
                (b"Accept", b"text/event-stream"),
                (b"Connection", b"upgrade"),
                (b"Upgrade", b"websocket"),
            ],
            "websocket",
        ),
    ],
)
def test_the_protocol_is_read_from_the_request_as_traefik_reads_it(fields, protocol):
    assert metrics_module.request_protocol(fields) == protocol


@pytest.mark.parametrize(
    ("value", "code"),
    [
        *[(b"0", 0), (b" 3", 3), (b"16", 16), (b'"NOT_FOUND"', 5)],
        *[(b"17", 2), (b"-1", 2), (b"x", 2), (b"", 2), (None, 2)],
    ],
)
def test_a_grpc_status_is_its_number_and_unknown_when_it_does_not_read(value, code):
    assert metrics_module.grpc_status(value) == code


SSE = b"Accept: text/event-stream\r\n"
STREAM = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"c\r\ndata: tick\n\n\r\n0\r\n\r\n"
)


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_an_event_stream_counts_as_sse_beside_plain_requests(codec):
    """A request asking for an event stream is ``sse`` whatever came before it on the
    same route, status and method (the express path's cell of plain ``http``); the
    express path's quick answer (Content-Length, in one read: httptools' quick
    parses) to one counts as ``http``, h11's general path reads every request."""
    reg = registry(add_routers_labels=True)
    edge = Edge(reg, codec)
    for request, response in [
        (get(headers=SSE), STREAM),
        (get(), OK),
        (get(), OK),
        (get(headers=SSE), STREAM),
        (get(headers=SSE), OK),
    ]:
        assert edge.exchange(request, response).startswith(b"HTTP/1.1 200")
    edge.close()
    s = reg.collect()
    get_ok = {"code": "200", "method": "GET"}
    quick = 1 if codec == "httptools" else 0
    assert s.get(EP_TOTAL, **get_ok, protocol="sse", entrypoint="web") == 3 - quick
    assert s.get(EP_TOTAL, **get_ok, **EP) == 2 + quick
    router = {**ROUTER, "protocol": "sse"}
    assert s.get("traefik_router_requests_total", **get_ok, **router) == 3 - quick
    streamed = s.get("traefik_entrypoint_responses_bytes_total", **get_ok, protocol="sse", entrypoint="web")  # fmt: skip
    assert streamed == 24 + 12 * (1 - quick)


def test_grpc_web_counts_its_grpc_status_as_the_code():
    reg = registry()
    edge = Edge(reg)
    call = (
        b"POST /edge.Echo/Unary HTTP/1.1\r\nHost: bench.local\r\n"
        b"Content-Type: application/grpc-web+proto\r\nContent-Length: 5\r\n\r\n\x00\x00\x00\x00\x00"
    )
    for status in (b"5", b"5", b"0"):
        answer = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto\r\n"
            b"Grpc-Status: %s\r\nContent-Length: 0\r\n\r\n" % status
        )
        assert edge.exchange(call, answer).startswith(b"HTTP/1.1 200")
    no_status = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/grpc-web+proto\r\nContent-Length: 0\r\n\r\n"
    )
    edge.exchange(call, no_status)
    edge.close()
    s = reg.collect()
    grpc_web = {"method": "POST", "protocol": "grpc-web", "entrypoint": "web"}
    assert s.get(EP_TOTAL, code="5", **grpc_web) == 2
    assert s.get(EP_TOTAL, code="0", **grpc_web) == 1
    assert s.get(EP_TOTAL, code="2", **grpc_web) == 1  # no status: Unknown
    assert s.get("traefik_entrypoint_requests_bytes_total", code="5", **grpc_web) == 10
    assert "200" not in {labels[0] for labels in s.values[EP_TOTAL]}


@pytest.mark.parametrize("codec", ["httptools", "h11"])
def test_a_chunked_request_body_counts_the_bytes_read(codec):
    reg = registry()
    edge = Edge(reg, codec)
    chunked = (
        b"POST /up HTTP/1.1\r\nHost: bench.local\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"
    )
    assert edge.exchange(chunked).startswith(b"HTTP/1.1 200")
    edge.close()
    s = reg.collect()
    assert s.get("traefik_entrypoint_requests_bytes_total", code="200", method="POST", **EP) == 12


# -- several processes --------------------------------------------------------------------


def test_workers_samples_add_up_and_gauges_keep_their_rule():
    one, two = Samples(), Samples()
    for s, n, up, start in ((one, 3, 1, 100.0), (two, 4, 0, 90.0)):
        s.add(EP_TOTAL, ("200", "GET", "http", "web"), n)
        s.observe(EP_DURATION, ("200", "GET", "http", "web"), [n, 0, 0, 0, 0, 0.1 * n])
        s.add("traefik_service_server_up", ("s@file", "http://x"), up)
        s.add("process_start_time_seconds", (), start)
    both = Samples()
    both.merge(one)
    both.merge(two)
    assert both.get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web") == 7
    assert both.get(EP_DURATION, code="200", method="GET", protocol="http", entrypoint="web")[
        :5
    ] == [7, 0, 0, 0, 0]
    assert both.get("traefik_service_server_up", service="s@file", url="http://x") == 1
    assert both.get("process_start_time_seconds") == 90.0


def test_samples_cross_a_msgpack_channel_unchanged():
    reg = registry()
    edge = Edge(reg)
    edge.exchange(get())
    edge.close()
    sent = reg.collect()
    rows = msgspec.msgpack.decode(msgspec.msgpack.encode(sent.rows()))
    back = Samples.from_rows(sent.bounds, rows)
    assert render(back) == render(sent)


# -- the text format ----------------------------------------------------------------------


def test_label_values_are_escaped():
    assert escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    s = Samples()
    s.add("traefik_service_server_up", ('we"ird\\', "http://x\n"), 1)
    assert (
        'traefik_service_server_up{service="we\\"ird\\\\",url="http://x\\n"} 1'
        in render(s).decode()
    )


def test_histogram_lines_are_cumulative_and_end_with_inf_sum_count():
    s = Samples((0.1, 0.3))
    s.observe(EP_DURATION, ("200", "GET", "http", "web"), [2, 0, 3, 7.25])
    text = render(s).decode().splitlines()
    labels = 'code="200",method="GET",protocol="http",entrypoint="web"'
    assert text == [
        f"# HELP {EP_DURATION} {FAMILIES[EP_DURATION].help}",
        f"# TYPE {EP_DURATION} histogram",
        f'{EP_DURATION}_bucket{{{labels},le="0.1"}} 2',
        f'{EP_DURATION}_bucket{{{labels},le="0.3"}} 2',
        f'{EP_DURATION}_bucket{{{labels},le="+Inf"}} 5',
        f"{EP_DURATION}_sum{{{labels}}} 7.25",
        f"{EP_DURATION}_count{{{labels}}} 5",
    ]


def test_every_family_present_has_help_and_type_and_no_labels_means_no_braces():
    s = Samples()
    s.add("traefik_config_reloads_total", (), 3)
    s.add("traefik_config_last_reload_success", (), 1.5e9 + 0.5)
    assert render(s) == (
        b"# HELP traefik_config_reloads_total Config reloads\n"
        b"# TYPE traefik_config_reloads_total counter\n"
        b"traefik_config_reloads_total 3\n"
        b"# HELP traefik_config_last_reload_success Last config reload success\n"
        b"# TYPE traefik_config_last_reload_success gauge\n"
        b"traefik_config_last_reload_success 1500000000.5\n"
    )


def test_special_values():
    s = Samples()
    s.add("process_max_fds", (), math.inf)
    assert b"process_max_fds +Inf\n" in render(s)


def test_process_families_are_read():
    s = registry().collect()
    assert s.get("process_cpu_seconds_total") > 0
    assert s.get("process_resident_memory_bytes") > 1e6
    assert s.get("process_open_fds") >= 3
    assert 1e9 < s.get("process_start_time_seconds") < 1e10


def test_samples_cross_the_worker_channel_as_a_metrics_frame():
    from edge.ipc import FrameDecoder, Metrics, ToSupervisor, encode

    s = Samples()
    s.add(EP_TOTAL, ("200", "GET", "http", "web"), 3)
    s.observe(EP_DURATION, ("200", "GET", "http", "web"), [1, 1, 0, 0, 1, 6.5])
    frame = encode(Metrics(s.rows()))  # type: ignore[arg-type]
    (msg,) = FrameDecoder(ToSupervisor).feed(frame)
    assert render(Samples.from_rows(s.bounds, msg.rows)) == render(s)


def test_an_ended_worker_leaves_its_counters_not_its_gauges():
    s = Samples()
    s.add(EP_TOTAL, ("200", "GET", "http", "web"), 3)
    s.add("traefik_open_connections", ("web", "TCP"), 5)
    kept = s.counters()
    assert kept.get(EP_TOTAL, code="200", method="GET", protocol="http", entrypoint="web") == 3
    assert "traefik_open_connections" not in kept.values
