"""Side-by-side HTTP benchmark: edge vs nginx vs HAProxy, all measured in one invocation.

Run: ``.venv/bin/python loadtest/bench.py [--quick] [--scenarios a,b] [--subjects x,y]
[--runs 3] [--duration 10] [--json out.json]`` (``--list`` shows scenarios and subjects).

One nginx backend (one worker) serves a 12-byte body on ``/`` and static 64 KiB / 1 MiB
files on ``/64k`` and ``/1m``. For each scenario every applicable subject (a proxy in
front of that backend, or ``direct``) is started fresh, warmed up with wrk, then measured
in rounds that alternate between subjects (round 1: all subjects, round 2: all
subjects, ...), so that drift on the machine hits every subject alike. Each figure is the
median over ``--runs`` runs. Everything binds 127.0.0.1 on free ports; every process the
harness starts is in its own session and is stopped (SIGTERM, then SIGKILL) at the end.

CPU per request: over each measured run, the user and system CPU time of every process
in the subject's session (``/proc/<pid>/stat``; a proxy's workers included) is divided
by the requests served. Unlike req/s it does not depend on what else shares the cores,
so it is the figure to compare across machines. ``--pin`` (machines with at least 8
cores) gives the subject, wrk and the backend cores of their own with ``taskset``: the
subject ``workers`` cores, wrk 4 (4 threads), the backend 4 (4 nginx workers).

HTTP/2 scenarios (``protocol="h2c"``) load the subject with ``h2load`` (Debian's
nghttp2-client) over h2c with prior knowledge: ``connections`` clients, ``h2_streams``
streams each in flight (``-m``); the subjects proxy to the same HTTP/1.1 backend (nginx
with ``listen ... http2``). h2load reports no percentiles: the latency column shows
its mean request time in ``p50``'s place, marked so in the JSON (``mean_ms``).

UDP scenarios (``protocol="udp"``) use ``udpload``, a small C load generator kept in
this file (``UDPLOAD_C``) and compiled into the temp dir with ``cc``; its echo server is
the backend of the echo scenarios and its sink that of the one-way scenario.

Before and after a change, in one run: ``git worktree add /tmp/before <commit>``, then
``EDGE_BASELINE=/tmp/before .venv/bin/python loadtest/bench.py ...`` adds the subject
``edge-baseline`` (that checkout's edge) to every HTTP, HTTPS and passthrough scenario.

Adding a scenario: one ``Scenario(...)`` entry in ``SCENARIOS``. Adding a subject: a
``Subject`` subclass (``start() -> "host:port"``, ``stop()``) registered in ``SUBJECTS``;
a scenario lists the subjects it applies to and may run one subject under several
configurations (``"edge-httptools@1-router"`` with ``variants={"1-router": {...}}``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import http.client
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOST = "127.0.0.1"
BENCH_HOST = "bench.local"
SMALL_BODY = "hello world\n"
BODY_FILES = {"64k": 64 * 1024, "1m": 1024 * 1024}
TOOL_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
STOP_TIMEOUT = 5.0
WRK_TIMEOUT = "5s"  # wrk's per-request timeout; slower responses count as timeout errors


# --- scenarios ---------------------------------------------------------------------

BASELINE_SUBJECT = ("edge-baseline",) if os.environ.get("EDGE_BASELINE") else ()
# EDGE_BASELINE=DIR: also run the edge of that checkout (before/after a change, one run)
HTTP_SUBJECTS = ("direct", "edge-httptools", "edge-h11", "nginx", "haproxy", *BASELINE_SUBJECT)

UDP_SUBJECTS = ("direct", "edge", "nginx", "udp-ceiling", *BASELINE_SUBJECT)
H2_SUBJECTS = ("edge-httptools", "edge-h11", "nginx", *BASELINE_SUBJECT)


@dataclass(frozen=True)
class Scenario:
    """A load shape plus the configuration tweaks it needs; see ``SCENARIOS``."""

    name: str
    description: str
    path: str = "/"
    connections: int = 50
    threads: int = 1
    wrk_args: tuple[str, ...] = ()
    subjects: tuple[str, ...] = HTTP_SUBJECTS  # labels: "subject" or "subject@variant"
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> field overrides
    baseline: str = "nginx"  # label the ratio columns divide by
    # what subjects must proxy: "http"; "https" (wrk speaks TLS to the subject, which
    # terminates it and proxies HTTP); "tls-passthrough" (TLS relayed untouched to the
    # backend's TLS port); "udp" (udpload instead of wrk; ``connections`` client sockets)
    protocol: str = "http"
    h2_streams: int = 1  # h2c: streams each client keeps in flight (h2load -m)
    udp_mode: str = "echo"  # "echo": round trips through an echo server; "oneway": to a sink
    udp_window: int = 1  # datagrams each client keeps in flight (echo)
    udp_size: int = 64  # payload bytes
    udp_listen: str = HOST  # the proxy's UDP listening address ("": every address)
    tls_tickets: bool = True  # https: False = no session tickets on any subject (full handshakes)
    workers: int = 1  # nginx worker_processes / haproxy nbthread / edge `workers` (if > 1)
    edge_routers: int = 0  # extra `Host(`hN.example.com`)` routers in edge's dynamic file
    edge_static_extra: dict[str, Any] = field(
        default_factory=dict
    )  # merged into edge's static config
    edge_dynamic_extra: dict[str, Any] = field(
        default_factory=dict
    )  # merged into edge's dynamic config
    ready_timeout: float = 15.0  # seconds for a subject to start and route one request

    def cases(self) -> list[tuple[str, str, Scenario]]:
        """``(label, subject name, effective scenario)`` per label in ``subjects``."""
        out = []
        for label in self.subjects:
            subject, _, variant = label.partition("@")
            effective = dataclasses.replace(self, **self.variants[variant]) if variant else self
            out.append((label, subject, effective))
        return out


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "keepalive-small",
        "keep-alive connections, 12-byte body",
        subjects=(*HTTP_SUBJECTS, "ceiling"),
    ),
    Scenario(
        "keepalive-varied",
        "keepalive-small, but every request head differs (target, an X-Seq header) and so does "
        "every response head (X-Request-Id): nothing parsed before can be reused",
        path="/varied",
        wrk_args=("-s", str(HERE / "varied.lua")),
    ),
    Scenario(
        "new-connection",
        "a new TCP connection per request (Connection: close), 12-byte body",
        wrk_args=("-H", "Connection: close"),
    ),
    Scenario("body-64k", "keep-alive, 64 KiB body", path="/64k", connections=10),
    Scenario("body-1m", "keep-alive, 1 MiB body", path="/1m", connections=10),
    Scenario(
        "routers-10k",
        "edge with 10,000 Host routers vs the same edge with one router (keepalive-small)",
        subjects=("edge-httptools", "edge-httptools@1-router"),
        variants={"1-router": {"edge_routers": 0}},
        baseline="edge-httptools@1-router",
        edge_routers=10_000,
        ready_timeout=60.0,
    ),
    Scenario(
        "metrics-keepalive",
        "keepalive-small with metrics.prometheus on (router and service labels) against off:"
        " what counting each request costs",
        subjects=("edge-httptools", "edge-httptools@metrics"),
        variants={
            "metrics": {
                "edge_static_extra": {
                    "metrics": {
                        "prometheus": {
                            "entryPoint": "traefik",
                            "addRoutersLabels": True,
                            "addServicesLabels": True,
                        }
                    }
                }
            }
        },
        baseline="edge-httptools",
    ),
    Scenario(
        "https-keepalive",
        "keep-alive HTTPS, 12-byte body: the subject terminates TLS (the same certificate)",
        protocol="https",
        subjects=("edge-httptools", "edge-h11", "nginx", *BASELINE_SUBJECT, "ceiling"),
    ),
    Scenario(
        "https-handshake",
        "a new TLS connection and handshake per request (Connection: close); wrk keeps its "
        "session, so each is a TLS 1.3 resumption with a new X25519 exchange",
        protocol="https",
        wrk_args=("-H", "Connection: close"),
        subjects=("edge-httptools", "nginx", *BASELINE_SUBJECT),
    ),
    Scenario(
        "https-handshake-full",
        "https-handshake with no session tickets on either side (edge: tls.options "
        "disableSessionTickets; nginx: ssl_session_tickets off, NumTickets 0): every "
        "connection a full TLS 1.3 handshake (X25519, an ECDSA P-256 signature)",
        protocol="https",
        wrk_args=("-H", "Connection: close"),
        subjects=("edge-httptools", "nginx", *BASELINE_SUBJECT),
        tls_tickets=False,
        edge_dynamic_extra={"tls": {"options": {"default": {"disableSessionTickets": True}}}},
    ),
    Scenario(
        "passthrough-1m-1conn",
        "TLS passthrough to the backend's TLS port, 1 MiB bodies over one connection",
        protocol="tls-passthrough",
        path="/1m",
        connections=1,
        subjects=("direct", "edge-httptools", "haproxy", *BASELINE_SUBJECT),
        baseline="haproxy",
    ),
    Scenario(
        "passthrough-1m-50conn",
        "TLS passthrough, 1 MiB bodies over 50 connections in parallel",
        protocol="tls-passthrough",
        path="/1m",
        subjects=("direct", "edge-httptools", "haproxy", *BASELINE_SUBJECT),
        baseline="haproxy",
    ),
    Scenario(
        "h2c-c10-m10",
        "HTTP/2 with prior knowledge (h2load), 10 connections with 10 streams each in flight, "
        "12-byte body, proxied to the HTTP/1.1 backend",
        protocol="h2c",
        connections=10,
        h2_streams=10,
        subjects=H2_SUBJECTS,
    ),
    Scenario(
        "h2c-c100-m1",
        "HTTP/2 with prior knowledge (h2load), 100 connections with one stream each in flight",
        protocol="h2c",
        connections=100,
        h2_streams=1,
        subjects=H2_SUBJECTS,
    ),
    Scenario(
        "udp-echo-1",
        "UDP echo round trips, one client, one datagram in flight (the DNS ping-pong)",
        protocol="udp",
        connections=1,
        subjects=UDP_SUBJECTS,
    ),
    Scenario(
        "udp-echo-100",
        "UDP echo round trips, 100 clients (100 sessions), one datagram in flight each; "
        "@wildcard: the proxy listens on every address and replies from the one written to",
        protocol="udp",
        connections=100,
        subjects=(*UDP_SUBJECTS, "edge@wildcard", "nginx@wildcard"),
        variants={"wildcard": {"udp_listen": ""}},
    ),
    Scenario(
        "udp-oneway",
        "UDP datagrams one way as fast as 100 clients send them; req/s: datagrams that "
        "reached the sink per second",
        protocol="udp",
        udp_mode="oneway",
        connections=100,
        subjects=UDP_SUBJECTS,
    ),
    Scenario(
        "workers-2",
        "two workers each (edge workers: 2, nginx worker_processes 2, haproxy nbthread 2); "
        "the backend stays at one worker",
        connections=100,
        threads=2,
        workers=2,
        subjects=("direct", "edge-httptools", "nginx", "haproxy"),
    ),
    Scenario(
        "workers-4",
        "four workers each, keep-alive small (meant for --pin on a machine with 12+ cores: "
        "four for the subject, four for wrk, four for the backend)",
        connections=200,
        threads=4,
        workers=4,
        subjects=("direct", "edge-httptools", "nginx", "haproxy"),
    ),
)


# --- processes and ports -----------------------------------------------------------


class SubjectFailed(Exception):
    """A subject could not start or serve; ``detail`` holds the end of its logs."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in TOOL_DIRS:
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


