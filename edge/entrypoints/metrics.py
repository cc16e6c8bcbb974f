"""Prometheus metrics (``metrics.prometheus``): counters on the hot path, the text on scrape.

Owns Traefik v3's metric families and edge's own (``edge_``), how one process's
counters become :class:`Samples` (plain, serializable data), how the samples of
several processes are summed (``workers: N``: the supervisor's one view), and the
text exposition format 0.0.4 they are rendered in.

Invariant: a finished HTTP exchange of a quick head with a quick answer (the express
path's) costs three small lookups for its cell (route, status, method: no tuple
built), two list appends and a float compare, made by the exchange itself
(:meth:`Exchange.log <edge.http.server.exchange.Exchange.log>` reads its entry point's
:class:`Meter`, no call); any other also has its request's ``protocol`` label read
(:func:`request_protocol`, in :meth:`Meter.cell`). The cell of a key is made once and
reused. Sums, histogram buckets, label strings and the text are made only when the
cells are folded (every scrape, and at least every :data:`FOLD_EVERY`) or ``/metrics``
is read. A fold starts new cells, so cells never hold on to the routes of a
configuration gone, and a flood of odd methods costs one cell, ``EXTENSION_METHOD``.

Everything else is read where it already lives, at scrape: open connections from the
entry points' connection sets, UDP counters from the datagram proxies, server health
from the health registry, reloads from whoever runs the rounds.
"""

from __future__ import annotations

import logging
import math
import os
import re
import resource
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import msgspec
from cryptography import x509

from edge.entrypoints.accesslog import AccessLogger
from edge.http.middlewares import Answer, Forward, Middleware

if TYPE_CHECKING:
    from edge.config.static import Prometheus

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "FAMILIES",
    "METRICS_PATH",
    "Meter",
    "Registry",
    "Samples",
    "escape_label",
    "process_samples",
    "render",
]

log = logging.getLogger("edge.metrics")

DEFAULT_BUCKETS = (0.1, 0.3, 1.2, 5.0)
"""Traefik's request duration buckets, in seconds."""
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
METRICS_PATH = b"/metrics"

KNOWN_METHODS = frozenset(
    (
        b"GET",
        b"HEAD",
        b"POST",
        b"PUT",
        b"DELETE",
        b"CONNECT",
        b"OPTIONS",
        b"TRACE",
        b"PATCH",
        b"PRI",  # Traefik's list has HTTP/2's preface method too
    )
)
EXTENSION_METHOD = b"EXTENSION_METHOD"

# The ``protocol`` label, as Traefik's metrics middleware reads it from the request.
HTTP, WEBSOCKET, SSE, GRPC, GRPC_WEB = "http", "websocket", "sse", "grpc", "grpc-web"
_PROTOCOL_FIELDS = {b"connection": 0, b"upgrade": 1, b"accept": 2, b"content-type": 3}
_GRPC_STATUS = re.compile(rb"\r\n(?i:grpc-status)[ \t]*:[ \t]*([^\r\n]*)")
_GRPC_NAMES = {
    name.encode(): i
    for i, name in enumerate(
        (
            '"OK"',
            '"CANCELLED"',
            '"UNKNOWN"',
            '"INVALID_ARGUMENT"',
            '"DEADLINE_EXCEEDED"',
            '"NOT_FOUND"',
            '"ALREADY_EXISTS"',
            '"PERMISSION_DENIED"',
            '"RESOURCE_EXHAUSTED"',
            '"FAILED_PRECONDITION"',
            '"ABORTED"',
            '"OUT_OF_RANGE"',
            '"UNIMPLEMENTED"',
            '"INTERNAL"',
            '"UNAVAILABLE"',
            '"DATA_LOSS"',
            '"UNAUTHENTICATED"',
        )
    )
}
GRPC_UNKNOWN = 2
"""gRPC's ``Unknown``: the ``code`` of a gRPC exchange whose answer states no status
(or one that does not read), as Traefik counts it."""


