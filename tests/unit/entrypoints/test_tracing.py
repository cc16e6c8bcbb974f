"""The pure parts of tracing: ``traceparent`` parsing (W3C Trace Context), the sampling
decision, the redacted query, the exporter's bounded queue."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from edge.config.static import OTLPHTTP, Tracing
from edge.entrypoints.tracing import (
    BSP_DEFAULTS,
    Exporter,
    Parent,
    Tracer,
    incoming,
    parse_traceparent,
)
from edge.http.codec import RequestHead

TRACE = b"0af7651916cd43dd8448eb211c80319c"
SPAN = b"b7ad6b7169203331"
VALID = b"00-" + TRACE + b"-" + SPAN + b"-01"


def test_a_valid_traceparent_is_read_with_its_sampled_flag() -> None:
    assert parse_traceparent(VALID) == Parent(TRACE.decode(), SPAN.decode(), True)
    unsampled = parse_traceparent(VALID[:-2] + b"00")
    assert unsampled is not None and not unsampled.sampled
    # Only bit 0 of the flags says sampled; other bits are read past.
    other = parse_traceparent(VALID[:-2] + b"02")
    assert other is not None and not other.sampled
    assert parse_traceparent(b" \t" + VALID + b" ") is not None  # OWS around the value


def test_a_later_version_is_read_as_version_00() -> None:
    assert parse_traceparent(b"cc" + VALID[2:]) is not None
    assert parse_traceparent(b"cc" + VALID[2:] + b"-what-comes-later") is not None
    assert parse_traceparent(b"cc" + VALID[2:] + b"x") is None  # not after a dash


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"00",
        VALID[:-1],  # short
        VALID + b"-00",  # version 00 is exactly 55 characters
        b"ff" + VALID[2:],  # the forbidden version
        VALID.upper(),  # hex is lower case
        VALID.replace(TRACE, b"0" * 32),  # an all-zero trace id
        VALID.replace(SPAN, b"0" * 16),  # an all-zero parent id
        VALID.replace(b"-", b"_"),
        VALID[:3] + b"g" + VALID[4:],  # not hex
        b"00-" + TRACE + b"-" + SPAN + b"-1",
        "00-é".encode() + VALID[4:],
        b"0" * 200,
    ],
)
def test_a_malformed_traceparent_is_no_parent(value: bytes) -> None:
    assert parse_traceparent(value) is None


def test_a_parent_comes_only_from_exactly_one_valid_header_and_brings_its_tracestate() -> None:
    state = (b"tracestate", b"k=v")
    assert incoming([(b"Traceparent", VALID), state, (b"TraceState", b" k2=v2 ")]) == (
        Parent(TRACE.decode(), SPAN.decode(), True),
        b"k=v,k2=v2",
    )
    assert incoming([(b"traceparent", VALID), (b"traceparent", VALID)]) == (None, b"")
    assert incoming([(b"traceparent", b"junk"), state]) == (None, b"")  # its state too
    assert incoming([state]) == (None, b"")


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def exporters() -> Iterator[Callable[..., Exporter]]:
    """Exporters to a collector that is down; each closed after the test."""
    made: list[Exporter] = []

    def make(**environ: str) -> Exporter:
        endpoint = f"http://127.0.0.1:{closed_port()}/v1/traces"
        made.append(Exporter(OTLPHTTP(endpoint=endpoint), {}, environ))
        return made[-1]

    yield make
    for exporter in made:
        exporter.close(2.0)


def head(*headers: tuple[bytes, bytes]) -> RequestHead:
    return RequestHead(b"GET", b"/", b"1.1", list(headers), True, False, None, False, False)


@pytest.fixture
def tracer(exporters) -> Callable[..., Tracer]:
    def make(rate: float, **config: Any) -> Tracer:
        return Tracer(Tracing(sample_rate=rate, **config), {}, exporter=exporters())

    return make


def test_sampling_follows_the_rate_for_new_traces_and_the_parent_for_others(tracer) -> None:
    always, never, half = tracer(1.0), tracer(0.0), tracer(0.5)
    n = 2000
    assert all(always.start(head()).sampled for _ in range(n))
    assert not any(never.start(head()).sampled for _ in range(n))
    sampled = sum(half.start(head()).sampled for _ in range(n))
    assert 0.4 * n < sampled < 0.6 * n
    # The decision is the trace id's, as OpenTelemetry's ratio sampler reads it.
    for _ in range(200):
        t = half.start(head())
        assert t.sampled == ((int(t.trace_id[16:], 16) >> 1) < (1 << 62))
    # An incoming parent keeps its trace and its decision, whatever the rate.
    t = never.start(head((b"traceparent", VALID)))
    assert (t.trace_id, t.parent, t.sampled) == (TRACE.decode(), SPAN.decode(), True)
    t = always.start(head((b"traceparent", VALID[:-2] + b"00")))
    assert (t.trace_id, t.sampled) == (TRACE.decode(), False)
    # A malformed one starts a trace of edge's own.
    t = always.start(head((b"traceparent", VALID.upper())))
    assert t.trace_id != TRACE.decode() and t.parent == "" and t.sampled
    assert len({always.start(head()).trace_id for _ in range(100)}) == 100


def test_query_values_are_redacted_but_the_safe_ones(tracer) -> None:
    t = tracer(1.0, safe_query_params=["page"])
    assert t.query(b"") == ""
    assert t.query(b"token=s3cret&page=2&a=x%20y&a=&page=x+y") == (
        "a=REDACTED&page=2&page=x+y&token=REDACTED"
    )


def test_a_full_queue_drops_and_counts_and_a_failed_post_is_counted(exporters) -> None:
    """Three wait at most: two more are dropped at once; the three go in a post as soon
    as a batch is full (not after the 10 minutes' delay), which fails: lost, counted."""
    exporter = exporters(
        OTEL_BSP_MAX_QUEUE_SIZE="3",
        OTEL_BSP_SCHEDULE_DELAY="600000",
        OTEL_BSP_EXPORT_TIMEOUT="2000",
    )
    for i in range(5):
        exporter.add(("1" * 32, f"{i:016x}", "", "", "GET", 2, 1, 2, 200, []))
    assert exporter.dropped == 2
    deadline = time.monotonic() + 10
    while exporter.lost < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (exporter.lost, exporter.exported) == (3, 0)
    assert "127.0.0.1" in exporter.error and not exporter.queue


def test_the_batch_processor_reads_opentelemetry_variables(exporters) -> None:
    e = exporters(OTEL_BSP_SCHEDULE_DELAY="250", OTEL_BSP_MAX_QUEUE_SIZE="junk")
    assert (e.delay, e.max_queue) == (0.25, BSP_DEFAULTS["OTEL_BSP_MAX_QUEUE_SIZE"])
    assert (e.host, e.path) == ("127.0.0.1", "/v1/traces")
    e = Exporter(OTLPHTTP(), {}, {})
    try:
        assert (e.secure, e.host, e.port, e.path) == (True, "localhost", 4318, "/v1/traces")
    finally:
        e.close(1.0)