class Proc:
    """A child in its own session (process group == pid), output to a log file."""

    def __init__(
        self, argv: list[str], log: Path, cwd: Path | None = None, env: dict | None = None
    ) -> None:
        self.argv = argv
        self.log = log
        self._log_file = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        LIVE.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, wait, SIGKILL it if still there."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=STOP_TIMEOUT)
        # the group may outlive its leader (workers): make sure it is gone
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=STOP_TIMEOUT)
        self._log_file.close()
        if self in LIVE:
            LIVE.remove(self)


LIVE: list[Proc] = []


def stop_all() -> None:
    for proc in list(LIVE):
        proc.stop()


def http_get(
    port: int, path: str, host: str = BENCH_HOST, timeout: float = 2.0, tls: bool = False
) -> tuple[int, bytes]:
    if tls:  # the bench certificate is self-signed; no SNI (an IP address)
        context = ssl._create_unverified_context()
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            HOST, port, timeout=timeout, context=context
        )
    else:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Host": host})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def tls_probe(address: str, host: str = BENCH_HOST) -> str:
    """What a TLS subject negotiates, as wrk's OpenSSL client does it: version, cipher,
    key exchange group (``openssl s_client``, when there is one), and whether a second
    connection resumes the first one's session (wrk keeps its session)."""
    addr, _, port = address.rpartition(":")
    context = ssl._create_unverified_context()
    session, parts = None, []
    try:
        for _ in range(2):
            with (
                socket.create_connection((addr, int(port)), timeout=5) as sock,
                context.wrap_socket(sock, server_hostname=host, session=session) as s,
            ):
                s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                while s.recv(65536):
                    pass
                if session is None:
                    parts += [s.version() or "?", s.cipher()[0]]
                else:
                    parts.append("resumed" if s.session_reused else "not resumed")
                session = s.session
    except (OSError, ssl.SSLError) as exc:
        return f"probe failed: {exc}"
    openssl = shutil.which("openssl")
    if openssl:
        out = subprocess.run(
            [openssl, "s_client", "-connect", address, "-servername", host, "-brief"],
            input=b"",
            capture_output=True,
            timeout=10,
        )
        m = re.search(
            rb"(?:Server Temp Key|Negotiated TLS1.3 group): ([^\n]+)", out.stdout + out.stderr
        )
        if m:
            parts.insert(2, m.group(1).decode().strip())
    return ", ".join(parts)


def wait_until(
    proc: Proc, check: Callable[[], bool], timeout: float, what: str, logs: list[Path]
) -> None:
    """Poll ``check`` (bounded by ``timeout``) while ``proc`` lives; raise SubjectFailed."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        if not proc.alive():
            detail = "\n".join(t for t in (tail(p) for p in logs) if t)
            raise SubjectFailed(f"exited with code {proc.popen.returncode} before {what}", detail)
        try:
            if check():
                return
        except (OSError, http.client.HTTPException) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    detail = "\n".join(t for t in (tail(p) for p in logs) if t)
    raise SubjectFailed(f"not {what} after {timeout:.0f}s ({last_error or 'no answer'})", detail)


def expect_body(port: int, scenario: Scenario) -> Callable[[], bool]:
    """A check: GET the scenario's path through ``port`` answers 200 with the full body."""
    want = BODY_FILES.get(scenario.path.strip("/"), len(SMALL_BODY))
    if scenario.protocol == "h2c":
        return lambda: h2_get(port, scenario.path) == (200, want)

    def check() -> bool:
        status, body = http_get(port, scenario.path, tls=scenario.protocol != "http")
        return status == 200 and len(body) == want

    return check


def h2_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, int]:
    """(status, body length) of a GET over h2c with prior knowledge (h2's client); (0, 0)
    when it fails. A plain nginx ``listen ... http2`` speaks HTTP/2 alone."""
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    status = length = 0
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
            conn.initiate_connection()
            headers = [(":method", "GET"), (":scheme", "http"), (":authority", BENCH_HOST)]
            conn.send_headers(1, [*headers, (":path", path)], end_stream=True)
            sock.sendall(conn.data_to_send())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = sock.recv(65536)
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers)[b":status"])
                    elif isinstance(event, h2.events.DataReceived):
                        length += len(event.data)
                        conn.acknowledge_received_data(event.flow_controlled_length, 1)
                    elif isinstance(event, h2.events.StreamEnded):
                        return status, length
                sock.sendall(conn.data_to_send())
    except (OSError, h2.exceptions.H2Error):
        pass
    return 0, 0


# --- context: tools, temp dir, backend -----------------------------------------------


@dataclass
class Context:
    workdir: Path
    tools: dict[str, str | None]
    python: str
    backend_port: int = 0
    backend_tls_port: int = 0  # the backend's TLS server (passthrough scenarios)
    cert: Path | None = None  # the bench certificate and key (PEM), for every TLS server
    key: Path | None = None
    udp_echo_port: int = 0  # udpload echo-server (UDP echo scenarios)
    udp_sink_port: int = 0  # udpload sink (one-way scenario), and its counter's port
    udp_sink_ctrl: int = 0
    backend_session: int = 0  # the backend's session (what ``direct`` measures)
    pin: Pinning | None = None  # --pin on a machine with enough cores

    def path(self, name: str) -> Path:
        return self.workdir / name

    def pinned(self, role: str, argv: list[str], workers: int = 1) -> list[str]:
        """``argv`` run on the cores of ``role`` ("subject", "load", "backend") under --pin."""
        if self.pin is None:
            return argv
        return ["taskset", "-c", self.pin.cores(role, workers), *argv]


