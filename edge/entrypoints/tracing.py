"""Tracing, as Traefik's ``tracing`` does it: spans of each HTTP exchange, W3C Trace
Context to the upstream, exported over OTLP/HTTP in batches off the loop.

Owns the parsing of ``traceparent`` (:func:`parse_traceparent`: pure, over bytes), the
sampling decision (Traefik's ``ParentBased(TraceIDRatioBased(sampleRate))``: an
incoming valid ``traceparent`` keeps its trace and its decision, a trace edge starts is
sampled when its id falls under ``sampleRate``, as OpenTelemetry's ratio sampler reads
the id), the spans an exchange makes, and their export (:class:`Exporter`).

The spans, Traefik's minimal verbosity: the entry point's (kind SERVER, named by the
method) and, where the request went upstream, ``ReverseProxy`` under it (kind CLIENT),
whose id is the parent the upstream request's ``traceparent`` names. An entry point's or
router's ``observability.traceVerbosity: detailed`` puts ``Router``
(``traefik.router.name``, ``traefik.service.name``, ``http.route``: the rule) and
``Service`` between them (kind INTERNAL); ``observability.tracing: false`` makes none
of the spans of the requests it covers (:mod:`edge.entrypoints.observability` decides
per route, once per configuration). Attributes follow
the OpenTelemetry semantic conventions Traefik writes (``http.request.method``,
``url.path``, ``url.query`` with every value but ``safeQueryParams``' ``REDACTED``,
``http.response.status_code``, ``server.address``, ``network.protocol.version``...);
a server span is an error from 500 on, a client span from 400 on.

Invariants:
- Nothing here runs per request unless the request's route traces: the hook reaches an
  exchange as its route's record reader (:class:`Traced`, beside the access log it
  chains to: ``Route.record``), and the exchange asks it for the upstream's header
  edits (``Route.trace``) on the general path only: a traced route is never express,
  since the express path forwards the client's own ``traceparent``; every other route
  keeps it.
- The loop never waits on the collector. Finished spans go into a bounded queue
  (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048); a full queue drops them, counted. A thread of
  the exporter's own posts them in batches (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``, 512)
  every ``OTEL_BSP_SCHEDULE_DELAY`` (5 s) or as soon as a batch is full, each post
  bounded by ``OTEL_BSP_EXPORT_TIMEOUT`` (10 s): the OpenTelemetry SDK's batch span
  processor, read from the same variables Traefik's SDK reads.
- The payload is OTLP/HTTP JSON (``application/json``, gzipped as Traefik's exporter
  sends protobuf): every collector that speaks OTLP/HTTP accepts it, and it needs no
  protobuf dependency.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import logging
import os
import random
import re
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote_plus, urlsplit

import orjson

from edge import __version__
from edge.config.static import OTLPHTTP, Tracing
from edge.entrypoints.accesslog import AccessLogger, _client_port
from edge.http.codec.forward import HeaderEdits

__all__ = [
    "Exporter",
    "Parent",
    "Traced",
    "Tracer",
    "parse_traceparent",
]

log = logging.getLogger("edge.tracing")

TRACEPARENT = b"traceparent"
TRACESTATE = b"tracestate"
SCOPE = "edge"

# OTLP's enums (opentelemetry/proto/trace/v1/trace.proto).
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_UNSET, STATUS_ERROR = 0, 2

# The batch span processor's defaults, and the variables that change them (milliseconds
# for times), as OpenTelemetry's SDKs read them.
BSP_DEFAULTS = {
    "OTEL_BSP_SCHEDULE_DELAY": 5000,
    "OTEL_BSP_EXPORT_TIMEOUT": 10000,
    "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
}
REPORT_EVERY = 60.0  # seconds between two log lines about spans lost

_TRACEPARENT = re.compile(rb"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = b"0" * 32
_ZERO_SPAN = b"0" * 16


class Parent(NamedTuple):
    """What a valid ``traceparent`` says: the trace, the caller's span, its decision."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    sampled: bool


