"""The access log (``accessLog``): a line per HTTP exchange, as Traefik writes it, and a
line per TCP connection and UDP session (edge's own; Traefik logs none).

:class:`AccessLogger` is the loop's side: the entry points hand it each finished
exchange (the HTTP contexts' ``access_log`` hook), relay (``relay``) and session
(``session``); it formats a line, keeps it in memory, and hands what waits to a
:class:`LogWriter` every :data:`FLUSH_INTERVAL` (or once ``bufferingSize`` lines
wait). The writer's thread does the writing, so a slow, full or blocked file never
stalls the loop.

**HTTP lines.** ``format: json`` writes one object per line with Traefik's keys
(sorted, as Go's encoder writes a map): ``ClientAddr``, ``ClientHost`` (a trusted
client's ``X-Forwarded-For`` when it sent one), ``ClientPort``, ``ClientUsername``
(the user of the ``Basic`` or ``Digest`` credentials a ``basicAuth`` or ``digestAuth``
middleware of the route read, else ``-``), ``RequestAddr`` (the Host), ``RequestHost``,
``RequestPort`` (``-`` without one), ``RequestMethod``, ``RequestPath``,
``RequestProtocol``, ``RequestScheme``, ``RequestLine``, ``RequestContentSize`` (the
body bytes read from the client, chunked or not, as Traefik counts them), ``DownstreamStatus``,
``DownstreamContentSize`` (body bytes sent), ``OriginStatus``, ``OriginContentSize``
and ``OriginDuration`` (of the server's answer: 0 when no server was tried; an error
edge answered for the server, a 502 or 504, counts as its answer, as in Traefik),
``Overhead`` (``Duration`` less ``OriginDuration``), ``Duration`` (nanoseconds, from the request's
head to its answer's end), ``RouterName``, ``ServiceName`` (the load balancer whose
server was picked), ``ServiceURL``, ``ServiceAddr``, ``entryPointName``,
``RetryAttempts`` (the ``retry`` middleware's), ``RequestCount`` (this process's
requests since start), ``TLSVersion`` (``1.3``), ``TLSCipher`` (Go's name),
``TLSClientSubject`` (RFC 4514, as Go's ``pkix.Name``), ``StartUTC``, ``StartLocal``,
then ``level`` (``info``), ``msg`` (empty) and ``time`` as logrus writes them, and the
headers kept: ``request_<Name>``, ``origin_<Name>``, ``downstream_<Name>`` (Go's
canonical spelling, values joined by ``,``; ``REDACTED`` when redacted). A key with
nothing to say is left out, as Traefik does (``RouterName`` when no router matched,
``Service*`` when no server was picked, ``TLS*`` without TLS).

``format: common`` is Traefik's CLF, field for field (one line)::

    <ClientHost> - <ClientUsername> [<StartUTC>] "<RequestMethod> <RequestPath> <RequestProtocol>"
    <DownstreamStatus> <DownstreamContentSize> "<request_Referer>" "<request_User-Agent>"
    <RequestCount> "<RouterName>" "<ServiceURL>" <Duration>ms

``genericCLF`` stops after the user agent. As in Traefik, headers are dropped unless
``fields.headers`` keeps them, so referer and user agent read ``"-"`` by default; a
dropped field reads ``-`` (``StartUTC`` dropped: ``StartLocal``'s time).

**TCP and UDP lines**, when a relayed TCP connection or a UDP session ends (a relay
whose dial failed too), in json with the same keys where they mean the same:
``RequestProtocol`` (``TCP`` or ``UDP``), ``ClientAddr``, ``ClientHost``,
``ClientPort``, ``RouterName``, ``ServiceName``, ``ServiceAddr`` (the server),
``entryPointName``, ``RequestContentSize`` (bytes from the client, relayed to the
server), ``DownstreamContentSize`` (bytes to the client), for UDP
``RequestDatagrams`` and ``DownstreamDatagrams``, ``Duration`` (from the relay's
start, or the session's first datagram, to its end: an expired session's includes
its idle timeout), ``StartUTC``, ``StartLocal``, ``level``, ``msg``, ``time``. In
common (and genericCLF) format::

    <ClientHost> - - [<StartUTC>] "TCP <RouterName> <ServiceName> <ServiceAddr>" <bytes from the client> <bytes to the client> <Duration>ms

``filters.minDuration`` applies to them; ``statusCodes`` and ``retryAttempts`` keep
none of them (they have no status, no retries).

**Filters and fields**, as Traefik reads them: a line is kept when no filter is set,
or when one keeps it (``statusCodes``, ``retryAttempts``, ``minDuration``);
``fields.defaultMode`` and ``fields.names`` (any case) keep or drop each field;
``fields.headers`` keeps, drops or redacts each header (dropped by default);
``fields.queryParameters.defaultMode: drop`` cuts the query from ``RequestPath``.
``addInternals``: requests edge's own services answer (``/ping``, the API,
``/metrics``, ``*@internal`` routers such as redirections) are logged only with it.

Cost: everything the configuration decides is resolved once, here; a line computes
the fields it writes (TLS, client subject, user, headers only when kept). With the
access log off no hook is set, and the exchange pays nothing.

**When the log cannot be written** (a full disk, a file that cannot be opened, a pipe
nobody reads): serving goes on. Lines wait in memory up to :data:`MAX_PENDING`
bytes; past that, and when a write or an open fails, they are dropped and counted,
and the log says so at most once per :data:`REPORT_EVERY` seconds (``access log:
N lines dropped ...: <the error>``). Each batch is written again from scratch (a
disk with room again takes the next one); a file that could not be opened is tried
again every :data:`RETRY_OPEN` seconds, and at once on SIGUSR1 (:meth:`reopen`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from cryptography import x509

from edge.config.dynamic import http_code_ranges
from edge.config.static import AccessLog
from edge.http.codec.headers import split_header_lines
from edge.http.middlewares.auth import BasicAuth, DigestAuth, basic_credentials, digest_params
from edge.tls.certs import CIPHER_SUITES

if TYPE_CHECKING:
    import asyncio

    from edge.tcp.peek import Relay
    from edge.udp.sessions import Session

__all__ = ["FLUSH_INTERVAL", "AccessLogger", "LogWriter"]

log = logging.getLogger("edge.accesslog")

FLUSH_INTERVAL = 0.1  # seconds a line may wait in memory before it goes to the writer
MAX_PENDING = 8 << 20  # bytes handed to the writer and not yet written, past which lines drop
REPORT_EVERY = 10.0  # seconds between two log lines about dropped access log lines
RETRY_OPEN = 1.0  # seconds between two tries to open a log file that could not be opened

# Every HTTP field, as Traefik names them (``fields.names`` folds case).
HTTP_FIELDS = (
    "ClientAddr",
    "ClientHost",
    "ClientPort",
    "ClientUsername",
    "DownstreamContentSize",
    "DownstreamStatus",
    "Duration",
    "OriginContentSize",
    "OriginDuration",
    "OriginStatus",
    "Overhead",
    "RequestAddr",
    "RequestContentSize",
    "RequestCount",
    "RequestHost",
    "RequestLine",
    "RequestMethod",
    "RequestPath",
    "RequestPort",
    "RequestProtocol",
    "RequestScheme",
    "RetryAttempts",
    "RouterName",
    "ServiceAddr",
    "ServiceName",
    "ServiceURL",
    "StartLocal",
    "StartUTC",
    "TLSCipher",
    "TLSClientSubject",
    "TLSVersion",
    "entryPointName",
)
# The fields of TCP and UDP lines (edge's own lines; the same names where they mean the same).
CONNECTION_FIELDS = (
    "ClientAddr",
    "ClientHost",
    "ClientPort",
    "DownstreamContentSize",
    "DownstreamDatagrams",
    "Duration",
    "RequestContentSize",
    "RequestDatagrams",
    "RequestProtocol",
    "RouterName",
    "ServiceAddr",
    "ServiceName",
    "StartLocal",
    "StartUTC",
    "entryPointName",
)

# OpenSSL's names of TLS 1.2 suites -> Go's (Traefik's TLSCipher); TLS 1.3's are the same
# in both. Where Go has two names for one suite, its own (CipherSuiteName's) is the longer.
GO_CIPHERS = {
    openssl: go for go, openssl in sorted(CIPHER_SUITES.items(), key=lambda item: len(item[0]))
}
PROTOCOLS = {b"1.1": "HTTP/1.1", b"1.0": "HTTP/1.0", b"2": "HTTP/2.0", b"2.0": "HTTP/2.0"}
PROTOCOLS_B = {version: protocol.encode() for version, protocol in PROTOCOLS.items()}
TLS_VERSIONS = {"TLSv1": "1.0", "TLSv1.1": "1.1", "TLSv1.2": "1.2", "TLSv1.3": "1.3"}
# Request headers Go's server does not keep among the request's headers.
NOT_REQUEST_HEADERS = frozenset((b"host", b"transfer-encoding"))
KEPT_NAMES = 1024  # header names whose canonical spelling a logger keeps made
KEPT_SUBJECTS = 256  # client certificates whose subject a logger keeps made


def canonical(name: str) -> str:
    """Go's ``textproto.CanonicalMIMEHeaderKey``: ``user-agent`` -> ``User-Agent``; a
    name with a byte no token has is left as it is."""
    if not name or any(not (c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~")) for c in name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


class _Clock:
    """Wall-clock texts, made once per second (a line asks several per request)."""

    __slots__ = ("local", "local_clf", "offset", "second", "utc", "utc_clf", "utc_clf_b")

    def __init__(self) -> None:
        self.second = -1
        self.utc = self.local = self.offset = self.utc_clf = self.local_clf = ""
        self.utc_clf_b = b""

    def at(self, second: int) -> _Clock:
        if second != self.second:
            self.second = second
            utc = time.gmtime(second)
            local = time.localtime(second)
            self.utc = time.strftime("%Y-%m-%dT%H:%M:%S", utc)
            self.local = time.strftime("%Y-%m-%dT%H:%M:%S", local)
            gmtoff = local.tm_gmtoff or 0
            sign = "-" if gmtoff < 0 else "+"
            hours, minutes = divmod(abs(gmtoff) // 60, 60)
            self.offset = "Z" if not gmtoff else f"{sign}{hours:02d}:{minutes:02d}"
            self.utc_clf = time.strftime("%d/%b/%Y:%H:%M:%S +0000", utc)
            self.utc_clf_b = self.utc_clf.encode()
            self.local_clf = time.strftime("%d/%b/%Y:%H:%M:%S ", local) + (
                f"{sign}{hours:02d}{minutes:02d}"
            )
        return self


def _fraction(ns: int) -> str:
    """Go's RFC3339Nano fraction of a second: ``.123456789`` with trailing zeros cut."""
    if not ns:
        return ""
    return ("." + f"{ns:09d}").rstrip("0")