@dataclass(frozen=True)
class Pinning:
    """Cores of their own for the subject, the load generator and the backend (``--pin``).

    With 8 cores or more: the backend the first 4, the load generator the next 4, the
    subject what is left. With fewer (``shared``): the subject the last core (its
    workers share it), the backend and the load generator the others together. That
    still keeps the subject's caches its own, which is most of what a run on shared
    cores gets wrong: a process whose cores are also running wrk and the backend
    starts every wakeup with their code and data in the caches, and the larger its
    own footprint (an interpreter's), the more that costs it. Req/s then measure the
    load generator's core as much as the subject; CPU per request is the figure.
    """

    cpus: tuple[int, ...]
    load_cores: int = 4
    backend_cores: int = 4
    shared: bool = False  # fewer than MIN_CORES: backend and load generator share theirs

    MIN_CORES: ClassVar[int] = 8

    @classmethod
    def plan(cls) -> Pinning | None:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        if not shutil.which("taskset") or len(cpus) < 2:
            return None
        if len(cpus) >= cls.MIN_CORES:
            return cls(cpus)
        others = len(cpus) - 1
        return cls(cpus, load_cores=others, backend_cores=others, shared=True)

    def cores(self, role: str, workers: int = 1) -> str:
        if self.shared:
            chosen = self.cpus[-1:] if role == "subject" else self.cpus[:-1]
            return ",".join(map(str, chosen))
        # backend first (fixed), then the load generator, then the subject on what is left
        backend = self.cpus[: self.backend_cores]
        load = self.cpus[self.backend_cores : self.backend_cores + self.load_cores]
        subject = self.cpus[self.backend_cores + self.load_cores :][: max(1, workers)]
        chosen = {"backend": backend, "load": load, "subject": subject}[role]
        return ",".join(map(str, chosen))

    def describe(self) -> str:
        if self.shared:
            return f"pinned: the subject on core {self.cpus[-1]}, wrk and the backend on the others"
        return "pinned: subject, wrk and backend on cores of their own"


# --- CPU time per request -----------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def session_cpu(session: int) -> tuple[float, float]:
    """(user, system) CPU seconds of every live process in ``session`` (/proc/<pid>/stat)."""
    user = system = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rpartition(b")")[2].split()  # after "(comm)", which may hold spaces
        if int(fields[3]) == session:  # state ppid pgrp session ... utime(11) stime(12)
            user += int(fields[11])
            system += int(fields[12])
    return user / CLOCK_TICKS, system / CLOCK_TICKS


def cpu_per_request(
    before: tuple[float, float], after: tuple[float, float], requests: int | None
) -> dict[str, Any]:
    user, system = after[0] - before[0], after[1] - before[1]
    out: dict[str, Any] = {"user_s": user, "system_s": system}
    if requests:
        out.update(
            user_us=user / requests * 1e6,
            system_us=system / requests * 1e6,
            us=(user + system) / requests * 1e6,
        )
    return out


NGINX_TEMP = """\
    client_body_temp_path {d}/tmp/{n}-body;
    proxy_temp_path {d}/tmp/{n}-proxy;
    fastcgi_temp_path {d}/tmp/{n}-fastcgi;
    uwsgi_temp_path {d}/tmp/{n}-uwsgi;
    scgi_temp_path {d}/tmp/{n}-scgi;
"""


def nginx_conf(ctx: Context, name: str, workers: int, http_body: str) -> Path:
    d = ctx.workdir
    conf = f"""\
worker_processes {workers};
daemon off;
master_process on;
pid {d}/{name}.pid;
error_log {d}/{name}-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
{NGINX_TEMP.format(d=d, n=name)}
{http_body}
}}
"""
    path = ctx.path(f"{name}.conf")
    path.write_text(conf)
    return path


def start_nginx(
    ctx: Context, name: str, conf: Path, role: str = "subject", workers: int = 1
) -> Proc:
    nginx = ctx.tools["nginx"]
    assert nginx
    return Proc(
        ctx.pinned(
            role,
            [
                nginx,
                "-p",
                str(ctx.workdir),
                "-c",
                str(conf),
                "-e",
                str(ctx.path(f"{name}-error.log")),
            ],
            workers,
        ),
        ctx.path(f"{name}.out"),
    )


class Backend:
    """The origin every subject forwards to: nginx, one worker."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.proc: Proc | None = None

    def start(self) -> None:
        ctx = self.ctx
        www = ctx.path("www")
        www.mkdir(exist_ok=True)
        for name, size in BODY_FILES.items():
            (www / name).write_bytes(os.urandom(size))
            (www / name).chmod(0o644)
        port = free_port()
        body = f"""\
    server {{
        listen {HOST}:{port} backlog=4096;
        location = / {{ return 200 "{SMALL_BODY.strip()}\\n"; }}
        location = /varied {{
            add_header X-Request-Id $request_id;
            return 200 "{SMALL_BODY.strip()}\\n";
        }}
        location / {{ root {www}; }}
    }}"""
        ctx.cert, ctx.key = write_certificate(ctx)
        tls_port = free_port()
        body += f"""
    server {{
        listen {HOST}:{tls_port} ssl backlog=4096;
        ssl_certificate {ctx.cert};
        ssl_certificate_key {ctx.key};
        location = / {{ return 200 "{SMALL_BODY.strip()}\\n"; }}
        location / {{ root {www}; }}
    }}"""
        workers = ctx.pin.backend_cores if ctx.pin else 1  # pinned: one worker per backend core
        self.proc = start_nginx(
            ctx, "backend", nginx_conf(ctx, "backend", workers, body), "backend", workers
        )
        logs = [self.proc.log, ctx.path("backend-error.log")]
        for path in ("/", "/varied", *(f"/{n}" for n in BODY_FILES)):
            probe = Scenario("probe", "", path=path)
            wait_until(self.proc, expect_body(port, probe), 10.0, f"serving {path}", logs)
        probe = Scenario("probe", "", protocol="tls-passthrough")
        wait_until(self.proc, expect_body(tls_port, probe), 10.0, "serving TLS", logs)
        ctx.backend_port = port
        ctx.backend_tls_port = tls_port
        ctx.backend_session = self.proc.pid

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()


def write_certificate(ctx: Context) -> tuple[Path, Path]:
    """A self-signed ECDSA P-256 certificate for BENCH_HOST: what every TLS server serves."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, BENCH_HOST)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(BENCH_HOST)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = ctx.path("bench.crt"), ctx.path("bench.key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o644)  # nginx's master reads it; a throwaway key in the bench's temp dir
    return cert_path, key_path


# --- subjects ----------------------------------------------------------------------


class Subject:
    """Something wrk measures. ``start`` returns ``host:port``; ``stop`` ends it."""

    tools: ClassVar[tuple[str, ...]] = ()  # external programs it needs besides wrk
    protocols: ClassVar[tuple[str, ...]] = ("http",)

    def __init__(self, ctx: Context, scenario: Scenario, label: str) -> None:
        self.ctx = ctx
        self.scenario = scenario
        self.label = label
        self.proc: Proc | None = None
        self.slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{scenario.name}-{label}")

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def alive(self) -> bool:
        return self.proc is None or self.proc.alive()

    def logs(self) -> list[Path]:
        return [self.proc.log] if self.proc else []

    def session(self) -> int | None:
        """The session whose processes' CPU time is this subject's (None: not measured)."""
        return self.proc.pid if self.proc else None


class Direct(Subject):
    """No proxy: wrk straight to the backend (its TLS port for passthrough scenarios)."""

    protocols = ("http", "tls-passthrough", "udp")

    def start(self) -> str:
        if self.scenario.protocol == "udp":
            return f"{HOST}:{udp_backend_port(self.ctx, self.scenario)}"
        if self.scenario.protocol == "tls-passthrough":
            return f"{HOST}:{self.ctx.backend_tls_port}"
        return f"{HOST}:{self.ctx.backend_port}"

    def session(self) -> int | None:
        return self.ctx.backend_session or None if self.scenario.protocol != "udp" else None