def parse_traceparent(value: bytes) -> Parent | None:
    """A ``traceparent`` value (W3C Trace Context) -> :class:`Parent`; None when it is
    not valid, which the caller treats as no parent at all.

    Version ``00`` is exactly 55 characters; a later version may go on after a ``-``
    (its first four fields are read as 00's); ``ff`` is invalid, so are upper-case hex,
    an all-zero trace or span id, and anything else out of shape.
    """
    value = value.strip(b" \t")
    if len(value) < 55:
        return None
    m = _TRACEPARENT.fullmatch(value, 0, 55)
    if m is None:
        return None
    version, trace_id, span_id, flags = m.groups()
    if version == b"ff" or (len(value) > 55 and (version == b"00" or value[55:56] != b"-")):
        return None
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return Parent(trace_id.decode(), span_id.decode(), bool(int(flags, 16) & 1))


def incoming(headers: list[tuple[bytes, bytes]]) -> tuple[Parent | None, bytes]:
    """(the request's parent, its ``tracestate``): a parent only from exactly one valid
    ``traceparent`` header; the ``tracestate`` (joined) only with that parent."""
    parent_values = []
    states = []
    for name, value in headers:
        if len(name) == 11 and name.lower() == TRACEPARENT:
            parent_values.append(value)
        elif len(name) == 10 and name.lower() == TRACESTATE:
            states.append(value)
    if len(parent_values) != 1:
        return None, b""
    parent = parse_traceparent(parent_values[0])
    if parent is None:
        return None, b""
    return parent, b",".join(v.strip() for v in states)


class _Trace:
    """One exchange's part of a trace, decided when it goes upstream (or at its end)."""

    __slots__ = (
        "client_id",
        "parent",
        "router_id",
        "sampled",
        "server_id",
        "service_id",
        "state",
        "trace_id",
        "upstream_ns",
    )

    def __init__(
        self, trace_id: str, parent: str, sampled: bool, state: bytes, server_id: str
    ) -> None:
        self.trace_id = trace_id
        self.parent = parent  # the caller's span id, "" for a trace edge started
        self.sampled = sampled
        self.state = state
        self.server_id = server_id
        self.client_id = ""  # the ReverseProxy span's, once the request goes upstream
        self.router_id = ""  # ...and the Router and Service spans' (detailed verbosity)
        self.service_id = ""
        self.upstream_ns = 0


def _bsp(environ: Mapping[str, str], name: str) -> int:
    raw = environ.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        if raw:
            log.warning("tracing: %s=%r is not a number; %d is used", name, raw, BSP_DEFAULTS[name])
        return BSP_DEFAULTS[name]
    return value if value > 0 else BSP_DEFAULTS[name]


Span = tuple[str, str, str, str, str, int, int, int, int, list[tuple[str, Any]]]
"""A finished span as the loop hands it to the exporter, whose thread writes its OTLP
JSON (:func:`_otlp`): trace id, span id, parent span id ("" for none), trace state,
name, kind, start and end (ns since the epoch), the HTTP status, the attributes."""


def _value(v: Any) -> dict[str, Any]:
    """An OTLP JSON AnyValue: a str, an int, a bool or a list of str."""
    kind = type(v)
    if kind is str:
        return {"stringValue": v}
    if kind is int:
        return {"intValue": str(v)}
    if kind is list:
        return {"arrayValue": {"values": [{"stringValue": s} for s in v]}}
    return {"boolValue": bool(v)}


def _attributes(pairs: Any) -> list[dict[str, Any]]:
    """OTLP JSON KeyValues (``_value`` inlined for the common kinds: the thread's cost)."""
    out = []
    for k, v in pairs:
        kind = type(v)
        if kind is str:
            out.append({"key": k, "value": {"stringValue": v}})
        elif kind is int:
            out.append({"key": k, "value": {"intValue": str(v)}})
        else:
            out.append({"key": k, "value": _value(v)})
    return out


def _otlp(span: Span) -> dict[str, Any]:
    """A span's OTLP JSON (the exporter's thread makes it)."""
    trace_id, span_id, parent, state, name, kind, start, end, status, attributes = span
    out: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": _attributes(attributes),
        # A server span is an error from 500 on, a client span from 400 on; Traefik's
        # Router and Service spans say nothing.
        "status": {"code": STATUS_UNSET}
        if kind == KIND_INTERNAL
        else _status(status, 400 if kind == KIND_CLIENT else 500),
    }
    if parent:
        out["parentSpanId"] = parent
    if state:
        out["traceState"] = state
    return out