def _protocol(version: bytes) -> str:
    """Go's ``Request.Proto``: ``HTTP/1.1``, ``HTTP/2.0``."""
    return "HTTP/2.0" if version in (b"2", b"2.0") else "HTTP/" + version.decode("latin-1")


def _split_host_port(value: str) -> tuple[str, str]:
    """Traefik's ``silentSplitHostPort``: (host, port), or (value, ``-``) when it has no port."""
    if value.startswith("["):
        end = value.find("]")
        if end > 0 and value[end + 1 : end + 2] == ":" and value[end + 2 :]:
            return value[1:end], value[end + 2 :]
        return value, "-"
    host, colon, port = value.rpartition(":")
    if not colon or not port or ":" in host:
        return value, "-"
    return host, port


def _address(host: str, port: int | str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Filters:
    """``filters`` resolved: the statuses kept, whether a retry keeps a line, the least
    duration that keeps one (seconds; 0: none)."""

    __slots__ = ("min_duration", "retry", "statuses")

    def __init__(self, codes: list[str], retry: bool, min_duration: float) -> None:
        self.statuses = frozenset(
            code for low, high in http_code_ranges(codes) for code in range(low, high + 1)
        )
        self.retry = retry
        self.min_duration = min_duration


class LogWriter:
    """Writes what the loop hands it (:meth:`submit`), in a thread of its own.

    ``path``: the file (opened for appending, its folder made), or None for standard
    output. What could not be written is counted (``dropped``) with the error that
    dropped it; :meth:`report` hands them over once. See the module doc."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.queue: deque[tuple[bytes, int]] = deque()
        self.pending = 0  # bytes in the queue
        self.dropped = 0  # lines dropped since the last report
        self.error: str | None = None  # what dropped the latest of them
        self.written = 0  # lines written since start
        self._fd: int | None = None if path else sys.stdout.fileno()
        self._opened_at = float("-inf")  # monotonic time of the last try to open
        self._open_error = ""  # why the last try failed
        self._cut = False  # a write failed part way: the file's last line is cut
        self._reopen = False
        self._stop = False
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="edge-accesslog", daemon=True)
        self._thread.start()

    # -- the loop's side ----------------------------------------------------------------

    def submit(self, data: bytes, lines: int) -> bool:
        """Queue ``data`` (``lines`` lines) for writing; False (counted) when too much waits."""
        with self._lock:
            if self.pending + len(data) > MAX_PENDING:
                self.dropped += lines
                if self.error is None:
                    self.error = f"more than {MAX_PENDING} bytes wait to be written"
                return False
            self.queue.append((data, lines))
            self.pending += len(data)
            self._wake.notify()
            return True

    def report(self) -> tuple[int, str | None]:
        """(lines dropped, the error that dropped the latest) since the last report."""
        with self._lock:
            dropped, error = self.dropped, self.error
            self.dropped, self.error = 0, None
            return dropped, error

    def reopen(self) -> None:
        """Open the file again by its path before the next write (SIGUSR1)."""
        with self._lock:
            self._reopen = True
            self._opened_at = float("-inf")
            self._wake.notify()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything queued was written or dropped; False at ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float) -> bool:
        """Write what is queued (for at most ``timeout`` seconds), then stop; False when
        the thread is still blocked in a write (it ends with the process)."""
        with self._lock:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the thread's side ----------------------------------------------------------------

    def _run(self) -> None:
        if self.path and self._open() is None:  # opened at once, as Traefik opens it
            log.error(
                "access log: %s; lines are dropped until it opens (tried every %gs, and on"
                " SIGUSR1)",
                self._open_error,
                RETRY_OPEN,
            )
        while True:
            with self._lock:
                while not self.queue and not self._stop and not self._reopen:
                    self._idle.notify_all()
                    self._wake.wait()
                reopen, self._reopen = self._reopen, False
                batch = list(self.queue)
                self.queue.clear()
                self.pending = 0
                stop = self._stop
                self._busy = bool(batch)
            if reopen:  # SIGUSR1: the file opened again by its path, now
                self._close_fd()
                if self._open() is None:
                    log.error("access log: %s (tried again on SIGUSR1)", self._open_error)
            if batch:
                self._write(b"".join(data for data, _ in batch), sum(n for _, n in batch))
            with self._lock:
                self._busy = False
                if stop and not self.queue:
                    self._idle.notify_all()
                    break
        if self.path:
            self._close_fd()

    def _write(self, data: bytes, lines: int) -> None:
        fd = self._fd if self._fd is not None else self._open()
        if fd is None:
            self._drop(lines, self._open_error)
            return
        if self._cut:  # end the line a failed write cut, so the next ones are whole
            data = b"\n" + data
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            self._cut = len(view) < len(data) or self._cut
            self._drop(lines, f"{self.path or 'standard output'}: {exc.strerror or exc}")
            return
        self._cut = False
        self.written += lines

    def _open(self) -> int | None:
        """The file, opened now; None (and why, in ``_open_error``) when it cannot be,
        or when the last try was less than :data:`RETRY_OPEN` seconds ago."""
        now = time.monotonic()
        if now - self._opened_at < RETRY_OPEN:
            return None
        self._opened_at = now
        path = self.path
        assert path is not None
        try:
            folder = os.path.dirname(path)
            if folder and not os.path.lexists(folder):  # made, as Traefik does
                os.makedirs(folder, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o664)
        except OSError as exc:
            self._open_error = f"cannot open {path}: {exc.strerror or exc}"
            return None
        return self._fd

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self.path:
            with contextlib.suppress(OSError):
                os.close(fd)
        if not self.path:
            self._fd = sys.stdout.fileno()

    def _drop(self, lines: int, error: str) -> None:
        with self._lock:
            self.dropped += lines
            self.error = error


class AccessLogger:
    """One process's access log (see the module doc): the entry points' hook for HTTP
    exchanges (calling it), and :meth:`relay_hook` / :meth:`session_hook` for TCP and UDP."""

    def __init__(self, config: AccessLog, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.json = config.format == "json"
        self.generic = config.format == "genericCLF"
        self.internals = config.add_internals
        self.count = 0  # requests since start (Traefik's RequestCount)
        self.lines: list[bytes] = []
        self.limit = config.buffering_size  # 0: lines wait for the timer alone
        self._timer: asyncio.TimerHandle | None = None
        self._report_timer: asyncio.TimerHandle | None = None
        self._reported = float("-inf")  # loop time of the last report of dropped lines
        self._clock = _Clock()
        self._names: dict[bytes, str] = {}  # header name as sent -> Go's spelling
        self._subjects: dict[bytes, str] = {}  # client certificate (DER) -> its subject
        self._hosts: dict[bytes, tuple[str, str, str]] = {}  # Host -> RequestAddr, -Host, -Port

        filters = config.filters
        self.filters = (
            _Filters(filters.status_codes, filters.retry_attempts, float(filters.min_duration))
            if filters is not None and filters.active
            else None
        )

        # fields: what each line has, decided once.
        fields = config.fields
        folded = {name.lower(): mode == "keep" for name, mode in fields.names.items()}
        default = fields.default_mode == "keep"

        def kept(name: str) -> bool:
            return folded.get(name.lower(), default)

        self.keep = frozenset(n for n in (*HTTP_FIELDS, *CONNECTION_FIELDS) if kept(n))
        self.dropped = tuple(n for n in HTTP_FIELDS if n not in self.keep)
        self.dropped_connection = tuple(n for n in CONNECTION_FIELDS if n not in self.keep)
        keep = self.keep
        # What CLF lines write, in their order (a dropped field reads "-").
        self.clf_kept = tuple(
            name in keep
            for name in (
                "ClientHost",
                "ClientUsername",
                "StartUTC",
                "RequestMethod",
                "RequestPath",
                "RequestProtocol",
                "DownstreamStatus",
                "DownstreamContentSize",
                "RequestCount",
                "RouterName",
                "ServiceURL",
                "Duration",
            )
        )
        self.clf_whole = all(self.clf_kept)
        self.connection_kept = tuple(
            name in keep for name in ("ServiceName", "ServiceAddr", "RequestContentSize")
        )
        self.want_client_port = bool(keep & {"ClientAddr", "ClientPort"})
        self.want_tls = bool(keep & {"TLSVersion", "TLSCipher"})
        self.want_subject = "TLSClientSubject" in keep
        self.want_user = "ClientUsername" in keep
        self.want_local = "StartLocal" in keep
        self.want_utc = "StartUTC" in keep
        self.want_retries = "RetryAttempts" in keep or (
            self.filters is not None and self.filters.retry
        )
        self.query = fields.query_parameters.default_mode == "keep"

        headers = fields.headers
        self.header_default = headers.default_mode
        self.header_modes = {name.lower().encode(): mode for name, mode in headers.names.items()}
        # Headers are looked at only where one may be kept or redacted.
        self.headers_on = self.json and (
            self.header_default != "drop" or any(m != "drop" for m in self.header_modes.values())
        )
        self.referer_mode = self.header_modes.get(b"referer", self.header_default)
        self.agent_mode = self.header_modes.get(b"user-agent", self.header_default)

        self.writer = LogWriter(config.file_path or None)

    # -- HTTP ---------------------------------------------------------------------------

    def __call__(self, ex: Any, duration: float) -> None:
        """One line for a finished :class:`~edge.http.server.exchange.Exchange`."""
        route = ex.route
        backend = ex.backend
        if backend is None and not self.internals and self._internal(ex, route):
            return
        self.count += 1
        filters = self.filters
        if filters is not None and not (
            ex.status in filters.statuses
            or (filters.retry and self._retries(ex, route))
            or (filters.min_duration and duration > filters.min_duration)
        ):
            return
        if self.json:
            line = self._json(ex, route, backend, duration)
        else:
            line = self._clf(ex, route, duration)
        self._add(line)

    @staticmethod
    def _internal(ex: Any, route: Any) -> bool:
        """Whether edge's own services answered ``ex`` (Traefik's routers to a
        ``*@internal`` service): an ``@internal`` route's, or the answer the internal
        entry point gave itself (no router; not an error about the request)."""
        if route is not None:
            return bool(route.service.name.endswith("@internal"))
        status = ex.status
        return ex.conn.ctx.internal is not None and (status < 400 or status == 503)

    @staticmethod
    def _retries(ex: Any, route: Any) -> int:
        """The ``retry`` middleware's retries of ``ex`` (a route with no middleware has none)."""
        if route is None or route.express:
            return 0  # an express route has no middleware (and may have taken the express path)
        x = ex.x
        fwd = x.fwd
        return x.attempt - 1 if fwd is not None and fwd.retry is not None else 0

    def _path(self, target: bytes) -> str:
        """``RequestPath``: the target without scheme and host (absolute-form), without
        its query where ``queryParameters`` drops it."""
        if target[:1] != b"/" and b"://" in target:
            start = target.find(b"/", target.index(b"://") + 3)
            target = target[start:] if start >= 0 else b"/"
        if not self.query:
            target = target.partition(b"?")[0]
        return target.decode("latin-1")

    def _client(self, conn: Any) -> tuple[str, str, str]:
        """(ClientAddr, ClientHost, ClientPort) of a connection."""
        ip = conn.client_ip
        port = _client_port(conn) if self.want_client_port else "-"
        return (_address(ip, port) if port != "-" else ip), ip, port

    def _forwarded_for(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        for name, value in headers:
            if len(name) == 15 and name.lower() == b"x-forwarded-for":
                return value.decode("latin-1") if value else None
        return None

    def _user(self, ex: Any, route: Any) -> str:
        """``ClientUsername``: the user of the credentials a basicAuth or digestAuth
        middleware of the route reads (as Traefik's set it, authenticated or not)."""
        if route is None or route.express:
            return "-"
        for step in route.pipeline.steps:
            if isinstance(step, BasicAuth | DigestAuth):
                for name, value in ex.head.headers:
                    if len(name) == 13 and name.lower() == b"authorization":
                        if isinstance(step, BasicAuth):
                            credentials = basic_credentials(value)
                            return credentials[0] or "-" if credentials else "-"
                        if value[:7].lower() == b"digest ":
                            user = digest_params(value[7:]).get(b"username", b"")
                            return user.decode("utf-8", "replace") or "-"
                        return "-"
                return "-"
        return "-"

    @staticmethod
    def _tls(conn: Any) -> tuple[str, str] | None:
        """(TLSVersion, TLSCipher) of a connection edge terminated, None without TLS (the
        metrics' ``tls_version`` and ``tls_cipher`` too)."""
        transport = conn.transport
        cipher = transport.get_extra_info("cipher") if transport is not None else None
        if not cipher:
            return None
        name, version, _ = cipher
        return TLS_VERSIONS.get(version, version), GO_CIPHERS.get(name, name)

    def _subject(self, conn: Any) -> str | None:
        transport = conn.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if ssl_object is None:
            return None
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return None
        subject = self._subjects.get(der)
        if subject is None:
            try:
                subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
            except ValueError:
                subject = ""
            if len(self._subjects) >= KEPT_SUBJECTS:
                self._subjects.clear()
            self._subjects[der] = subject
        return subject or None

    def _start(self, duration: float) -> tuple[int, int]:
        """(seconds, nanoseconds) of the wall-clock time ``duration`` ago."""
        start = time.time_ns() - int(duration * 1e9)
        return divmod(start, 1_000_000_000)

    def _json(self, ex: Any, route: Any, backend: Any, duration: float) -> bytes:
        conn = ex.conn
        ctx = conn.ctx
        head = ex.head
        status = ex.status
        sent = ex.sent
        method = head.method.decode("latin-1")
        target = head.target
        path = target.decode("latin-1") if self.query and target[:1] == b"/" else self._path(target)
        protocol = PROTOCOLS.get(head.version) or _protocol(head.version)
        ip = conn.client_ip
        port = _client_port(conn) if self.want_client_port else "-"
        client_host = ip
        if conn.trusted:
            client_host = self._forwarded_for(head.headers) or ip
        ns = int(duration * 1e9)
        if backend is not None:
            # When the request went upstream: the express path's own stamp (it has no
            # General), else the general path's.
            origin = getattr(ex, "origin", 0.0) or getattr(getattr(ex, "x", None), "origin", 0.0)
            origin_ns = ns - int((origin - ex.started) * 1e9) if origin else ns
            origin_status = status
            origin_size = sent
        else:
            origin_ns = origin_status = origin_size = 0
        express = route is None or route.express  # no middleware: no user, no retries
        now = time.time_ns()
        second, fraction = divmod(now - ns, 1_000_000_000)
        clock = self._clock
        if second != clock.second:
            clock.at(second)
        frac = f".{fraction:09d}".rstrip("0") if fraction else ""
        record: dict[str, Any] = {
            "ClientAddr": (f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
            if port != "-"
            else ip,
            "ClientHost": client_host,
            "ClientPort": port,
            "ClientUsername": "-" if express or not self.want_user else self._user(ex, route),
            "DownstreamContentSize": sent,
            "DownstreamStatus": status,
            "Duration": ns,
            "OriginContentSize": origin_size,
            "OriginDuration": origin_ns,
            "OriginStatus": origin_status,
            "Overhead": ns - origin_ns,
            "RequestContentSize": ex.x.received if head.content_length or head.chunked else 0,
            "RequestCount": self.count,
            "RequestLine": f"{method} {path} {protocol}",
            "RequestMethod": method,
            "RequestPath": path,
            "RequestProtocol": protocol,
            "RequestScheme": "https" if ctx.scheme == b"https" else "http",
            "RetryAttempts": 0 if express or not self.want_retries else self._retries(ex, route),
            "StartLocal": clock.local + frac + clock.offset,
            "StartUTC": clock.utc + frac + "Z",
            "entryPointName": ctx.name,
            "level": "info",
            "msg": "",
        }
        host = head.host
        if host:
            hosts = self._hosts
            split = hosts.get(host)
            if split is None:
                authority = host.decode("latin-1")
                split = (authority, *_split_host_port(authority))
                if len(hosts) >= KEPT_NAMES:
                    hosts.clear()
                hosts[host] = split
            record["RequestAddr"], record["RequestHost"], record["RequestPort"] = split
        if route is not None:
            record["RouterName"] = route.name
        if backend is not None:
            url = backend.server.url
            record["ServiceName"] = backend.service
            record["ServiceURL"] = url
            record["ServiceAddr"] = url.partition("://")[2].partition("/")[0]
        if ctx.scheme == b"https":
            if self.want_tls:
                tls = self._tls(conn)
                if tls is not None:
                    record["TLSVersion"], record["TLSCipher"] = tls
            if self.want_subject:
                subject = self._subject(conn)
                if subject is not None:
                    record["TLSClientSubject"] = subject
        second = now // 1_000_000_000
        if second != clock.second:
            clock.at(second)
        record["time"] = clock.local + clock.offset
        for name in self.dropped:
            record.pop(name, None)
        if self.headers_on:
            self._headers(record, "request_", head.headers, NOT_REQUEST_HEADERS)
            resp = ex.resp_head
            if resp is not None:
                self._headers(record, "origin_", resp.headers)
            out = ex.resp_out
            if out is not None:
                end = out.find(b"\r\n\r\n") + 4
                if end >= 4:
                    lines = split_header_lines(out, out.find(b"\r\n") + 2, end)
                    self._headers(record, "downstream_", lines)
            elif resp is not None:
                self._headers(record, "downstream_", resp.headers)
        return orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)

    def _headers(
        self,
        record: dict[str, Any],
        prefix: str,
        headers: list[tuple[bytes, bytes]],
        skip: frozenset[bytes] = frozenset(),
    ) -> None:
        """The headers ``fields.headers`` keeps or redacts, as ``<prefix><Name>`` keys."""
        modes = self.header_modes
        default = self.header_default
        joined: dict[str, list[str]] = {}
        for name, value in headers:
            lower = name.lower()
            mode = modes.get(lower, default)
            if mode == "drop" or lower in skip:
                continue
            key = self._names.get(name)
            if key is None:
                key = canonical(name.decode("latin-1"))
                if len(self._names) >= KEPT_NAMES:
                    self._names.clear()
                self._names[name] = key
            text = "REDACTED" if mode == "redact" else value.decode("latin-1")
            values = joined.get(key)
            if values is None:
                joined[key] = [text]
            elif mode != "redact":
                values.append(text)
        for key, values in joined.items():
            record[prefix + key] = ",".join(values)

    def _clf(self, ex: Any, route: Any, duration: float) -> bytes:
        if self.clf_whole:  # every field kept: bytes in, bytes out
            conn = ex.conn
            head = ex.head
            who = conn.client_ip_b
            if conn.trusted:
                forwarded = self._forwarded_for(head.headers)
                if forwarded:
                    who = forwarded.encode("latin-1")
            second = (time.time_ns() - int(duration * 1e9)) // 1_000_000_000
            clock = self._clock
            if second != clock.second:
                clock.at(second)
            target = head.target
            referer = agent = b'"-"'
            if self.referer_mode != "drop" or self.agent_mode != "drop":
                referer, agent = self._quoted(head.headers)
            first = b'%s - %s [%s] "%s %s %s" %d %d %s %s' % (
                who or b"-",
                b"-"
                if route is None or route.express or not self.want_user
                else self._user(ex, route).encode("utf-8", "surrogateescape"),
                clock.utc_clf_b,
                head.method,
                target
                if self.query and target[:1] == b"/"
                else self._path(target).encode("latin-1"),
                PROTOCOLS_B.get(head.version) or _protocol(head.version).encode("latin-1"),
                ex.status,
                ex.sent,
                referer,
                agent,
            )
            if self.generic:
                return first + b"\n"
            backend = ex.backend
            return b'%s %d "%s" "%s" %dms\n' % (
                first,
                self.count,
                route.name.encode("utf-8", "surrogateescape") if route is not None else b"-",
                backend.server.url.encode("utf-8", "surrogateescape")
                if backend is not None
                else b"-",
                int(duration * 1000),
            )
        conn = ex.conn
        head = ex.head
        client = conn.client_ip
        if conn.trusted:
            client = self._forwarded_for(head.headers) or client
        referer = agent = b'"-"'
        if self.referer_mode != "drop" or self.agent_mode != "drop":
            referer, agent = self._quoted(head.headers)
        second, _ = self._start(duration)
        clock = self._clock.at(second)
        when = clock.utc_clf if self.want_utc else clock.local_clf if self.want_local else "-"
        k = self.clf_kept
        status = ex.status if k[6] else "-"
        sent = ex.sent if k[7] else "-"
        line = (
            f"{(client or '-') if k[0] else '-'} - {self._user(ex, route) if self.want_user else '-'}"
            f" [{when}]"
            f' "{head.method.decode("latin-1") if k[3] else "-"}'
            f" {self._path(head.target) if k[4] else '-'}"
            f' {_protocol(head.version) if k[5] else "-"}"'
            f" {status} {sent} {referer.decode('latin-1')} {agent.decode('latin-1')}"
        )
        if not self.generic:
            backend = ex.backend
            router = route.name if route is not None and k[9] else "-"
            url = backend.server.url if backend is not None and k[10] else "-"
            ms = int(duration * 1000) if k[11] else 0
            line += f' {self.count if k[8] else "-"} "{router}" "{url}" {ms}ms'
        return (line + "\n").encode("utf-8", "surrogateescape")

    def _quoted(self, headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
        """The request's Referer and User-Agent as CLF writes them (values joined by
        ``,``, ``"`` escaped; ``"-"`` when none or dropped; ``"REDACTED"``)."""
        found: dict[bytes, list[bytes]] = {b"referer": [], b"user-agent": []}
        for name, value in headers:
            values = found.get(name.lower())
            if values is not None:
                values.append(value)
        out = []
        for key, mode in ((b"referer", self.referer_mode), (b"user-agent", self.agent_mode)):
            value = b",".join(found[key])
            if mode == "drop" or not value:
                out.append(b'"-"')
            elif mode == "redact":
                out.append(b'"REDACTED"')
            else:
                out.append(b'"%s"' % value.replace(b'"', b'\\"'))
        return out[0], out[1]

    # -- TCP and UDP ----------------------------------------------------------------------

    def relay_hook(self, entrypoint: str) -> Callable[[Relay], None]:
        """What ``entrypoint``'s TCP relays call when they end."""
        return lambda relay: self.relay(entrypoint, relay)

    def session_hook(self, entrypoint: str) -> Callable[[Session], None]:
        """What ``entrypoint``'s UDP sessions call when they end."""
        return lambda session: self.session(entrypoint, session)

    def relay(self, entrypoint: str, relay: Relay) -> None:
        """One line for a TCP connection relayed to a server, at its end."""
        splice = relay.splice
        server = relay.server
        self._connection(
            entrypoint,
            "TCP",
            relay.client_ip,
            relay.peer[1] if relay.peer else None,
            relay.route_name,
            server.service if server is not None else "",
            server.address if server is not None else "",
            splice.bytes_a_to_b if splice is not None else 0,
            splice.bytes_b_to_a if splice is not None else 0,
            None,
            time.monotonic() - relay.opened,
        )

    def session(self, entrypoint: str, session: Session) -> None:
        """One line for a UDP session, at its end."""
        counters = session.counters
        server = session.server
        client = session.client
        self._connection(
            entrypoint,
            "UDP",
            _unmapped(client[0]),
            client[1],
            counters.router,
            counters.service,
            server.address if server is not None else "",
            counters.bytes_to_server,
            counters.bytes_to_client,
            (counters.datagrams_to_server, counters.datagrams_to_client),
            time.monotonic() - session.opened,
        )

    def _connection(
        self,
        entrypoint: str,
        protocol: str,
        ip: str,
        port: int | None,
        router: str,
        service: str,
        server: str,
        up: int,
        down: int,
        datagrams: tuple[int, int] | None,
        duration: float,
    ) -> None:
        filters = self.filters
        if filters is not None and not (filters.min_duration and duration > filters.min_duration):
            return
        second, fraction = self._start(duration)
        clock = self._clock.at(second)
        if not self.json:
            when = clock.utc_clf if self.want_utc else clock.local_clf if self.want_local else "-"
            k = self.clf_kept
            c = self.connection_kept
            line = (
                f"{(ip or '-') if k[0] else '-'} - - [{when}]"
                f' "{protocol} {(router or "-") if k[9] else "-"}'
                f' {(service or "-") if c[0] else "-"} {(server or "-") if c[1] else "-"}"'
                f" {up if c[2] else '-'} {down if k[7] else '-'}"
                f" {int(duration * 1000) if k[11] else 0}ms\n"
            )
            self._add(line.encode("utf-8", "surrogateescape"))
            return
        frac = _fraction(fraction)
        record: dict[str, Any] = {
            "ClientAddr": _address(ip, port) if port is not None else ip,
            "ClientHost": ip,
            "ClientPort": str(port) if port is not None else "-",
            "DownstreamContentSize": down,
            "Duration": int(duration * 1e9),
            "RequestContentSize": up,
            "RequestProtocol": protocol,
            "StartLocal": clock.local + frac + clock.offset,
            "StartUTC": clock.utc + frac + "Z",
            "entryPointName": entrypoint,
            "level": "info",
            "msg": "",
        }
        if router:
            record["RouterName"] = router
        if service:
            record["ServiceName"] = service
        if server:
            record["ServiceAddr"] = server
        if datagrams is not None:
            record["RequestDatagrams"], record["DownstreamDatagrams"] = datagrams
        clock.at(int(time.time()))
        record["time"] = clock.local + clock.offset
        for name in self.dropped_connection:
            record.pop(name, None)
        self._add(orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))

    # -- the buffer -----------------------------------------------------------------------

    def _add(self, line: bytes) -> None:
        self.lines.append(line)
        if self.limit and len(self.lines) >= self.limit:
            self.flush()
        elif self._timer is None:
            self._timer = self.loop.call_later(FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        """Hand the lines waiting to the writer; say what was dropped (at most once per
        :data:`REPORT_EVERY`)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        lines = self.lines
        if lines:
            self.lines = []
            self.writer.submit(b"".join(lines), len(lines))
            if self._report_timer is None:  # the writer's thread may drop them meanwhile
                self._report_timer = self.loop.call_later(FLUSH_INTERVAL, self._report)

    def _report(self, final: bool = False) -> None:
        """Log the lines dropped since the last report, unless one was made less than
        :data:`REPORT_EVERY` ago (then once that time is up)."""
        self._report_timer = None
        if not self.writer.dropped:
            return
        now = self.loop.time()
        wait = self._reported + REPORT_EVERY - now
        if wait > 0 and not final:
            self._report_timer = self.loop.call_later(wait, self._report)
            return
        dropped, error = self.writer.report()
        if dropped:
            self._reported = now
            log.error("access log: %d lines dropped: %s", dropped, error)

    def reopen(self) -> None:
        """Hand over what waits, then write to a file opened again at ``filePath`` (SIGUSR1)."""
        self.flush()
        if self.config.file_path:
            self.writer.reopen()

    def close(self, timeout: float = 2.0) -> None:
        """Write what waits (for at most ``timeout`` seconds) and stop the writer."""
        self.flush()
        if self._report_timer is not None:
            self._report_timer.cancel()
            self._report_timer = None
        if not self.writer.close(timeout):
            log.error(
                "access log: still blocked writing after %gs; lines waiting are lost", timeout
            )
        self._report(final=True)


def _unmapped(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def _client_port(conn: Any) -> str:
    """The client's port, as text ("-" when the connection knows none)."""
    arrival = getattr(conn, "arrival", None)  # an HTTP/2 stream has none
    peer = (
        arrival.client
        if arrival is not None and arrival.client
        else (conn.transport.get_extra_info("peername") if conn.transport else None)
    )
    return str(peer[1]) if peer else "-"