class NginxProxy(Subject):
    tools = ("nginx",)
    protocols = ("http", "https", "udp", "h2c")

    def start(self) -> str:
        if self.scenario.protocol == "udp":
            return self._start_udp()
        port = free_port()
        tls = ";"
        if self.scenario.protocol == "https":
            # nginx 1.22 offers TLS 1.0-1.2 unless told (1.23.4 added 1.3 to the default):
            # TLS 1.2 resumption skips the key exchange TLS 1.3's makes every time, so the
            # comparison with edge (TLS 1.3) was of two protocols. Both now negotiate TLS
            # 1.3 with the same ECDSA key and OpenSSL's defaults (X25519, 2 tickets).
            tls = f"""ssl;
        ssl_certificate {self.ctx.cert};
        ssl_certificate_key {self.ctx.key};
        ssl_protocols TLSv1.2 TLSv1.3;"""
            if not self.scenario.tls_tickets:
                tls += """
        ssl_session_tickets off;
        ssl_conf_command NumTickets 0;"""
        elif self.scenario.protocol == "h2c":
            # h2c with prior knowledge (nginx 1.22's form; 1.25.1 also reads `http2 on`).
            tls = """http2;
        http2_max_requests 1000000000;"""
        body = f"""\
    upstream backend {{
        server {HOST}:{self.ctx.backend_port};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen {HOST}:{port} backlog=4096 {tls}
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # nginx's default 8 x 4k buffers halve its large-body throughput (measured:
            # 1 MiB 680 -> 1,400 req/s); 64k buffers, no disk spooling, as one would tune it
            proxy_buffers 16 64k;
            proxy_buffer_size 64k;
            proxy_busy_buffers_size 128k;
            proxy_max_temp_file_size 0;
        }}
    }}"""
        conf = nginx_conf(self.ctx, self.slug, self.scenario.workers, body)
        self.proc = start_nginx(self.ctx, self.slug, conf, workers=self.scenario.workers)
        self._wait(port, [self.ctx.path(f"{self.slug}-error.log")])
        return f"{HOST}:{port}"

    def _start_udp(self) -> str:
        """The ``stream`` module (a dynamic module on Debian) proxying UDP to the backend."""
        sc = self.scenario
        port = free_udp_port()
        module = next((str(p) for p in NGINX_STREAM_MODULES if p.exists()), None)
        d = self.ctx.workdir
        conf = f"""\
{f"load_module {module};" if module else ""}
worker_processes {sc.workers};
daemon off;
master_process on;
pid {d}/{self.slug}.pid;
error_log {d}/{self.slug}-error.log warn;
events {{ worker_connections 4096; }}
stream {{
    server {{
        listen {f"{sc.udp_listen}:" if sc.udp_listen else ""}{port} udp;
        proxy_pass {HOST}:{udp_backend_port(self.ctx, sc)};
        proxy_timeout 3s;
    }}
}}
"""
        path = self.ctx.path(f"{self.slug}.conf")
        path.write_text(conf)
        self.proc = start_nginx(self.ctx, self.slug, path, workers=sc.workers)
        logs = [*self.logs(), self.ctx.path(f"{self.slug}-error.log")]
        wait_until(self.proc, udp_check(self.ctx, sc, port), sc.ready_timeout, "routing", logs)
        return f"{HOST}:{port}"

    def _wait(self, port: int, extra_logs: list[Path]) -> None:
        assert self.proc
        check = expect_body(port, self.scenario)
        wait_until(
            self.proc, check, self.scenario.ready_timeout, "routing", self.logs() + extra_logs
        )


class Haproxy(NginxProxy):
    tools = ("haproxy",)
    protocols = ("http", "tls-passthrough")

    def start(self) -> str:
        port = free_port()
        if self.scenario.protocol == "tls-passthrough":
            return self._start_tcp(port)
        conf = f"""\
global
    nbthread {self.scenario.workers}
    maxconn 4096

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 30s

frontend fe
    bind {HOST}:{port}
    default_backend be

backend be
    server s1 {HOST}:{self.ctx.backend_port}
"""
        path = self.ctx.path(f"{self.slug}.cfg")
        path.write_text(conf)
        haproxy = self.ctx.tools["haproxy"]
        assert haproxy
        self.proc = Proc(
            self.ctx.pinned("subject", [haproxy, "-db", "-f", str(path)], self.scenario.workers),
            self.ctx.path(f"{self.slug}.out"),
        )
        self._wait(port, [])
        return f"{HOST}:{port}"

    def _start_tcp(self, port: int) -> str:
        """``mode tcp`` to the backend's TLS port: HAProxy's TLS passthrough."""
        conf = f"""\
global
    nbthread {self.scenario.workers}
    maxconn 4096

defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend fe
    bind {HOST}:{port}
    default_backend be

backend be
    server s1 {HOST}:{self.ctx.backend_tls_port}
"""
        path = self.ctx.path(f"{self.slug}.cfg")
        path.write_text(conf)
        haproxy = self.ctx.tools["haproxy"]
        assert haproxy
        self.proc = Proc(
            self.ctx.pinned("subject", [haproxy, "-db", "-f", str(path)], self.scenario.workers),
            self.ctx.path(f"{self.slug}.out"),
        )
        self._wait(port, [])
        return f"{HOST}:{port}"


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    try:
        import yaml
    except ImportError:  # JSON is valid YAML
        path.write_text(json.dumps(data, indent=1))
        return
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    path.write_text(yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False))