def resource_attributes(config: Tracing, environ: Mapping[str, str]) -> dict[str, Any]:
    """The resource every span carries, in Traefik's order of precedence: edge's own
    (host, process, SDK), then ``service.name`` and ``service.version``, then
    ``resourceAttributes``, then ``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``)."""
    attrs: dict[str, Any] = {
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "edge",
        "telemetry.sdk.version": __version__,
        "service.name": config.service_name,
        "service.version": __version__,
    }
    attrs.update(config.resource_attributes or {})
    for item in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip():
            attrs[key.strip()] = value.strip()
    return attrs


class Exporter:
    """Spans to an OTLP/HTTP collector, posted by a thread of its own (module doc).

    The loop's side is :meth:`add` (a length check and an append) and :meth:`close`;
    ``dropped`` (queue full) and ``lost`` (a post that failed) count what never
    reached the collector, ``exported`` what did."""

    def __init__(
        self,
        collector: OTLPHTTP,
        resource: dict[str, Any],
        environ: Mapping[str, str],
    ) -> None:
        parts = urlsplit(collector.endpoint)
        self.secure = parts.scheme.lower() == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.secure else 80)
        self.path = (parts.path or "/v1/traces") + (f"?{parts.query}" if parts.query else "")
        self.headers = {
            **collector.headers,
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "User-Agent": f"edge/{__version__}",
        }
        self.context = _client_context(collector) if self.secure else None
        self.delay = _bsp(environ, "OTEL_BSP_SCHEDULE_DELAY") / 1000
        self.timeout = _bsp(environ, "OTEL_BSP_EXPORT_TIMEOUT") / 1000
        self.max_queue = _bsp(environ, "OTEL_BSP_MAX_QUEUE_SIZE")
        self.batch = min(_bsp(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), self.max_queue)
        self.resource = {"attributes": _attributes(resource.items())}
        self.scope = {"name": SCOPE, "version": __version__}
        self.queue: deque[Span] = deque()
        self.dropped = 0  # queue full (counted by the loop)
        self.lost = 0  # posts that failed (counted by the thread)
        self.exported = 0
        self.error = ""  # why the latest post failed
        self._reported = (0, 0)  # (dropped, lost) the last report said
        self._last_report = float("-inf")
        self._conn: http.client.HTTPConnection | None = None
        self._stop = False
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="edge-tracing", daemon=True)
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------

    def add(self, span: Span) -> None:
        queue = self.queue
        if len(queue) >= self.max_queue:
            self.dropped += 1
            return
        queue.append(span)
        if len(queue) == self.batch:
            self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Post what waits now; False when it is not done within ``timeout`` seconds."""
        self._idle.clear()
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Post what waits (for at most ``timeout`` seconds), then stop the thread."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error(
                "tracing: the collector still holds a post after %gs; spans are lost", timeout
            )
        self._report(final=True)

    # -- the thread's side --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.delay)
            self._wake.clear()
            stop = self._stop
            queue = self.queue
            while queue:
                batch: list[Span] = []
                with contextlib.suppress(IndexError):
                    while len(batch) < self.batch:
                        batch.append(queue.popleft())
                try:
                    self._post(batch)
                except Exception as exc:  # a bug here must not end the thread
                    log.exception("tracing: spans could not be exported")
                    self._lose(len(batch), f"{type(exc).__name__}: {exc}")
            self._idle.set()
            self._report()
            if stop:
                break
        if self._conn is not None:
            self._conn.close()

    def _post(self, spans: list[Span]) -> None:
        body = gzip.compress(
            orjson.dumps(
                {
                    "resourceSpans": [
                        {
                            "resource": self.resource,
                            "scopeSpans": [
                                {"scope": self.scope, "spans": [_otlp(span) for span in spans]}
                            ],
                        }
                    ]
                }
            ),
            compresslevel=1,  # a batch's spans repeat: level 1 gets most of it, for little CPU
        )
        for attempt in (1, 2):  # a kept-alive connection the collector closed: once again
            conn = self._conn
            fresh = conn is None
            if conn is None:
                conn = self._conn = (
                    http.client.HTTPSConnection(
                        self.host, self.port, timeout=self.timeout, context=self.context
                    )
                    if self.secure
                    else http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                )
            try:
                conn.request("POST", self.path, body, self.headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._conn = None
                if fresh or attempt == 2 or isinstance(exc, TimeoutError):
                    self._lose(len(spans), f"{self.host}:{self.port}: {exc}")
                    return
                continue
            if response.will_close:
                conn.close()
                self._conn = None
            if 200 <= response.status < 300:
                self.exported += len(spans)
            else:
                self._lose(len(spans), f"the collector answered {response.status}")
            return

    def _lose(self, count: int, error: str) -> None:
        self.lost += count
        self.error = error

    def _report(self, final: bool = False) -> None:
        dropped, lost = self.dropped, self.lost
        if (dropped, lost) == self._reported:
            return
        now = time.monotonic()
        if not final and now - self._last_report < REPORT_EVERY:
            return
        before_dropped, before_lost = self._reported
        self._reported = (dropped, lost)
        self._last_report = now
        if dropped > before_dropped:
            log.error(
                "tracing: %d spans dropped: more than %d waited for the collector",
                dropped - before_dropped,
                self.max_queue,
            )
        if lost > before_lost:
            log.error("tracing: %d spans not exported: %s", lost - before_lost, self.error)


def _client_context(collector: OTLPHTTP) -> ssl.SSLContext:
    tls = collector.tls
    context = ssl.create_default_context(cafile=tls.ca or None if tls is not None else None)
    if tls is not None:
        if tls.cert:
            context.load_cert_chain(tls.cert, tls.key)
        if tls.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    return context


class Tracer:
    """One process's tracing: what ``tracing`` decides, worked out once, and the exporter.

    :meth:`for_entry_point` makes the hook each entry point's exchanges report to."""

    def __init__(
        self,
        config: Tracing,
        environ: Mapping[str, str],
        *,
        exporter: Exporter | None = None,
    ) -> None:
        self.config = config
        # OpenTelemetry's TraceIDRatioBased: sampled when the id's last 8 bytes, shifted
        # right once, fall under rate x 2^63.
        rate = config.sample_rate
        self.bound = (1 << 63) if rate >= 1.0 else int(rate * (1 << 63))
        self.internals = config.add_internals
        self.request_headers = tuple(
            (h.lower().encode(), f"http.request.header.{h.lower()}")
            for h in config.captured_request_headers
            if h.lower() != "user-agent"  # user_agent.original has it already
        )
        self.response_headers = tuple(
            (h.lower().encode(), f"http.response.header.{h.lower()}")
            for h in config.captured_response_headers
        )
        self.safe_params = frozenset(config.safe_query_params)
        self.random = random.Random(os.urandom(16))
        # Router name -> its rule (http.route), for detailed spans: the Dataplane
        # replaces it with each configuration it commits.
        self.rules: dict[str, str] = {}
        self.exporter = (
            exporter
            if exporter is not None
            else Exporter(config.http, resource_attributes(config, environ), environ)
        )

    def traced(
        self, entry_point: str, access_log: Callable[..., None] | None, detailed: bool
    ) -> Traced:
        """The hook of exchanges traced on ``entry_point``, chained to ``access_log``
        (``detailed``: with Router and Service spans); :mod:`edge.entrypoints.observability`
        decides which exchanges, once per configuration."""
        return Traced(self, entry_point, access_log, detailed)

    def close(self, timeout: float = 2.0) -> None:
        self.exporter.close(timeout)

    # -- per exchange ---------------------------------------------------------------------

    def start(self, head: Any) -> _Trace:
        """The exchange's trace: its request's parent continued, else a new one sampled."""
        rand = self.random
        parent, state = incoming(head.headers)
        if parent is not None:
            return _Trace(parent.trace_id, parent.span_id, parent.sampled, state, _span_id(rand))
        bits = rand.getrandbits(128) or 1
        sampled = ((bits & 0xFFFFFFFFFFFFFFFF) >> 1) < self.bound
        return _Trace(f"{bits:032x}", "", sampled, b"", _span_id(rand))

    def query(self, query: bytes) -> str:
        """``url.query`` as Traefik writes it: by name, a name not among the safe ones
        once with the value ``REDACTED`` (Go's ``Values.Set``), encoded as Go's
        ``url.Values.Encode``."""
        if not query:
            return ""
        values: dict[str, list[str]] = {}
        for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            values.setdefault(k, []).append(v)
        safe = self.safe_params
        return "&".join(
            f"{quote_plus(k)}={quote_plus(v)}"
            for k in sorted(values)
            for v in (values[k] if k in safe else ("REDACTED",))
        )