def request_protocol(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The ``protocol`` label of a request with header fields ``headers``, as Traefik
    decides it, in this order, from the first field of each name: ``websocket``
    (``Connection`` lists ``upgrade`` and ``Upgrade`` lists ``websocket``), ``sse``
    (``Accept`` lists ``text/event-stream``), ``grpc-web`` (``Content-Type`` starts
    with ``application/grpc-web``), ``grpc`` (with ``application/grpc``), else
    ``http``. List items are compared trimmed and lower-cased, content types as sent."""
    first: list[bytes | None] = [None, None, None, None]
    for name, value in headers:
        i = _PROTOCOL_FIELDS.get(name.lower())
        if i is not None and first[i] is None:
            first[i] = value
    connection, upgrade, accept, content_type = first
    if connection and upgrade and _lists(connection, b"upgrade") and _lists(upgrade, b"websocket"):
        return WEBSOCKET
    if accept and _lists(accept, b"text/event-stream"):
        return SSE
    if content_type and content_type.startswith(b"application/grpc"):
        return GRPC_WEB if content_type.startswith(b"application/grpc-web") else GRPC
    return HTTP


def _lists(value: bytes, item: bytes) -> bool:
    return any(part.strip().lower() == item for part in value.split(b","))


def grpc_status(value: bytes | None) -> int:
    """The ``code`` label of a gRPC exchange whose answer said ``grpc-status: value``
    (None: it said none): the status as a number (digits, or a quoted name as gRPC's
    JSON form writes it), :data:`GRPC_UNKNOWN` for none or one that does not read."""
    if value is None:
        return GRPC_UNKNOWN
    value = value.strip()
    if value.isdigit():
        code = int(value)
        return code if code < len(_GRPC_NAMES) else GRPC_UNKNOWN
    return _GRPC_NAMES.get(value, GRPC_UNKNOWN)


def _grpc_code(ex: Any) -> int:
    """The gRPC status of exchange ``ex``'s answer: in the server's response head (a
    trailers-only answer), or edge's own answer's, else in the trailers its HTTP/2
    stream ended with."""
    head = ex.resp_head
    if head is not None:
        for name, value in head.headers:
            if name.lower() == b"grpc-status":
                return grpc_status(value)
    out = ex.resp_out
    found = _GRPC_STATUS.search(out, 0, out.find(b"\r\n\r\n") + 2) if out else None
    if found is not None:
        return grpc_status(found.group(1))
    for name, value in getattr(ex.conn, "tail", None) or ():
        if name == b"grpc-status":
            return grpc_status(value)
    return GRPC_UNKNOWN


# How samples of several processes combine (workers: N): counters, histograms and
# most gauges add up; a state gauge takes the largest value, a start time the least.
SUM, MAX, MIN = "sum", "max", "min"


class Family(msgspec.Struct, frozen=True):
    name: str
    kind: str  # counter, gauge, histogram
    help: str
    labels: tuple[str, ...]
    merge: str = SUM


_EP = ("code", "method", "protocol", "entrypoint")
_ROUTER = ("code", "method", "protocol", "router", "service")
_SERVICE = ("code", "method", "protocol", "service")
_FLOW = ("entrypoint", "router", "service", "direction")


def _http(scope: str, labels: tuple[str, ...], where: str) -> list[Family]:
    return [
        Family(
            f"traefik_{scope}_requests_total",
            "counter",
            f"How many HTTP requests processed on {where}, partitioned by status code, "
            "protocol, and method.",
            labels,
        ),
        Family(
            f"traefik_{scope}_requests_tls_total",
            "counter",
            f"How many HTTP requests with TLS processed on {where}, partitioned by TLS "
            "version and TLS cipher.",
            ("tls_version", "tls_cipher", *labels[3:]),
        ),
        Family(
            f"traefik_{scope}_request_duration_seconds",
            "histogram",
            f"How long it took to process the request on {where}, partitioned by status "
            "code, protocol, and method.",
            labels,
        ),
        Family(
            f"traefik_{scope}_requests_bytes_total",
            "counter",
            f"The total size of requests in bytes handled by {where}, partitioned by "
            "status code, protocol, and method.",
            labels,
        ),
        Family(
            f"traefik_{scope}_responses_bytes_total",
            "counter",
            f"The total size of responses in bytes handled by {where}, partitioned by "
            "status code, protocol, and method.",
            labels,
        ),
    ]


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("traefik_config_reloads_total", "counter", "Config reloads", ()),
        Family(
            "traefik_config_last_reload_success", "gauge", "Last config reload success", (), MAX
        ),
        Family(
            "traefik_open_connections",
            "gauge",
            "How many open connections exist, by entryPoint and protocol",
            ("entrypoint", "protocol"),
        ),
        Family(
            "traefik_tls_certs_not_after",
            "gauge",
            "Certificate expiration timestamp",
            ("cn", "serial", "sans"),
            MAX,
        ),
        *_http("entrypoint", _EP, "an entrypoint"),
        *_http("router", _ROUTER, "a router"),
        *_http("service", _SERVICE, "a service"),
        Family(
            "traefik_service_retries_total",
            "counter",
            "How many request retries happened on a service.",
            ("service",),
        ),
        Family(
            "traefik_service_server_up",
            "gauge",
            "service server is up, described by gauge value of 0 or 1.",
            ("service", "url"),
            MAX,
        ),
        Family(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            (),
        ),
        Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", ()),
        Family("process_open_fds", "gauge", "Number of open file descriptors.", ()),
        Family("process_max_fds", "gauge", "Maximum number of open file descriptors.", (), MAX),
        Family(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            (),
            MIN,
        ),
        Family(
            "edge_kubernetes_watch_restarts_total",
            "counter",
            "Kubernetes watches begun again, by kind and why: ended (cleanly, as the API "
            "server ends each after its timeout), expired (410 Gone: the kind is listed "
            "again) or error (a failed list or watch, retried after a backoff).",
            ("kind", "reason"),
        ),
        Family(
            "edge_kubernetes_objects_skipped_total",
            "counter",
            "Kubernetes objects left out of the cache because they did not decode, by kind.",
            ("kind",),
        ),
        Family(
            "edge_tls_handshakes_total",
            "counter",
            "TLS handshakes edge terminated, by entry point, outcome (ok, error, closed, "
            "timeout) and TLS version (of those that succeeded).",
            ("entrypoint", "outcome", "tls_version"),
        ),
        Family(
            "edge_tcp_connections_total",
            "counter",
            "TCP connections relayed to a server, by entry point, TCP router and service.",
            ("entrypoint", "router", "service"),
        ),
        Family(
            "edge_tcp_dial_errors_total",
            "counter",
            "TCP connections closed because their server could not be reached, by entry "
            "point, TCP router and service.",
            ("entrypoint", "router", "service"),
        ),
        Family(
            "edge_tcp_bytes_total",
            "counter",
            "Bytes relayed by TCP routers, by entry point, router, service and direction "
            "(to_server, to_client).",
            _FLOW,
        ),
        Family(
            "edge_udp_datagrams_total",
            "counter",
            "UDP datagrams forwarded, by entry point, router, service and direction "
            "(to_server, to_client).",
            _FLOW,
        ),
        Family(
            "edge_udp_bytes_total",
            "counter",
            "UDP payload bytes forwarded, by entry point, router, service and direction.",
            _FLOW,
        ),
        Family(
            "edge_udp_dropped_total",
            "counter",
            "UDP datagrams that could not be forwarded (no server, a full buffer, a send "
            "error), by entry point, router and service.",
            ("entrypoint", "router", "service"),
        ),
        Family(
            "edge_udp_sessions_total",
            "counter",
            "UDP sessions opened, by entry point, router and service.",
            ("entrypoint", "router", "service"),
        ),
        Family(
            "edge_udp_sessions_ended_total",
            "counter",
            "UDP sessions ended by edge, by entry point, router, service and reason: "
            "expired (idle past the entry point's udp.timeout) or evicted (the least "
            "recently active, for a new one past udp.maxSessions).",
            ("entrypoint", "router", "service", "reason"),
        ),
        Family(
            "edge_udp_sessions",
            "gauge",
            "UDP sessions open now (the session table's size), by entry point.",
            ("entrypoint",),
        ),
        Family(
            "edge_udp_no_route_total",
            "counter",
            "UDP datagrams that arrived while no router served the entry point.",
            ("entrypoint",),
        ),
    ]
}


HEADER_LABELLED = frozenset(
    f"traefik_{scope}_requests_total" for scope in ("entrypoint", "router", "service")
)
"""The families ``headerLabels`` adds its labels to, as Traefik does."""
HEADER_LABELS_ROW = "#header_labels"
"""The row that carries :attr:`Samples.header_labels` across the IPC channel."""


class Samples:
    """One view's values: family name -> label values -> value (a histogram's: its
    bucket counts, not cumulative, the last one past every bound, then the sum).

    Plain data, so a worker's samples cross the IPC channel (:meth:`rows`,
    :meth:`from_rows`) and several views add up (:meth:`merge`). ``header_labels``: the
    names of ``headerLabels``' labels, whose values end the label values of the
    ``requests_total`` families (:data:`HEADER_LABELLED`); they cross the channel as a
    row of their own (:data:`HEADER_LABELS_ROW`)."""

    __slots__ = ("bounds", "header_labels", "values")

    def __init__(
        self, bounds: tuple[float, ...] = DEFAULT_BUCKETS, header_labels: tuple[str, ...] = ()
    ) -> None:
        self.bounds = bounds
        self.header_labels = header_labels
        self.values: dict[str, dict[tuple[str, ...], Any]] = {}

    def add(self, family: str, labels: tuple[str, ...], value: float) -> None:
        """Add ``value`` to a counter or gauge sample (combined by the family's rule)."""
        table = self.values.setdefault(family, {})
        old = table.get(labels)
        table[labels] = value if old is None else _combine(FAMILIES[family].merge, old, value)

    def observe(self, family: str, labels: tuple[str, ...], buckets: list[float]) -> None:
        """Add a histogram sample: bucket counts (len(bounds) + 1) then their sum of values."""
        table = self.values.setdefault(family, {})
        old = table.get(labels)
        if old is None:
            table[labels] = list(buckets)
        else:
            for i, n in enumerate(buckets):
                old[i] += n

    def merge(self, other: Samples) -> None:
        """Add ``other``'s samples to these (same buckets and header labels: every
        process reads one static configuration)."""
        self.header_labels = self.header_labels or other.header_labels
        for name, table in other.values.items():
            histogram = FAMILIES[name].kind == "histogram"
            for labels, value in table.items():
                if histogram:
                    self.observe(name, labels, value)
                else:
                    self.add(name, labels, value)

    def get(self, family: str, **labels: str) -> Any:
        """The value of one sample (tests and tools): labels by name, all of them."""
        names = self.names(family)
        return self.values.get(family, {}).get(tuple(labels[n] for n in names))

    def names(self, family: str) -> tuple[str, ...]:
        """The label names of ``family``'s samples here."""
        names = FAMILIES[family].labels
        return names + self.header_labels if family in HEADER_LABELLED else names

    def rows(self) -> list[tuple[str, tuple[str, ...], Any]]:
        """(family, label values, value) of every sample: what crosses the IPC channel."""
        rows = [(HEADER_LABELS_ROW, self.header_labels, 0)] if self.header_labels else []
        rows += [
            (name, labels, value)
            for name, table in self.values.items()
            for labels, value in table.items()
        ]
        return rows

    @classmethod
    def from_rows(cls, bounds: Iterable[float], rows: Iterable[Any]) -> Samples:
        samples = cls(tuple(bounds))
        for name, labels, value in rows:
            if name == HEADER_LABELS_ROW:
                samples.header_labels = tuple(labels)
                continue
            if name not in FAMILIES:
                continue  # a family a newer worker has: not this view's
            if FAMILIES[name].kind == "histogram":
                samples.observe(name, tuple(labels), value)
            else:
                samples.add(name, tuple(labels), value)
        return samples

    def counters(self) -> Samples:
        """These samples' counters and histograms only (what a process that ended
        counted stays in the sum; its gauges do not)."""
        kept = Samples(self.bounds, self.header_labels)
        kept.values = {
            name: dict(table)
            for name, table in self.values.items()
            if FAMILIES[name].kind != "gauge"
        }
        return kept


def _combine(rule: str, old: float, new: float) -> float:
    if rule == MAX:
        return max(old, new)
    if rule == MIN:
        return min(old, new)
    return old + new


# -- the hot path -------------------------------------------------------------------------


class Cell:
    """What one key of one entry point's :class:`Meter` counted since its last fold: the
    exchange counts into it itself, at its end (:meth:`Exchange.log
    <edge.http.server.exchange.Exchange.log>`: two list appends, no call).

    ``durations``: each exchange's duration and ``sent``: the body bytes it sent the
    client, one item per exchange (so their count is the exchanges'; sums are made at
    the fold, in C); ``slow``: the durations past the first bucket bound again (the
    exchange compares, which costs it less than sorting them all at the fold), whose
    buckets the fold finds by sorting only them; ``req_bytes``: request body bytes, an
    add where a request states a length. A meter folds its cells at least every :data:`FOLD_EVERY`, so the
    lists hold at most that long's exchanges."""

    __slots__ = ("durations", "req_bytes", "sent", "slow")

    def __init__(self) -> None:
        self.durations: list[float] = []
        self.slow: list[float] = []
        self.sent: list[int] = []
        self.req_bytes = 0


class Total:
    """What the cells of one label set added up to: histogram bucket counts (not
    cumulative, the last one past every bound), the durations' sum, body bytes."""

    __slots__ = ("buckets", "req_bytes", "resp_bytes", "total")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.total = 0.0
        self.req_bytes = 0
        self.resp_bytes = 0

    def add(self, cell: Cell, bounds: tuple[float, ...]) -> None:
        durations = cell.durations
        if durations:
            self.total += sum(durations)  # in their order, as adding each would
            buckets = self.buckets
            ordered = sorted(cell.slow)  # all past bounds[0]: none in the first bucket
            buckets[0] += len(durations) - len(ordered)
            below = 0
            for i, bound in enumerate(bounds[1:], 1):
                upto = bisect_right(ordered, bound)  # how many took no longer
                buckets[i] += upto - below
                below = upto
            buckets[-1] += len(ordered) - below
        self.req_bytes += cell.req_bytes
        self.resp_bytes += sum(cell.sent)

    def histogram(self) -> list[float]:
        """The buckets as :class:`Samples` hold them, then the durations' sum."""
        return [*self.buckets, self.total]


_NONE: dict = {}  # an empty level of a meter's index (Meter.cell), never written

MAX_CELLS = 10_000
"""Cells a meter holds before it folds them (which every scrape does too): keys name the
routes of the configuration they were counted under, and a meter nobody scrapes must
not keep every configuration's routes."""
FOLD_EVERY = 1.0
"""Seconds at most between a meter's folds: its cells' lists hold no more than that
long's exchanges (a timer armed by the first cell made after a fold)."""


class Meter:
    """One entry point's counting: cells, which the exchange finds and fills
    (:meth:`Exchange.log <edge.http.server.exchange.Exchange.log>`), ``totals`` by
    label values, which :meth:`fold` adds them to.

    A cell's key is ``(route, status, method, served, tls, protocol)`` (``served``: a
    server was picked, so the exchange is its service's too, not only its router's;
    ``tls``: the TLS version and cipher of the connection, or None; ``protocol``: the
    ``protocol`` label, :func:`request_protocol`, and for ``grpc`` and ``grpc-web`` the
    status is the answer's gRPC status, as Traefik counts them). ``cells`` holds them
    by key; an exchange answered by the express path's quick response (or not at all)
    reads them through ``index`` (served) or ``unserved``: route, then status, then
    method, nested, whose lookups take no tuple to build or hash, and hold ``http``'s
    cells only. Such an exchange, of a quick request head (no body, no upgrade: see
    ``RequestParser.quick``) answered by a quick response (``upstream_quick``: a
    Content-Length body in one read) or not at all, counts as ``http``: reading its
    ``Accept`` for ``sse`` would cost every express request a scan of its head. Every
    other exchange (another head, a streamed answer such as an event stream, one edge
    wrote, a tunnel, an HTTP/2 stream) takes :meth:`cell`, which reads the protocol
    from its request. A missing key is made by :meth:`cell`: a method outside
    the standard ones counts as ``EXTENSION_METHOD``, in one cell stored under that
    key only, so a client's odd methods make no keys. With ``headerLabels`` the keys
    carry the values of those request headers too and live in ``labelled``, never in
    the index: the exchange finds nothing there, and only these meters pay for
    reading headers (:meth:`cell`).

    ``tls``: the meter of the entry point's HTTPS contexts (their ``metrics``), whose
    keys carry the TLS version and cipher of each exchange's connection
    (``requests_tls_total``): it keeps no index, so its exchanges always take
    :meth:`cell`, which reads them (what TLS costs a request dwarfs it). ``internals``
    (``metrics.addInternals``): count what edge's own services answer too; without
    it their cells are kept apart (``internal``) and dropped at each fold.
    """

    __slots__ = (
        "bounds",
        "cells",
        "entrypoint",
        "first",
        "headers",
        "index",
        "internal",
        "internals",
        "labelled",
        "over_tls",
        "retries",
        "timer",
        "tls",
        "totals",
        "unserved",
    )

    def __init__(
        self,
        entrypoint: str,
        bounds: tuple[float, ...],
        headers: tuple[str, ...] = (),
        *,
        over_tls: bool = False,
    ) -> None:
        self.entrypoint = entrypoint
        self.bounds = bounds
        self.first = bounds[0]  # the exchange's test for Cell.slow
        self.over_tls = over_tls
        self.tls = self if over_tls else Meter(entrypoint, bounds, headers, over_tls=True)
        self.internals = False
        self.internal: dict[tuple, Cell] = {}
        self.cells: dict[tuple, Cell] = {}
        self.index: dict[Any, dict[int, dict[bytes, Cell]]] = {}
        self.unserved: dict[Any, dict[int, dict[bytes, Cell]]] = {}
        self.timer: Any = None  # the loop's handle of the next fold (FOLD_EVERY)
        # headerLabels: the request headers whose values label requests_total (lower-case
        # names -> position), and the cells keyed with their values.
        self.headers = {name.lower().encode("latin-1"): i for i, name in enumerate(headers)}
        self.labelled: dict[tuple, Cell] = {}
        # Label values (router, service, served, code, method, tls, protocol, *header
        # values) -> Total.
        self.totals: dict[tuple, Total] = {}
        self.retries: dict[str, int] = {}  # service -> retries (Exchange._try_again)

    def cell(self, ex: Any) -> Cell:
        """The cell of exchange ``ex``: one the index lacks, or one of an answer that
        did not take the express path's quick response, whose protocol is read from
        its request here (see the class doc)."""
        head = ex.head
        known = head.method in KNOWN_METHODS
        method = head.method if known else EXTENSION_METHOD
        served = ex.backend is not None
        status = ex.status
        if ex.resp_out is None and head.cut is not None:  # (see the class doc)
            protocol = HTTP
        else:
            protocol = request_protocol(head.headers)
        if protocol is HTTP:
            if known and not self.over_tls and not self.headers:
                index = self.index if served else self.unserved
                found = index.get(ex.route, _NONE).get(status, _NONE).get(method)
                if found is not None:
                    return found
        elif protocol is GRPC or protocol is GRPC_WEB:
            status = _grpc_code(ex)  # Traefik's code of a gRPC exchange: its gRPC status
        key = (
            ex.route,
            status,
            method,
            served,
            AccessLogger._tls(ex.conn) if self.over_tls else None,
            protocol,
        )
        if not served and not self.internals and AccessLogger._internal(ex, ex.route):
            cells = self.internal  # not counted: dropped at the fold
        elif self.headers:
            key = (*key, *self._values(head))
            cells = self.labelled
        else:
            cells = self.cells
        found = cells.get(key)
        if found is None:
            if len(cells) >= MAX_CELLS:
                self.fold()
                return self.cell(ex)
            found = cells[key] = Cell()
            if (cells is not self.labelled) and known and not self.over_tls and protocol is HTTP:
                index = self.index if served else self.unserved
                index.setdefault(ex.route, {}).setdefault(status, {})[method] = found
            if self.timer is None:
                self.timer = ex.conn.loop.call_later(FOLD_EVERY, self._fold_due)
        return found

    def _fold_due(self) -> None:
        self.timer = None
        self.fold()

    def _values(self, head: Any) -> list[bytes]:
        """The values of the ``headerLabels`` headers of ``head``: the first of each, empty
        where a request has none. ``Host`` is always empty, as in Traefik, where Go's
        server takes it out of the headers."""
        wanted = self.headers
        values = [b""] * len(wanted)
        for name, value in head.headers:
            lower = name.lower()
            i = wanted.get(lower)
            if i is not None and not values[i] and lower != b"host":
                values[i] = value
        return values

    def retry(self, service: str) -> None:
        """``service`` sends a request again (the retry middleware, buffering's
        retryExpression): ``traefik_service_retries_total``."""
        self.retries[service] = self.retries.get(service, 0) + 1

    def fold(self) -> None:
        """Add the cells counted since the last fold to :attr:`totals` and start new
        ones (so no cell outlives the configuration whose routes it names)."""
        cells = self.cells
        if self.labelled:
            cells = {**cells, **self.labelled}
        self.cells = {}
        self.labelled = {}
        self.internal = {}
        self.index = {}
        self.unserved = {}
        totals = self.totals
        size = len(self.bounds) + 1
        for (route, status, method, served, tls, protocol, *values), cell in cells.items():
            labels = (
                route.name if route is not None else "",
                route.service.name if route is not None else "",
                served,
                str(status),
                method.decode("latin-1"),
                tls,
                protocol,
                *(v.decode("latin-1") for v in values),
            )
            total = totals.get(labels)
            if total is None:
                total = totals[labels] = Total(size)
            total.add(cell, self.bounds)


# -- one process's view -------------------------------------------------------------------


class Registry:
    """One process's metrics: a :class:`Meter` per HTTP entry point, and what is read at
    scrape (``sources``: callables adding their samples, set by whoever owns the state
    they read). ``add_internals``: ``metrics.addInternals``, what edge's own services
    answer is counted too."""

    def __init__(self, config: Prometheus, *, add_internals: bool = False) -> None:
        self.config = config
        self.bounds = tuple(sorted(set(config.buckets))) or DEFAULT_BUCKETS
        self.header_labels = tuple(config.header_labels)  # label names (headerLabels)
        self.meters: dict[str, Meter] = {}
        self.add_internals = add_internals
        self.sources: list[Callable[[Samples], None]] = []
        self.shared: Samples | None = None
        """With ``workers: N``, what ``/metrics`` shows: the supervisor's sum of every
        worker's samples and its own (see :mod:`edge.supervisor`); None: this process's."""

    def meter(self, entrypoint: str) -> Meter:
        """``entrypoint``'s meter (made on the first call): its HTTP contexts' ``metrics``
        (its HTTPS contexts': the meter's ``tls``)."""
        found = self.meters.get(entrypoint)
        if found is None:
            headers = tuple(self.config.header_labels.values())
            found = self.meters[entrypoint] = Meter(entrypoint, self.bounds, headers)
            found.internals = found.tls.internals = self.add_internals
        return found

    def collect(self) -> Samples:
        """This process's samples now (folds what the meters counted)."""
        samples = Samples(self.bounds, self.header_labels)
        config = self.config
        for name, plain in self.meters.items():
            for meter in (plain, plain.tls):
                meter.fold()
                for key, total in meter.totals.items():
                    self._add(samples, name, key, total)
            meter = plain
            if config.add_services_labels:
                for service, retries in meter.retries.items():
                    samples.add("traefik_service_retries_total", (service,), retries)
        for source in self.sources:
            source(samples)
        process_samples(samples)
        return samples

    def _add(self, samples: Samples, name: str, key: tuple, total: Total) -> None:
        """The samples of one meter's total (its label values ``key``, :meth:`Meter.fold`)
        on entry point ``name``, in each scope the configuration asks for."""
        config = self.config
        router, service, served, code, method, tls, protocol, *values = key
        scopes: list[tuple[str, tuple[str, ...]]] = []
        if config.add_entry_points_labels:
            scopes.append(("entrypoint", (code, method, protocol, name)))
        if config.add_routers_labels and router:
            scopes.append(("router", (code, method, protocol, router, service)))
        if config.add_services_labels and served and service:
            scopes.append(("service", (code, method, protocol, service)))
        histogram = total.histogram()
        count = sum(total.buckets)
        for scope, labels in scopes:
            samples.add(f"traefik_{scope}_requests_total", (*labels, *values), count)
            if tls is not None:
                samples.add(f"traefik_{scope}_requests_tls_total", (*tls, *labels[3:]), count)
            samples.observe(f"traefik_{scope}_request_duration_seconds", labels, histogram)
            samples.add(f"traefik_{scope}_requests_bytes_total", labels, total.req_bytes)
            samples.add(f"traefik_{scope}_responses_bytes_total", labels, total.resp_bytes)


def process_samples(samples: Samples) -> None:
    """The ``process_*`` families of this process (Prometheus' client conventions)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    samples.add("process_cpu_seconds_total", (), usage.ru_utime + usage.ru_stime)
    try:
        with open("/proc/self/statm", "rb") as f:
            rss_pages = int(f.read().split()[1])
        samples.add("process_resident_memory_bytes", (), rss_pages * os.sysconf("SC_PAGE_SIZE"))
        samples.add("process_open_fds", (), len(os.listdir("/proc/self/fd")))
        with open("/proc/self/stat", "rb") as f:
            started = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: ticks since boot
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        samples.add("process_start_time_seconds", (), boot + started / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        pass  # not Linux: only what getrusage says
    samples.add("process_max_fds", (), resource.getrlimit(resource.RLIMIT_NOFILE)[0])


# -- the text exposition format 0.0.4 -----------------------------------------------------


def escape_label(value: str) -> str:
    """A label value as the text format writes it between double quotes."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{escape_label(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def render(samples: Samples) -> bytes:
    """``samples`` in the text format 0.0.4: HELP and TYPE lines per family present,
    histograms as cumulative ``_bucket`` lines up to ``le="+Inf"``, ``_sum``, ``_count``."""
    out: list[str] = []
    bounds = [_number(b) for b in samples.bounds]
    for name, family in FAMILIES.items():
        table = samples.values.get(name)
        if not table:
            continue
        out.append(f"# HELP {name} {_escape_help(family.help)}")
        out.append(f"# TYPE {name} {family.kind}")
        names = samples.names(name)
        for labels in sorted(table):
            value = table[labels]
            if family.kind != "histogram":
                out.append(f"{name}{_labels(names, labels)} {_number(value)}")
                continue
            running = 0
            for bound, n in zip([*bounds, "+Inf"], value[:-1], strict=True):
                running += n
                le = _labels(names, labels, f'le="{bound}"')
                out.append(f"{name}_bucket{le} {_number(running)}")
            plain = _labels(names, labels)
            out.append(f"{name}_sum{plain} {_number(value[-1])}")
            out.append(f"{name}_count{plain} {_number(running)}")
    out.append("")
    return "\n".join(out).encode()


def now() -> float:
    """Wall-clock seconds (``traefik_config_last_reload_success``)."""
    return time.time()


# -- what is read at scrape ---------------------------------------------------------------


def answer(registry: Registry) -> Callable[[bytes], tuple[int, bytes, bytes, bytes] | None]:
    """The ``/metrics`` answer of an entry point (its ``internal`` answers): the text of
    ``registry``'s samples, rendered now; None for another path."""

    def metrics(path: bytes) -> tuple[int, bytes, bytes, bytes] | None:
        if path != METRICS_PATH:
            return None
        shared = registry.shared
        return 200, render(shared if shared is not None else registry.collect()), CONTENT_TYPE, b""

    return metrics


class MetricsAnswer(Middleware):
    """The last step of a ``prometheus@internal`` route (``manualRouting``): the text of
    ``registry``'s samples, whatever the path the router matched, to GET and HEAD (405
    for other methods), as Traefik's handler answers."""

    __slots__ = ("registry",)

    def __init__(self, registry: Registry) -> None:
        super().__init__("prometheus@internal")
        self.registry = registry

    def request(self, fwd: Forward) -> Answer | None:
        if fwd.method not in (b"GET", b"HEAD"):
            return Answer(405, b"Allow: GET, HEAD\r\n", b"405 method not allowed\n")
        registry = self.registry
        shared = registry.shared
        text = render(shared if shared is not None else registry.collect())
        return Answer(200, b"", text, CONTENT_TYPE)


def watch_dataplane(registry: Registry, dataplane: Any) -> None:
    """Have ``registry`` read, at scrape, what a :class:`~edge.app.Dataplane` holds: open
    connections per entry point, UDP counters and sessions, servers up, certificates."""

    certs: dict[Any, list] = {}  # certificate file (version) -> what it says

    def read(samples: Samples) -> None:
        for name, ep in dataplane.entrypoints.all.items():
            proxy = getattr(ep, "proxy", None)
            if proxy is None:  # TCP: every live connection, whatever it became
                samples.add("traefik_open_connections", (name, "TCP"), len(ep.connections))
                _tcp_relays(samples, name, ep)
                for (outcome, version), n in ep.peek.handshakes.counts.items():
                    samples.add("edge_tls_handshakes_total", (name, outcome, version), n)
                continue
            samples.add("traefik_open_connections", (name, "UDP"), len(proxy.table))
            samples.add("edge_udp_sessions", (name,), len(proxy.table))
            samples.add("edge_udp_no_route_total", (name,), proxy.no_route)
            for (router, service), c in proxy.counters.items():
                where = (name, router, service)
                samples.add(
                    "edge_udp_datagrams_total", (*where, "to_server"), c.datagrams_to_server
                )
                samples.add(
                    "edge_udp_datagrams_total", (*where, "to_client"), c.datagrams_to_client
                )
                samples.add("edge_udp_bytes_total", (*where, "to_server"), c.bytes_to_server)
                samples.add("edge_udp_bytes_total", (*where, "to_client"), c.bytes_to_client)
                samples.add("edge_udp_dropped_total", where, c.dropped)
                samples.add("edge_udp_sessions_total", where, c.sessions_opened)
                samples.add(
                    "edge_udp_sessions_ended_total", (*where, "expired"), c.sessions_expired
                )
                samples.add(
                    "edge_udp_sessions_ended_total", (*where, "evicted"), c.sessions_evicted
                )
        runtime = dataplane.runtime
        if runtime is not None:
            _servers_up(samples, runtime, dataplane.health.status)
            if runtime.tls is not None:
                _certificates(samples, runtime.tls, certs)

    registry.sources.append(read)


def _tcp_relays(samples: Samples, name: str, ep: Any) -> None:
    """The TCP routers' counters of entry point ``name``: the relays that ended, and the
    bytes of those still open."""
    for (router, service), c in ep.peek.tcp_counters.items():
        where = (name, router, service)
        samples.add("edge_tcp_connections_total", where, c.connections)
        samples.add("edge_tcp_dial_errors_total", where, c.dial_errors)
        samples.add("edge_tcp_bytes_total", (*where, "to_server"), c.bytes_to_server)
        samples.add("edge_tcp_bytes_total", (*where, "to_client"), c.bytes_to_client)
    for conn in list(ep.connections):
        c = getattr(conn, "counted", None)
        splice = getattr(conn, "splice", None)
        if c is not None and splice is not None:
            where = (name, c.router, c.service)
            samples.add("edge_tcp_bytes_total", (*where, "to_server"), splice.bytes_a_to_b)
            samples.add("edge_tcp_bytes_total", (*where, "to_client"), splice.bytes_b_to_a)


def _servers_up(samples: Samples, runtime: Any, down: Callable[[str], set[str]]) -> None:
    """``traefik_service_server_up``: 1 per HTTP load-balancer server, 0 for one a health
    check took out."""
    for name, info in runtime.http_services.items():
        lb = getattr(info.config, "load_balancer", None)
        if lb is None:
            continue
        out = down(name)
        for server in lb.servers:
            url = getattr(server, "url", "")
            if url:
                samples.add("traefik_service_server_up", (name, url), 0 if url in out else 1)


def _certificates(samples: Samples, tls: Any, cache: dict[Any, list]) -> None:
    """``traefik_tls_certs_not_after`` of each certificate the configuration names (its
    leaf, by common name, serial and SANs), read once per file version (``cache``)."""
    values = [c.cert_file for c in tls.certificates]
    values += [
        s.default_certificate.cert_file
        for s in tls.stores.values()
        if s.default_certificate is not None
    ]
    for value in values:
        if not value:
            continue
        key: Any = value
        if "-----BEGIN" not in value:
            try:
                st = os.stat(value)
            except (OSError, ValueError):
                continue
            key = (value, st.st_ino, st.st_size, st.st_mtime_ns)
        found = cache.get(key)
        if found is None:
            found = cache[key] = _expiry(value)
        for cn, serial, sans, not_after in found:
            samples.add("traefik_tls_certs_not_after", (cn, serial, sans), not_after)


def _expiry(value: str) -> list[tuple[str, str, str, float]]:
    """(common name, serial, SANs comma-separated, not after) of a PEM file's (or PEM
    text's) first certificate; none when it does not read."""
    try:
        if "-----BEGIN" in value:
            data = value.encode()
        else:
            with open(value, "rb") as f:
                data = f.read()
        cert = x509.load_pem_x509_certificate(data)
    except (OSError, ValueError):
        return []
    cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        sans = ",".join(str(v) for v in ext.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        sans = ""
    return [(cn, str(cert.serial_number), sans, cert.not_valid_after_utc.timestamp())]


def watch_reloads(registry: Registry, watcher: Any) -> None:
    """Have ``registry`` read the configuration rounds of ``watcher``
    (:class:`~edge.watcher.Watcher`: ``applied``, ``last_success``)."""

    def read(samples: Samples) -> None:
        samples.add("traefik_config_reloads_total", (), watcher.applied)
        samples.add("traefik_config_last_reload_success", (), watcher.last_success)

    registry.sources.append(read)


def watch_kubernetes(registry: Registry, providers: Iterable[Any]) -> None:
    """Have ``registry`` read, at scrape, the counters of the Kubernetes cores (one per
    cluster, :class:`~edge.providers.kubernetes.client.KubeCore`) ``providers`` read
    from: watch restarts and objects skipped, summed over the core's clients."""
    cores = list({id(core): core for p in providers if (core := getattr(p, "core", None))}.values())
    if not cores:
        return

    def read(samples: Samples) -> None:
        for core in cores:
            for client in core.clients:
                with client._lock:
                    restarts = list(client.restarts.items())
                    skipped = list(client.skipped.items())
                for (kind, reason), n in restarts:
                    samples.add("edge_kubernetes_watch_restarts_total", (kind, reason), n)
                for kind, n in skipped:
                    samples.add("edge_kubernetes_objects_skipped_total", (kind,), n)

    registry.sources.append(read)