class Edge(Subject):
    """``python -m edge run`` with a generated static and dynamic (file provider) config."""

    parser = "httptools"
    protocols = ("http", "https", "tls-passthrough", "udp", "h2c")
    root = ROOT  # the checkout whose edge runs

    def configs(self, port: int, ping_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
        sc = self.scenario
        if sc.protocol == "udp":
            return self.udp_configs(port, ping_port)
        dynamic_file = self.ctx.path(f"{self.slug}-dynamic.yaml")
        static: dict[str, Any] = {
            "entryPoints": {
                "web": {"address": f"{HOST}:{port}", "http": {"parser": self.parser}},
                "traefik": {"address": f"{HOST}:{ping_port}"},
            },
            "providers": {"file": {"filename": str(dynamic_file)}},
            "ping": {"entryPoint": "traefik"},
            "log": {"level": "ERROR"},
        }
        if sc.workers > 1:
            static["workers"] = sc.workers
        static = deep_merge(static, sc.edge_static_extra)
        routers: dict[str, Any] = {
            "bench": {"rule": f"Host(`{BENCH_HOST}`)", "service": "backend", "entryPoints": ["web"]}
        }
        for i in range(sc.edge_routers):
            routers[f"h{i}"] = {
                "rule": f"Host(`h{i}.example.com`)",
                "service": "backend",
                "entryPoints": ["web"],
            }
        if sc.protocol == "https":
            for router in routers.values():
                router["tls"] = {}
        dynamic: dict[str, Any] = {
            "http": {
                "routers": routers,
                "services": {
                    "backend": {
                        "loadBalancer": {
                            "servers": [{"url": f"http://{HOST}:{self.ctx.backend_port}"}]
                        }
                    }
                },
            }
        }
        if sc.protocol in ("https", "tls-passthrough"):
            # The bench certificate as the default one: wrk sends no name edge knows.
            pair = {"certFile": str(self.ctx.cert), "keyFile": str(self.ctx.key)}
            dynamic["tls"] = {"stores": {"default": {"defaultCertificate": pair}}}
        if sc.protocol == "tls-passthrough":
            dynamic["tcp"] = {
                "routers": {
                    "pt": {
                        "rule": "HostSNI(`*`)",
                        "service": "backend-tls",
                        "entryPoints": ["web"],
                        "tls": {"passthrough": True},
                    }
                },
                "services": {
                    "backend-tls": {
                        "loadBalancer": {
                            "servers": [{"address": f"{HOST}:{self.ctx.backend_tls_port}"}]
                        }
                    }
                },
            }
        return static, deep_merge(dynamic, sc.edge_dynamic_extra)

    def udp_configs(self, port: int, ping_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
        sc = self.scenario
        static: dict[str, Any] = {
            "entryPoints": {
                "udp": {"address": f"{sc.udp_listen}:{port}/udp"},
                "traefik": {"address": f"{HOST}:{ping_port}"},
            },
            "providers": {"file": {"filename": str(self.ctx.path(f"{self.slug}-dynamic.yaml"))}},
            "ping": {"entryPoint": "traefik"},
            "log": {"level": "ERROR"},
        }
        if sc.workers > 1:
            static["workers"] = sc.workers
        backend = f"{HOST}:{udp_backend_port(self.ctx, sc)}"
        dynamic = {
            "udp": {
                "routers": {"bench": {"service": "backend", "entryPoints": ["udp"]}},
                "services": {"backend": {"loadBalancer": {"servers": [{"address": backend}]}}},
            }
        }
        return deep_merge(static, sc.edge_static_extra), deep_merge(dynamic, sc.edge_dynamic_extra)

    def start(self) -> str:
        udp = self.scenario.protocol == "udp"
        port, ping_port = (free_udp_port() if udp else free_port()), free_port()
        static, dynamic = self.configs(port, ping_port)
        static_path = self.ctx.path(f"{self.slug}-static.yaml")
        write_yaml(Path(static["providers"]["file"]["filename"]), dynamic)
        write_yaml(static_path, static)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = Proc(
            self.ctx.pinned(
                "subject",
                [self.ctx.python, "-m", "edge", "run", "--config", str(static_path)],
                self.scenario.workers,
            ),
            self.ctx.path(f"{self.slug}.out"),
            cwd=self.root,
            env=env,
        )
        deadline = time.monotonic() + self.scenario.ready_timeout

        def ready() -> bool:
            return http_get(ping_port, "/ready", host=HOST)[0] == 200

        try:
            wait_until(
                self.proc, ready, self.scenario.ready_timeout, "ready on /ready", self.logs()
            )
        except SubjectFailed as exc:
            if re.search(r"\$\.workers: unknown key", exc.detail):
                raise SubjectFailed(
                    "unsupported: edge has no `workers` setting yet", exc.detail
                ) from None
            raise
        # /ready may precede the file provider's first configuration: wait for the route too
        left = max(1.0, deadline - time.monotonic())
        check = (
            udp_check(self.ctx, self.scenario, port) if udp else expect_body(port, self.scenario)
        )
        wait_until(self.proc, check, left, "routing", self.logs())
        return f"{HOST}:{port}"


class EdgeH11(Edge):
    parser = "h11"


class EdgeBaseline(Edge):
    """edge from another checkout (``EDGE_BASELINE=DIR``: e.g. a git worktree of the
    commit before a change), measured in the same rounds as this checkout's edge."""

    root = Path(os.environ.get("EDGE_BASELINE", ROOT))


class Ceiling(Subject):
    """``loadtest/ceiling.py``: the least a uvloop + httptools proxy does per request
    (https-keepalive: over uvloop's own TLS, with the bench certificate). Not in the
    scenarios with a connection per request: it dials its backend per client connection."""

    protocols = ("http", "https")

    def start(self) -> str:
        port = free_port()
        tls = (
            ["--cert", str(self.ctx.cert), "--key", str(self.ctx.key)]
            if self.scenario.protocol == "https"
            else []
        )
        self.proc = Proc(
            self.ctx.pinned(
                "subject",
                [
                    self.ctx.python,
                    str(ROOT / "loadtest" / "ceiling.py"),
                    "--listen",
                    f"{HOST}:{port}",
                    "--backend",
                    f"{HOST}:{self.ctx.backend_port}",
                    *tls,
                ],
            ),
            self.ctx.path(f"{self.slug}.out"),
            cwd=ROOT,
        )
        wait_until(
            self.proc,
            expect_body(port, self.scenario),
            self.scenario.ready_timeout,
            "serving",
            self.logs(),
        )
        return f"{HOST}:{port}"


UDP_CEILING_PY = r"""
# The least a Python UDP proxy does per datagram (bench.py's udp-ceiling subject): uvloop,
# add_reader on plain sockets, one connected upstream socket per client, one datagram
# read per wakeup, no routing, no timeouts, no counters.
import asyncio, socket, sys
import uvloop

listen, backend = int(sys.argv[1]), ("127.0.0.1", int(sys.argv[2]))


async def main():
    loop = asyncio.get_running_loop()
    lsock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lsock.bind(("127.0.0.1", listen))
    lsock.setblocking(False)
    sessions = {}

    def reply(up, client):
        try:
            lsock.sendto(up.recv(65535), client)
        except BlockingIOError:
            pass

    def request():
        try:
            data, client = lsock.recvfrom(65535)
        except BlockingIOError:
            return
        up = sessions.get(client)
        if up is None:
            up = sessions[client] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            up.setblocking(False)
            up.connect(backend)
            loop.add_reader(up.fileno(), reply, up, client)
        up.send(data)

    loop.add_reader(lsock.fileno(), request)
    await asyncio.Event().wait()


uvloop.run(main())
"""


class UDPCeiling(Subject):
    """``UDP_CEILING_PY``: the least a Python (uvloop) UDP proxy does per datagram."""

    protocols = ("udp",)

    def start(self) -> str:
        port = free_udp_port()
        backend = str(udp_backend_port(self.ctx, self.scenario))
        self.proc = Proc(
            [self.ctx.python, "-c", UDP_CEILING_PY, str(port), backend],
            self.ctx.path(f"{self.slug}.out"),
            cwd=ROOT,
        )
        check = udp_check(self.ctx, self.scenario, port)
        wait_until(self.proc, check, self.scenario.ready_timeout, "serving", self.logs())
        return f"{HOST}:{port}"


SUBJECTS: dict[str, type[Subject]] = {
    "direct": Direct,
    "edge": Edge,  # the UDP scenarios' name for it: no HTTP parser is involved
    "edge-httptools": Edge,
    "edge-h11": EdgeH11,
    "edge-baseline": EdgeBaseline,
    "nginx": NginxProxy,
    "haproxy": Haproxy,
    "ceiling": Ceiling,
    "udp-ceiling": UDPCeiling,
}


# --- wrk ---------------------------------------------------------------------------

_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_TIME = re.compile(r"^([\d.]+)(us|ms|s|m|h)$")


def to_ms(text: str) -> float | None:
    m = _TIME.match(text.strip())
    return float(m.group(1)) * _UNITS_MS[m.group(2)] if m else None


def parse_wrk(out: str) -> dict[str, Any]:
    """Requests/s, latency percentiles (ms) and error counts from ``wrk --latency`` output."""
    res: dict[str, Any] = {"rps": None, "requests": None, "latency_ms": {}}
    if m := re.search(r"Requests/sec:\s+([\d.]+)", out):
        res["rps"] = float(m.group(1))
    if m := re.search(r"(\d+) requests in ([\d.]+\w+),", out):
        res["requests"] = int(m.group(1))
    for pct, value in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, re.M):
        res["latency_ms"][f"p{pct}"] = to_ms(value)
    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0, "status": 0}
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        for key, value in zip(("connect", "read", "write", "timeout"), m.groups(), strict=True):
            errors[key] = int(value)
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors["status"] = int(m.group(1))
    res["errors"] = errors
    res["error_total"] = sum(errors.values())
    return res


def run_wrk(ctx: Context, scenario: Scenario, address: str, duration: float) -> dict[str, Any]:
    wrk = ctx.tools["wrk"]
    assert wrk
    threads = max(scenario.threads, ctx.pin.load_cores) if ctx.pin else scenario.threads
    argv = ctx.pinned(
        "load",
        [
            wrk,
            f"-t{threads}",
            f"-c{scenario.connections}",
            f"-d{max(1, round(duration))}s",
            "--latency",
            "--timeout",
            WRK_TIMEOUT,
            "-H",
            f"Host: {BENCH_HOST}",
            *scenario.wrk_args,
            f"{'http' if scenario.protocol == 'http' else 'https'}://{address}{scenario.path}",
        ],
    )
    started = time.time()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=duration + 30, stdin=subprocess.DEVNULL
        )
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # subprocess.run killed it
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, code = "wrk did not finish in time", -1
    res = parse_wrk(out)
    res.update(argv=argv, started=started, exit_code=code, stdout=out, stderr=err)
    return res


# --- udp ---------------------------------------------------------------------------

NGINX_STREAM_MODULES = (
    Path("/usr/lib/nginx/modules/ngx_stream_module.so"),
    Path("/usr/share/nginx/modules/ngx_stream_module.so"),
)