def _span_id(rand: random.Random) -> str:
    return f"{rand.getrandbits(64) or 1:016x}"


def _version(version: bytes) -> str:
    return "2" if version == b"2.0" else version.decode()


def _header_values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[str]:
    n = len(name)
    return [v.decode("latin-1") for k, v in headers if len(k) == n and k.lower() == name]


def _status(code: int, error_from: int) -> dict[str, Any]:
    if code < 100 or code >= 600:
        return {"code": STATUS_ERROR, "message": f"Invalid HTTP status code {code}"}
    return {"code": STATUS_ERROR if code >= error_from else STATUS_UNSET}


class Traced:
    """An entry point's exchanges as tracing sees them: the record's reader (called with
    each finished exchange, then the access log it chains to) and :meth:`trace`, which
    the exchange asks for the upstream request's header edits."""

    __slots__ = ("access_log", "detailed", "entry_point", "tracer")

    def __init__(
        self,
        tracer: Tracer,
        entry_point: str,
        access_log: Callable[..., None] | None,
        detailed: bool = False,
    ) -> None:
        self.tracer = tracer
        self.entry_point = entry_point
        self.access_log = access_log
        self.detailed = detailed

    def trace(self, ex: Any, edits: HeaderEdits | None) -> HeaderEdits | None:
        """The exchange goes upstream: its trace decided, ``edits`` plus the
        ``traceparent`` of its ReverseProxy span (and no ``tracestate`` where the
        trace is edge's own)."""
        try:
            return self._trace(ex, edits)
        except Exception:  # tracing must never cost a request its answer
            log.exception("tracing: the trace of a request could not be started")
            return edits

    def _trace(self, ex: Any, edits: HeaderEdits | None) -> HeaderEdits:
        tracer = self.tracer
        x = ex.x
        # Once per exchange: a request that goes upstream again (a divert to an error
        # page's service) stays in its trace, its last ReverseProxy span the one kept.
        trace = getattr(x, "trace", None)
        if trace is None:
            trace = x.trace = tracer.start(ex.head)
        rand = tracer.random
        trace.client_id = _span_id(rand)
        if self.detailed:
            trace.router_id = _span_id(rand)
            trace.service_id = _span_id(rand)
        trace.upstream_ns = time.time_ns()
        parent = b"00-%s-%s-%s" % (
            trace.trace_id.encode(),
            trace.client_id.encode(),
            b"01" if trace.sampled else b"00",
        )
        pairs = [*(edits.pairs if edits else ()), (b"traceparent", parent)]
        if not trace.state:
            pairs.append((b"tracestate", b""))  # removed: it belongs to no trace edge continues
        return HeaderEdits(pairs)

    def __call__(self, ex: Any, duration: float) -> None:
        try:
            self._spans(ex, duration)
        except Exception:  # a span must never cost the access log its line
            log.exception("tracing: the spans of an exchange could not be made")
        access_log = self.access_log
        if access_log is not None:
            access_log(ex, duration)

    def _spans(self, ex: Any, duration: float) -> None:
        tracer = self.tracer
        route = ex.route
        backend = ex.backend
        if backend is None and not tracer.internals and AccessLogger._internal(ex, route):
            return
        x = getattr(ex, "x", None)
        trace = getattr(x, "trace", None) if x is not None else None
        if trace is None:
            trace = tracer.start(ex.head)
        if not trace.sampled:
            return
        end = time.time_ns()
        start = end - int(duration * 1e9)
        head = ex.head
        conn = ex.conn
        status = ex.status
        method = head.method.decode("latin-1")
        version = _version(head.version)
        headers = head.headers
        path, _, query = head.target.partition(b"?")
        if path[:1] != b"/" and b"://" in path:  # absolute-form
            slash = path.find(b"/", path.index(b"://") + 3)
            path = path[slash:] if slash >= 0 else b"/"
        agent = _header_values(headers, b"user-agent")
        user_agent = agent[0] if agent else ""
        client = conn.client_ip
        port = _client_port(conn)  # the access log's ClientPort: "-" for none
        attrs: list[tuple[str, Any]] = [
            ("entry_point", self.entry_point),
            ("http.request.method", method),
            ("network.protocol.version", version),
            ("http.request.body.size", -1 if head.chunked else head.content_length or 0),
            ("url.path", path.decode("latin-1")),
            ("url.query", tracer.query(query)),
            ("url.scheme", conn.ctx.scheme.decode()),
            ("user_agent.original", user_agent),
            ("server.address", head.host.decode("latin-1")),
            ("network.peer.address", client),
            ("client.address", client),
        ]
        if port != "-":
            attrs.append(("client.port", int(port)))
            attrs.append(("network.peer.port", int(port)))
        captured = []
        for name, key in tracer.request_headers:
            values = _header_values(headers, name)
            if values:
                captured.append((key, values))
        attrs.extend(captured)
        response = ex.resp_head
        answered: list[tuple[str, Any]] = []
        if response is not None and tracer.response_headers:
            for name, key in tracer.response_headers:
                values = _header_values(response.headers, name)
                if values:
                    answered.append((key, values))
        if status > 0:
            attrs.append(("http.response.status_code", status))
        attrs.extend(answered)
        exporter = tracer.exporter
        state = trace.state.decode("latin-1")
        exporter.add(
            (
                trace.trace_id,
                trace.server_id,
                trace.parent,
                state,
                method,
                KIND_SERVER,
                start,
                end,
                status,
                attrs,
            )
        )
        parent = trace.server_id
        if self.detailed and route is not None:
            router_id = trace.router_id or _span_id(tracer.random)
            service = route.service.name
            exporter.add(
                (
                    trace.trace_id,
                    router_id,
                    parent,
                    state,
                    "Router",
                    KIND_INTERNAL,
                    start,
                    end,
                    status,
                    [
                        ("traefik.service.name", service),
                        ("traefik.router.name", route.name),
                        ("http.route", tracer.rules.get(route.name, "")),
                    ],
                )
            )
            if trace.service_id:
                exporter.add(
                    (
                        trace.trace_id,
                        trace.service_id,
                        router_id,
                        state,
                        "Service",
                        KIND_INTERNAL,
                        start,
                        end,
                        status,
                        [("traefik.service.name", service)],
                    )
                )
                parent = trace.service_id
        if trace.client_id and backend is not None:
            exporter.add(
                (
                    trace.trace_id,
                    trace.client_id,
                    parent,
                    state,
                    "ReverseProxy",
                    KIND_CLIENT,
                    trace.upstream_ns,
                    end,
                    status,
                    self._client(tracer, ex, backend, method, user_agent, captured, answered),
                )
            )

    @staticmethod
    def _client(
        tracer: Tracer,
        ex: Any,
        backend: Any,
        method: str,
        user_agent: str,
        captured: list[tuple[str, Any]],
        answered: list[tuple[str, Any]],
    ) -> list[tuple[str, Any]]:
        """The ReverseProxy span's attributes: the request as it went to ``backend``."""
        server = backend.server
        scheme = "https" if server.tls else "http"
        # The target as it went upstream (middlewares may have changed it).
        line = ex.up_head[: ex.up_head.find(b"\r\n")].split(b" ")
        target = line[1] if len(line) == 3 else ex.head.target
        path, _, query = target.partition(b"?")
        if path[:1] != b"/":
            path = b"/"
        url = f"{scheme}://{server.host}:{server.port}{path.decode('latin-1')}"
        safe_query = tracer.query(query)
        attrs: list[tuple[str, Any]] = [
            ("http.request.method", method),
            ("network.protocol.version", "2" if getattr(server, "h2c", False) else "1.1"),
            ("url.full", f"{url}?{safe_query}" if safe_query else url),
            ("url.scheme", scheme),
            ("user_agent.original", user_agent),
            ("network.peer.address", server.host),
            ("network.peer.port", server.port),
            ("server.address", server.host),
            ("server.port", server.port),
            *captured,
        ]
        if ex.status > 0:
            attrs.append(("http.response.status_code", ex.status))
        attrs.extend(answered)
        return attrs
