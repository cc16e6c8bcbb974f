"""locust users for edge's three kinds of traffic: HTTP, TLS passthrough and UDP.

Each user checks the answer, not only that one came: the HTTP user that the
backend its route names answered (``edge whoami`` says its name in JSON), the
TLS user that the certificate it was shown is the backend's (edge passes the
handshake through; it never terminates), and the UDP user that its own datagram
came back. Every result reaches locust's statistics as one
``events.request.fire(request_type, name, response_time, response_length,
exception)``: the TLS and UDP users fire it themselves, the HTTP user through
locust's FastHttpSession, which fires the same event. A wrong answer is a
failure with a message that names what was wrong (and holds nothing random, so
locust groups failures by kind).

Where the traffic goes comes from ``--host`` (the HTTP entry point, e.g.
``http://127.0.0.1:80``) and these environment variables; the defaults fit the
kind cluster's port mappings (README, Deploy), ``loadtest/locust_local.py``
sets them all for its local set-up:

  EDGE_LOCUST_HTTP_ROUTES  "HOST/PATH=NAME ..." (whitespace-separated): a GET of PATH with
                           Host: HOST must be answered 200 by the whoami called NAME (an
                           fnmatch pattern: "web-*" matches web-1 and web-2).
                           Default: the routes of k8s/examples' Ingress (two hosts, a
                           path split): "web.example.test/=web web.example.test/api/users=api
                           api.example.test/=api"
  EDGE_LOCUST_TLS_ADDR     HOST:PORT of the entry point with the passthrough router (127.0.0.1:443)
  EDGE_LOCUST_TLS_SNI      the server name sent; the router's HostSNI (echo.example.test)
  EDGE_LOCUST_TLS_SHA256   the backend certificate's SHA-256 fingerprint, hex (colons allowed)
  EDGE_LOCUST_TLS_CERT     or its PEM file, fingerprinted here; one of the two is required
  EDGE_LOCUST_UDP_ADDR     HOST:PORT of the UDP entry point (127.0.0.1:8053)
  EDGE_LOCUST_TIMEOUT      seconds a TCP connect, handshake or echo may take (5)
  EDGE_LOCUST_UDP_TIMEOUT  seconds to wait for a datagram's echo; later is a failure (2)
  EDGE_LOCUST_WAIT         each user's pause between requests: "0" (default), "S" or "MIN-MAX"

The backends behind TLS and UDP must echo: TLS a line back as sent, inside TLS with
its own certificate (``edge whoami --tls``), UDP a datagram back as sent
(``edge whoami --udp``). ``locust_local.py --cluster`` runs them as k8s/examples/
deploys them (``crd/echo.yaml``), behind that directory's routes, and adds the
IngressRoute's host to the HTTP routes.
Pick users by class name on the command line (``locust -f locustfile.py
HTTPUser UDPUser``); with none named, all three run with equal weight.
Nothing here imports edge: the file runs wherever locust is installed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import socket
import ssl
import time
from dataclasses import dataclass
from itertools import cycle
from random import randrange

import gevent
from locust import FastHttpUser, User, between, constant, events, task
from locust.stats import CSV_STATS_INTERVAL_SEC


class WrongAnswer(Exception):
    """The request was answered, but not as the route or the protocol says it must be."""


class NoAnswer(Exception):
    """No answer within the timeout (UDP: the datagram or its echo was lost or late)."""


# --- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    host: str
    path: str
    backend: str  # fnmatch pattern for whoami's "name"

    @property
    def label(self) -> str:
        return f"{self.host}{self.path}"


@dataclass(frozen=True)
class Settings:
    routes: tuple[Route, ...]
    tls_addr: tuple[str, int]
    tls_sni: str
    tls_sha256: str  # "" when neither EDGE_LOCUST_TLS_SHA256 nor EDGE_LOCUST_TLS_CERT is set
    udp_addr: tuple[str, int]
    timeout: float
    udp_timeout: float
    wait: tuple[float, float]

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ) -> Settings:
        return cls(
            routes=parse_routes(env.get("EDGE_LOCUST_HTTP_ROUTES", DEFAULT_ROUTES)),
            tls_addr=parse_addr(
                "EDGE_LOCUST_TLS_ADDR", env.get("EDGE_LOCUST_TLS_ADDR", "127.0.0.1:443")
            ),
            tls_sni=env.get("EDGE_LOCUST_TLS_SNI", "echo.example.test"),
            tls_sha256=expected_fingerprint(env),
            udp_addr=parse_addr(
                "EDGE_LOCUST_UDP_ADDR", env.get("EDGE_LOCUST_UDP_ADDR", "127.0.0.1:8053")
            ),
            timeout=float(env.get("EDGE_LOCUST_TIMEOUT", "5")),
            udp_timeout=float(env.get("EDGE_LOCUST_UDP_TIMEOUT", "2")),
            wait=parse_wait(env.get("EDGE_LOCUST_WAIT", "0")),
        )


DEFAULT_ROUTES = "web.example.test/=web web.example.test/api/users=api api.example.test/=api"


def parse_routes(text: str) -> tuple[Route, ...]:
    routes = []
    for item in text.split():
        target, sep, backend = item.partition("=")
        host, slash, path = target.partition("/")
        if not (sep and slash and host and backend):
            raise ValueError(f"EDGE_LOCUST_HTTP_ROUTES: {item!r} is not HOST/PATH=NAME")
        routes.append(Route(host, "/" + path, backend))
    if not routes:
        raise ValueError("EDGE_LOCUST_HTTP_ROUTES names no route")
    return tuple(routes)


def parse_addr(var: str, text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{var}: {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def parse_wait(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    low_s = float(low)
    return low_s, float(high) if high else low_s


def expected_fingerprint(env: dict[str, str] | os._Environ) -> str:
    if value := env.get("EDGE_LOCUST_TLS_SHA256", ""):
        return value.replace(":", "").lower()
    if path := env.get("EDGE_LOCUST_TLS_CERT", ""):
        with open(path) as f:
            der = ssl.PEM_cert_to_DER_cert(f.read())
        return hashlib.sha256(der).hexdigest()
    return ""


SETTINGS = Settings.from_env(os.environ)
WAIT = (
    constant(SETTINGS.wait[0]) if SETTINGS.wait[0] == SETTINGS.wait[1] else between(*SETTINGS.wait)
)


@events.test_stop.add_listener
def final_csv(environment, **_kwargs) -> None:
    """Let ``--csv`` files end with the final numbers.

    locust rewrites them once a second while it runs and not again at the end, so
    the last second's requests would be missing; test_stop fires once every user
    has stopped, and waiting here lets one more write happen.
    """
    if getattr(environment.parsed_options, "csv_prefix", None):
        gevent.sleep(CSV_STATS_INTERVAL_SEC + 0.2)


def elapsed_ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


# --- HTTP --------------------------------------------------------------------------------


class HTTPUser(FastHttpUser):
    """GETs over keep-alive, each route in turn; the JSON's ``name`` must match the route's backend."""

    wait_time = WAIT

    def on_start(self) -> None:
        routes = SETTINGS.routes
        start = randrange(len(routes))  # users do not all begin on the same route
        self.routes = cycle(routes[start:] + routes[:start])

    @task
    def get(self) -> None:
        route = next(self.routes)
        with self.client.get(
            route.path, headers={"Host": route.host}, name=route.label, catch_response=True
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"status {resp.status_code}, expected 200 from {route.backend}")
                return
            try:
                name = json.loads(resp.content)["name"]
            except (ValueError, KeyError, TypeError):
                resp.failure(f"not whoami's JSON (expected {route.backend})")
                return
            if not fnmatch.fnmatchcase(name, route.backend):
                resp.failure(f"answered by {name!r}, expected {route.backend!r}")


# --- TLS passthrough ------------------------------------------------------------------------


class TLSPassthroughUser(User):
    """A new connection per round trip: connect, handshake with SNI, pin the certificate, echo, close."""

    wait_time = WAIT

    def on_start(self) -> None:
        # Verification is the pinned fingerprint: the backend's certificate is usually
        # self-signed, and what matters is whose it is, not who signed it.
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE

    @task
    def round_trip(self) -> None:
        start = time.perf_counter()
        received = 0
        error: Exception | None = None
        try:
            received = self._round_trip()
        except Exception as exc:  # every failure is reported, none stops the user
            error = exc
        self.environment.events.request.fire(
            request_type="TLS",
            name=SETTINGS.tls_sni,
            response_time=elapsed_ms(start),
            response_length=received,
            exception=error,
            context={},
        )

    def _round_trip(self) -> int:
        if not SETTINGS.tls_sha256:
            raise WrongAnswer(
                "no expected certificate: set EDGE_LOCUST_TLS_SHA256 or EDGE_LOCUST_TLS_CERT"
            )
        with (
            socket.create_connection(SETTINGS.tls_addr, timeout=SETTINGS.timeout) as raw,
            self.context.wrap_socket(raw, server_hostname=SETTINGS.tls_sni) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
            if der is None or hashlib.sha256(der).hexdigest() != SETTINGS.tls_sha256:
                raise WrongAnswer(
                    "the certificate presented is not the backend's (fingerprint differs)"
                )
            line = os.urandom(16).hex().encode() + b"\n"
            tls.sendall(line)
            echoed = b""
            while len(echoed) < len(line):
                chunk = tls.recv(len(line) - len(echoed))
                if not chunk:
                    raise WrongAnswer(f"closed after {len(echoed)} of {len(line)} echoed bytes")
                echoed += chunk
            if echoed != line:
                raise WrongAnswer("echo differs from the line sent")
            return len(echoed)


# --- UDP ------------------------------------------------------------------------------------


class UDPUser(User):
    """One connected socket per user (one session in edge); a datagram out, its echo back."""

    wait_time = WAIT

    def on_start(self) -> None:
        family, kind, proto, _, address = socket.getaddrinfo(
            *SETTINGS.udp_addr, type=socket.SOCK_DGRAM
        )[0]
        self.sock = socket.socket(family, kind, proto)
        self.sock.connect(address)

    def on_stop(self) -> None:
        self.sock.close()

    @task
    def round_trip(self) -> None:
        payload = os.urandom(16).hex().encode()
        start = time.perf_counter()
        received = 0
        error: Exception | None = None
        try:
            received = self._round_trip(payload, start)
        except Exception as exc:
            error = exc
        self.environment.events.request.fire(
            request_type="UDP",
            name=f"{SETTINGS.udp_addr[0]}:{SETTINGS.udp_addr[1]}",
            response_time=elapsed_ms(start),
            response_length=received,
            exception=error,
            context={},
        )

    def _round_trip(self, payload: bytes, start: float) -> int:
        self.sock.send(payload)
        deadline = start + SETTINGS.udp_timeout
        while True:  # a late echo of an earlier, timed-out datagram is not this one's
            left = deadline - time.perf_counter()
            if left <= 0:
                raise NoAnswer(f"no echo within {SETTINGS.udp_timeout:g} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                raise NoAnswer(f"no echo within {SETTINGS.udp_timeout:g} s") from None
            if data == payload:
                return len(data)