UDPLOAD_C = r"""
/* udpload: UDP load for bench.py (compiled by it into its temp dir).
 *   udpload echo HOST PORT CLIENTS WINDOW SECONDS SIZE
 *     CLIENTS connected sockets each keeping WINDOW datagrams in flight; prints replies,
 *     their rate, p50/p99 round trip (us) and the datagrams sent again after 1 s of silence.
 *   udpload oneway HOST PORT CLIENTS SECONDS SIZE SINK_CTRL_PORT
 *     sends as fast as it can over CLIENTS sockets; asks the sink how many arrived.
 *   udpload sink         binds two ports, prints "sink data=P ctrl=Q"; counts datagrams on
 *                        data, answers any datagram on ctrl with the count.
 *   udpload echo-server  binds a port, prints "echo port=P"; echoes every datagram. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAXLAT 4000000

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int bound_socket(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), size = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); exit(2); }
    return fd;
}

static int local_port(int fd) {
    struct sockaddr_in a;
    socklen_t n = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &n);
    return ntohs(a.sin_port);
}

static int connected_socket(const char *host, int port) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) { fprintf(stderr, "bad host\n"); exit(2); }
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); exit(2); }
    return fd;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void send_stamped(int fd, char *buf, int size, int *inflight) {
    uint64_t t = now_ns();
    memcpy(buf, &t, 8);
    if (send(fd, buf, size, 0) == size) (*inflight)++;
}

static int run_echo(const char *host, int port, int clients, int window, double seconds, int size) {
    if (size < 8) size = 8;
    int ep = epoll_create1(0), *fds = calloc(clients, sizeof(int)), *inflight = calloc(clients, sizeof(int));
    uint64_t *last = calloc(clients, sizeof(uint64_t)), replies = 0, resent = 0, nlat = 0;
    uint32_t *lat = malloc(sizeof(uint32_t) * MAXLAT);
    char *buf = calloc(1, 65536);
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), next_check = start;
    for (int i = 0; i < clients; i++) {
        fds[i] = connected_socket(host, port);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev);
        for (int k = 0; k < window; k++) send_stamped(fds[i], buf, size, &inflight[i]);
        last[i] = start;
    }
    struct epoll_event evs[256];
    for (;;) {
        if (now_ns() >= end) break;
        int n = epoll_wait(ep, evs, 256, 10);
        for (int e = 0; e < n; e++) {
            int i = evs[e].data.u32;
            for (int k = 0; k < BATCH; k++) {
                if (recv(fds[i], buf, 65536, 0) < 0) break;
                uint64_t now = now_ns(), sent;
                memcpy(&sent, buf, 8);
                replies++;
                inflight[i]--;
                last[i] = now;
                if (nlat < MAXLAT) lat[nlat++] = (uint32_t)((now - sent) / 1000);
                send_stamped(fds[i], buf, size, &inflight[i]);
            }
        }
        uint64_t t = now_ns();
        if (t >= next_check) { /* a client silent for 1 s lost its datagrams: send again */
            next_check = t + 100000000ull;
            for (int i = 0; i < clients; i++) {
                if (t > last[i] + 1000000000ull) {
                    resent += inflight[i];
                    inflight[i] = 0;
                    last[i] = t;
                    for (int k = 0; k < window; k++) send_stamped(fds[i], buf, size, &inflight[i]);
                }
            }
        }
    }
    double elapsed = (now_ns() - start) / 1e9;
    qsort(lat, nlat, sizeof *lat, cmp_u32);
    printf("replies=%" PRIu64 " seconds=%.3f rate=%.1f p50_us=%u p99_us=%u resent=%" PRIu64 "\n",
           replies, elapsed, replies / elapsed, nlat ? lat[nlat / 2] : 0,
           nlat ? lat[nlat * 99 / 100] : 0, resent);
    return 0;
}

static uint64_t ask_sink(int ctrl) {
    char q = '?';
    uint64_t count = 0;
    send(ctrl, &q, 1, 0);
    for (int tries = 0; tries < 2000; tries++) {
        if (recv(ctrl, &count, sizeof count, 0) == sizeof count) return count;
        usleep(1000);
    }
    fprintf(stderr, "the sink did not answer\n");
    exit(3);
}

static int run_oneway(const char *host, int port, int clients, double seconds, int size, int ctrl_port) {
    int ctrl = connected_socket("127.0.0.1", ctrl_port), *fds = calloc(clients, sizeof(int));
    char *buf = calloc(1, 65536);
    for (int i = 0; i < clients; i++) fds[i] = connected_socket(host, port);
    uint64_t before = ask_sink(ctrl), sent = 0, failed = 0;
    uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
    for (int i = 0;; i = (i + 1) % clients) {
        if ((sent & 255) == 0 && now_ns() >= end) break;
        if (send(fds[i], buf, size, 0) == size) sent++; else failed++;
    }
    double elapsed = (now_ns() - start) / 1e9;
    usleep(200000); /* what is still queued arrives */
    uint64_t arrived = ask_sink(ctrl) - before;
    printf("arrived=%" PRIu64 " sent=%" PRIu64 " seconds=%.3f rate=%.1f send_rate=%.1f failed=%" PRIu64 "\n",
           arrived, sent, elapsed, arrived / elapsed, sent / elapsed, failed);
    return 0;
}

static void run_sink(void) {
    int data = bound_socket(), ctrl = bound_socket(), ep = epoll_create1(0);
    printf("sink data=%d ctrl=%d\n", local_port(data), local_port(ctrl));
    fflush(stdout);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = data};
    epoll_ctl(ep, EPOLL_CTL_ADD, data, &ev);
    ev.data.fd = ctrl;
    epoll_ctl(ep, EPOLL_CTL_ADD, ctrl, &ev);
    static char bufs[BATCH][2048];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (int i = 0; i < BATCH; i++) {
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizeof bufs[i];
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t count = 0;
    struct epoll_event evs[4];
    for (;;) {
        int n = epoll_wait(ep, evs, 4, -1);
        for (int e = 0; e < n; e++) {
            if (evs[e].data.fd == data) {
                int r;
                while ((r = recvmmsg(data, msgs, BATCH, MSG_DONTWAIT, NULL)) > 0) count += r;
            } else {
                struct sockaddr_in from;
                socklen_t len = sizeof from;
                char q;
                while (recvfrom(ctrl, &q, 1, 0, (struct sockaddr *)&from, &len) >= 0) {
                    sendto(ctrl, &count, sizeof count, 0, (struct sockaddr *)&from, len);
                    len = sizeof from;
                }
            }
        }
    }
}

static void run_echo_server(void) {
    int fd = bound_socket(), ep = epoll_create1(0);
    printf("echo port=%d\n", local_port(fd));
    fflush(stdout);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd}, got;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    static char buf[65536];
    for (;;) {
        if (epoll_wait(ep, &got, 1, -1) < 1) continue;
        for (;;) {
            struct sockaddr_in6 from;
            socklen_t len = sizeof from;
            ssize_t r = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
            if (r < 0) break;
            sendto(fd, buf, r, 0, (struct sockaddr *)&from, len);
        }
    }
}

int main(int argc, char **argv) {
    if (argc >= 8 && !strcmp(argv[1], "echo"))
        return run_echo(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atof(argv[6]), atoi(argv[7]));
    if (argc >= 8 && !strcmp(argv[1], "oneway"))
        return run_oneway(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]), atoi(argv[6]), atoi(argv[7]));
    if (argc >= 2 && !strcmp(argv[1], "sink")) run_sink();
    if (argc >= 2 && !strcmp(argv[1], "echo-server")) run_echo_server();
    fprintf(stderr, "usage: see the comment at the top of udpload.c\n");
    return 2;
}
"""


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def build_udpload(ctx: Context) -> str | None:
    """Compile udpload into the temp dir; None (UDP scenarios skipped) without a C compiler."""
    cc = find_tool("cc") or find_tool("gcc")
    if cc is None:
        return None
    source, binary = ctx.path("udpload.c"), ctx.path("udpload")
    source.write_text(UDPLOAD_C)
    done = subprocess.run(
        [cc, "-O2", "-o", str(binary), str(source)], capture_output=True, text=True
    )
    if done.returncode != 0:
        say(f"  udpload did not compile: {done.stderr.strip()[-500:]}")
        return None
    return str(binary)


class UDPBackends:
    """The UDP scenarios' backends: udpload's echo server (a C echo, so that the proxies, not
    the backend, are what is measured) and its sink."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.procs: list[Proc] = []

    def start(self) -> None:
        udpload = self.ctx.tools["udpload"]
        assert udpload
        for mode, pattern in (
            ("echo-server", r"echo port=(\d+)"),
            ("sink", r"sink data=(\d+) ctrl=(\d+)"),
        ):
            log = self.ctx.path(f"udp-{mode}.out")
            proc = Proc(self.ctx.pinned("backend", [udpload, mode]), log)
            self.procs.append(proc)
            found: list[re.Match] = []

            def started(log: Path = log, pattern: str = pattern, found: list = found) -> bool:
                m = re.search(pattern, log.read_text())
                if m:
                    found.append(m)
                return m is not None

            wait_until(proc, started, 5.0, f"udpload {mode} ready", [log])
            m = found[-1]
            if mode == "echo-server":
                self.ctx.udp_echo_port = int(m.group(1))
            else:
                self.ctx.udp_sink_port, self.ctx.udp_sink_ctrl = int(m.group(1)), int(m.group(2))

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def udp_backend_port(ctx: Context, scenario: Scenario) -> int:
    return ctx.udp_sink_port if scenario.udp_mode == "oneway" else ctx.udp_echo_port


def sink_count(ctx: Context) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        s.sendto(b"?", (HOST, ctx.udp_sink_ctrl))
        return int.from_bytes(s.recv(8), "little")


def udp_check(ctx: Context, scenario: Scenario, port: int) -> Callable[[], bool]:
    """A check: a datagram sent to ``port`` comes back (echo) or reaches the sink (one-way)."""

    def check() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.5)
            s.connect((HOST, port))
            before = sink_count(ctx) if scenario.udp_mode == "oneway" else 0
            s.send(b"probe-probe")
            if scenario.udp_mode == "oneway":
                time.sleep(0.1)
                return sink_count(ctx) > before
            try:
                return s.recv(100) == b"probe-probe"
            except TimeoutError:
                return False

    return check


def run_udpload(ctx: Context, scenario: Scenario, address: str, duration: float) -> dict[str, Any]:
    """One udpload run, as run_wrk's result: rps is replies/s (echo) or arrivals/s (one-way)."""
    udpload = ctx.tools["udpload"]
    assert udpload
    host, port = address.rsplit(":", 1)
    seconds = f"{max(1.0, duration):g}"
    sc = scenario
    if sc.udp_mode == "oneway":
        rest = [str(sc.connections), seconds, str(sc.udp_size), str(ctx.udp_sink_ctrl)]
    else:
        rest = [str(sc.connections), str(sc.udp_window), seconds, str(sc.udp_size)]
    argv = ctx.pinned("load", [udpload, sc.udp_mode, host, port, *rest])
    started = time.time()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30)
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        out, err, code = "", "udpload did not finish in time", -1
    fields = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", out)}
    latency = {}
    if "p50_us" in fields:
        latency = {"p50": fields["p50_us"] / 1000, "p99": fields["p99_us"] / 1000}
    resent = int(fields.get("resent", 0))
    return {
        "rps": fields.get("rate"),
        "requests": int(fields.get("replies", fields.get("arrived", 0))),
        "latency_ms": latency,
        "errors": {"resent": resent},
        "error_total": resent,
        "argv": argv,
        "started": started,
        "exit_code": code,
        "stdout": out,
        "stderr": err,
    }


def parse_h2load(out: str) -> dict[str, Any]:
    """Requests/s, requests done, errors and the mean request time (ms) from h2load."""
    res: dict[str, Any] = {"rps": None, "requests": None, "latency_ms": {}}
    if m := re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out):
        res["rps"] = float(m.group(1))
    errors = {"failed": 0, "errored": 0, "timeout": 0, "status": 0}
    if m := re.search(
        r"requests: \d+ total, \d+ started, (\d+) done, \d+ succeeded, (\d+) failed, "
        r"(\d+) errored, (\d+) timeout",
        out,
    ):
        res["requests"] = int(m.group(1))
        errors.update(failed=int(m.group(2)), errored=int(m.group(3)), timeout=int(m.group(4)))
    if m := re.search(r"status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out):
        errors["status"] = sum(int(g) for g in m.groups())
    if m := re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out):
        res["mean_ms"] = to_ms(m.group(1))
        res["latency_ms"]["p50"] = res["mean_ms"]  # h2load gives no percentiles: the mean
    res["errors"] = errors
    res["error_total"] = sum(errors.values())
    return res


def run_h2load(ctx: Context, scenario: Scenario, address: str, duration: float) -> dict[str, Any]:
    h2load = ctx.tools["h2load"]
    assert h2load
    argv = ctx.pinned(
        "load",
        [
            h2load,
            "-t1",
            f"-c{scenario.connections}",
            f"-m{scenario.h2_streams}",
            f"-D{max(1, round(duration))}",
            "-H",
            f":authority: {BENCH_HOST}",
            f"http://{address}{scenario.path}",
        ],
    )
    started = time.time()
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=duration + 30, stdin=subprocess.DEVNULL
        )
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, code = "h2load did not finish in time", -1
    res = parse_h2load(out)
    res.update(argv=argv, started=started, exit_code=code, stdout=out, stderr=err)
    return res


def run_load(ctx: Context, scenario: Scenario, address: str, duration: float) -> dict[str, Any]:
    if scenario.protocol == "udp":
        return run_udpload(ctx, scenario, address, duration)
    if scenario.protocol == "h2c":
        return run_h2load(ctx, scenario, address, duration)
    return run_wrk(ctx, scenario, address, duration)


# --- running -----------------------------------------------------------------------


@dataclass
class Case:
    label: str
    subject: str
    scenario: Scenario
    status: str = "pending"  # ok | failed | skipped
    reason: str = ""
    detail: str = ""
    address: str = ""
    warmup: dict[str, Any] | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    instance: Subject | None = None
    negotiated: str = ""  # TLS subjects: what tls_probe saw

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.runs if r["rps"] is not None]
        if not ok:
            return {}

        def med(key: str) -> float | None:
            values = [r["latency_ms"].get(key) for r in ok]
            values = [v for v in values if v is not None]
            return statistics.median(values) if values else None

        rps = [r["rps"] for r in ok]
        median = statistics.median(rps)

        def cpu(key: str) -> float | None:
            values = [r["cpu"][key] for r in ok if key in r.get("cpu", {})]
            return statistics.median(values) if values else None

        return {
            "cpu_us": cpu("us"),  # user + system CPU per request of the subject's processes
            "cpu_user_us": cpu("user_us"),
            "cpu_system_us": cpu("system_us"),
            "rps": median,
            "rps_min": min(rps),
            "rps_max": max(rps),
            "spread_pct": 100.0 * (max(rps) - min(rps)) / median if median else None,
            "p50_ms": med("p50"),
            "p99_ms": med("p99"),
            "errors": sum(r["error_total"] for r in self.runs),
            "requests": sum(r["requests"] or 0 for r in self.runs),
            "runs": len(ok),
        }


def say(msg: str) -> None:
    print(msg, flush=True)


def run_scenario(
    ctx: Context, scenario: Scenario, wanted: set[str] | None, args: argparse.Namespace
) -> list[Case]:
    cases = [Case(label, subject, sc) for label, subject, sc in scenario.cases()]
    if wanted is not None:
        cases = [c for c in cases if c.subject in wanted]
    for case in cases:
        cls = SUBJECTS[case.subject]
        load = {"udp": ("udpload",), "h2c": ("h2load", "nginx")}.get(
            scenario.protocol, ("wrk", "nginx")
        )
        missing = [t for t in (*load, *cls.tools) if not ctx.tools.get(t)]
        if missing:
            # nginx is the HTTP subjects' backend, wrk their load; udpload (built with cc)
            # is the UDP scenarios' load and backend
            case.status, case.reason = "skipped", "missing " + ", ".join(missing)
        elif scenario.protocol not in cls.protocols:
            case.status, case.reason = "skipped", f"does not do {scenario.protocol}"
    try:
        for case in cases:
            if case.status == "skipped":
                continue
            case.instance = SUBJECTS[case.subject](ctx, case.scenario, case.label)
            t0 = time.monotonic()
            try:
                case.address = case.instance.start()
                case.status = "ok"
                say(f"  started {case.label} on {case.address} ({time.monotonic() - t0:.1f}s)")
                if scenario.protocol == "https":
                    case.negotiated = tls_probe(case.address)
                    say(f"  {case.label} negotiates {case.negotiated}")
            except (SubjectFailed, OSError) as exc:
                detail = getattr(exc, "detail", "")
                case.status, case.reason, case.detail = "failed", str(exc), detail
                case.instance.stop()
                say(f"  FAILED to start {case.label}: {exc}")
        live = [c for c in cases if c.status == "ok"]
        if args.warmup > 0:
            for case in live:
                case.warmup = run_load(ctx, case.scenario, case.address, args.warmup)
        for rnd in range(args.runs):
            # rotate the order each round so no subject always runs first or last
            order = live[rnd % len(live) :] + live[: rnd % len(live)] if live else []
            for case in order:
                if case.status != "ok":
                    continue
                assert case.instance
                session = case.instance.session()
                before = session_cpu(session) if session else None
                res = run_load(ctx, case.scenario, case.address, args.duration)
                if before is not None:
                    res["cpu"] = cpu_per_request(before, session_cpu(session), res["requests"])
                res["round"] = rnd + 1
                case.runs.append(res)
                rps = f"{res['rps']:,.0f} req/s" if res["rps"] is not None else "no result"
                cpu = res.get("cpu", {})
                cpu = f", CPU {cpu['us']:.1f} us/req" if "us" in cpu else ""
                say(
                    f"  round {rnd + 1}/{args.runs} {case.label:<26} {rps}{cpu}, errors {res['error_total']}"
                )
                if not case.instance.alive():
                    case.status, case.reason = "failed", "died during the run"
                    case.detail = "\n".join(t for t in (tail(p) for p in case.instance.logs()) if t)
                    say(f"  {case.label} died during the run")
                elif res["rps"] is None:
                    say(f"  wrk gave no result: {res['stderr'].strip()[:200]}")
    finally:
        for case in cases:
            if case.instance:
                case.instance.stop()
    return cases


# --- report ------------------------------------------------------------------------


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.0f}us" if v < 1 else f"{v:.2f}ms"


def fmt_us(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def fmt_split(user: float | None, system: float | None) -> str:
    return "-" if user is None or system is None else f"{user:.1f}+{system:.1f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def table(scenario: Scenario, cases: list[Case], details: bool = True) -> str:
    base_case = next((c for c in cases if c.label == scenario.baseline), None)
    base = base_case.summary() if base_case else {}
    extra = shlex.join(scenario.wrk_args)
    load = (
        f"   wrk -t{scenario.threads} -c{scenario.connections} {extra + ' ' if extra else ''}"
        f"GET {scenario.path}"
    )
    if scenario.protocol == "h2c":
        load = (
            f"   h2load -t1 -c{scenario.connections} -m{scenario.h2_streams} GET "
            f"{scenario.path} (p50: h2load's mean request time)"
        )
    if scenario.protocol == "udp":
        load = (
            f"   udpload {scenario.udp_mode} clients={scenario.connections} "
            f"window={scenario.udp_window} size={scenario.udp_size}"
            + (
                "; errors: datagrams sent again after 1 s without a reply"
                if scenario.udp_mode == "echo"
                else ""
            )
        )
    lines = [
        f"== {scenario.name}: {scenario.description}",
        f"{load}; ratios vs {scenario.baseline}"
        + ("" if base else f" (no {scenario.baseline} result: ratios n/a)"),
        f"{'subject':<26}{'req/s':>10}{'spread':>8}{'p50':>10}{'p99':>10}{'errors':>8}"
        f"{'req/s ratio':>13}{'p99 ratio':>11}{'CPU us/req':>12}{'usr+sys':>12}{'CPU ratio':>11}",
    ]
    notes = []
    for c in cases:
        s = c.summary()
        if s:
            lines.append(
                f"{c.label:<26}{s['rps']:>10,.0f}{s['spread_pct']:>7.1f}%{fmt_ms(s['p50_ms']):>10}"
                f"{fmt_ms(s['p99_ms']):>10}{s['errors']:>8}"
                f"{fmt_ratio(s['rps'], base.get('rps')):>13}{fmt_ratio(s['p99_ms'], base.get('p99_ms')):>11}"
                f"{fmt_us(s['cpu_us']):>12}{fmt_split(s['cpu_user_us'], s['cpu_system_us']):>12}"
                f"{fmt_ratio(s['cpu_us'], base.get('cpu_us')):>11}"
            )
        if c.status != "ok":
            word = "SKIPPED" if c.status == "skipped" else "FAILED"
            if not s:
                lines.append(f"{c.label:<26}{word}: {c.reason}")
            else:
                notes.append(f"{c.label}: {word}: {c.reason}")
            if c.detail and details:
                notes.append(f"--- {c.label} log tail ---\n{c.detail}")
    negotiated = [f"   {c.label}: {c.negotiated}" for c in cases if c.negotiated]
    if negotiated:
        lines.append("negotiated (the same ECDSA P-256 certificate and key for every subject):")
        lines.extend(negotiated)
    lines.extend(notes)
    return "\n".join(lines)


def tool_version(name: str, path: str | None) -> str:
    if not path:
        return "missing"
    flag = {"nginx": "-v", "haproxy": "-v", "wrk": "-v"}.get(name, "--version")
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} (version unknown: {exc})"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0].strip() if text else path


def edge_version(python: str) -> str:
    try:
        done = subprocess.run(
            [python, "-c", "import edge; print(edge.__version__)"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
        )
        version = done.stdout.strip() or "unknown (" + done.stderr.strip()[-200:] + ")"
    except (OSError, subprocess.TimeoutExpired) as exc:
        version = f"unknown ({exc})"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=ROOT,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        commit = ""
    return f"edge {version}" + (f" (commit {commit}, working tree may differ)" if commit else "")


# --- main --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s runs, 1 s warm-up (smoke test)")
    p.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    p.add_argument("--subjects", help="comma-separated subject names (default: all)")
    p.add_argument(
        "--runs", type=int, default=3, help="measured runs per subject (median; default 3)"
    )
    p.add_argument("--duration", type=float, help="seconds per run (default 10, --quick 3)")
    p.add_argument(
        "--warmup", type=float, help="warm-up seconds per subject (default 2, --quick 1)"
    )
    p.add_argument("--json", help="output file (default loadtest/results/bench-<timestamp>.json)")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs, logs)")
    p.add_argument(
        "--pin",
        action="store_true",
        help="cores of their own (taskset) for the subject, wrk (4) and the backend (4) on 8 cores or more; "
        "on fewer, the subject the last core and the others the rest",
    )
    p.add_argument("--list", action="store_true", help="list scenarios and subjects, then exit")
    args = p.parse_args(argv)
    if args.duration is None:
        args.duration = 3.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 2.0
    if not 1 <= args.runs <= 50:
        p.error("--runs must be between 1 and 50")
    if not 1 <= args.duration <= 600 or not 0 <= args.warmup <= 60:
        p.error("--duration must be 1..600 s and --warmup 0..60 s")
    names = {s.name for s in SCENARIOS}
    args.scenario_list = [s.strip() for s in args.scenarios.split(",")] if args.scenarios else None
    for name in args.scenario_list or ():
        if name not in names:
            p.error(f"unknown scenario {name!r}; known: {', '.join(sorted(names))}")
    args.subject_set = {s.strip() for s in args.subjects.split(",")} if args.subjects else None
    for name in args.subject_set or ():
        if name not in SUBJECTS:
            p.error(f"unknown subject {name!r}; known: {', '.join(SUBJECTS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for s in SCENARIOS:
            say(f"{s.name:<16} {s.description}\n{'':<16} subjects: {', '.join(s.subjects)}")
        say("subjects: " + ", ".join(SUBJECTS))
        return 0
    scenarios = [s for s in SCENARIOS if args.scenario_list is None or s.name in args.scenario_list]

    venv_python = ROOT / ".venv" / "bin" / "python"
    python = str(venv_python) if venv_python.exists() else sys.executable
    tools = {name: find_tool(name) for name in ("nginx", "haproxy", "wrk", "h2load")}
    workdir = Path(tempfile.mkdtemp(prefix="edge-bench-"))
    workdir.chmod(0o755)  # nginx workers may run as another user (nobody) and read from here
    (workdir / "tmp").mkdir()
    ctx = Context(workdir=workdir, tools=tools, python=python)
    if args.pin:
        ctx.pin = Pinning.plan()
        if ctx.pin is None:
            say(
                f"--pin: {len(os.sched_getaffinity(0))} cores (or no taskset): not pinned; CPU per request still holds"
            )
        else:
            say(f"--pin: {ctx.pin.describe()}")

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_path = Path(args.json) if args.json else HERE / "results" / f"bench-{stamp}.json"
    versions = {name: tool_version(name, path) for name, path in tools.items()}
    versions["edge"] = edge_version(python)
    versions["python"] = (
        f"{platform.python_implementation()} {platform.python_version()} ({python})"
    )
    header = {
        "timestamp": dt.datetime.now().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(),
        "versions": versions,
        "tools": tools,
        "settings": {
            "runs": args.runs,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "quick": args.quick,
            "wrk_timeout": WRK_TIMEOUT,
            "pinned": dataclasses.asdict(ctx.pin) if ctx.pin else None,
        },
    }
    say(f"edge bench: {os.cpu_count()} cores, {platform.platform()}, load {os.getloadavg()[0]:.2f}")
    for name, version in versions.items():
        say(f"  {name:<8} {version}")
    missing = [name for name, path in tools.items() if not path]
    say("  missing tools: " + (", ".join(missing) if missing else "none"))
    say(
        f"  {args.runs} runs x {args.duration:g}s per subject (median), {args.warmup:g}s warm-up; temp {workdir}"
    )

    results: dict[str, Any] = {"header": header, "scenarios": {}, "complete": False}
    tables: list[str] = []
    backend = Backend(ctx)
    udp_backends = UDPBackends(ctx)
    if any(s.protocol == "udp" for s in scenarios):
        tools["udpload"] = build_udpload(ctx)

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        if tools["nginx"]:
            try:
                backend.start()
                say(f"  backend nginx on {HOST}:{ctx.backend_port}")
            except SubjectFailed as exc:
                say(f"backend failed: {exc}\n{exc.detail}")
                return 1
        if tools.get("udpload"):
            try:
                udp_backends.start()
                say(f"  udp echo on {HOST}:{ctx.udp_echo_port}, sink on {HOST}:{ctx.udp_sink_port}")
            except SubjectFailed as exc:
                say(f"udp backends failed: {exc}\n{exc.detail}")
                return 1
        for scenario in scenarios:
            say(f"\n-- {scenario.name} (load {os.getloadavg()[0]:.2f})")
            cases = run_scenario(ctx, scenario, args.subject_set, args)
            results["scenarios"][scenario.name] = {
                "scenario": {k: v for k, v in dataclasses.asdict(scenario).items()},
                "cases": [
                    {
                        "label": c.label,
                        "subject": c.subject,
                        "status": c.status,
                        "reason": c.reason,
                        "detail": c.detail,
                        "summary": c.summary(),
                        "warmup": c.warmup,
                        "runs": c.runs,
                        "negotiated": c.negotiated,
                    }
                    for c in cases
                ],
            }
            if cases:
                tables.append(table(scenario, cases, details=False))
                say("\n" + table(scenario, cases))
        results["complete"] = True
    finally:
        backend.stop()
        udp_backends.stop()
        stop_all()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(results, indent=1, default=str))
        if args.keep_tmp:
            say(f"temp dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    say("\n" + "=" * 100)
    say(
        f"{os.cpu_count()} cores; "
        + "; ".join(f"{k}: {v}" for k, v in versions.items() if k != "python")
    )
    say(
        "req/s and latencies: median of runs; spread: (max-min)/median of req/s; errors: sum over runs; "
        "CPU us/req: user+system CPU of the subject's processes per request, median of runs"
        + (f" ({ctx.pin.describe()})" if ctx.pin else " (not pinned)")
    )
    for t in tables:
        say("\n" + t)
    say(f"\nraw runs: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
