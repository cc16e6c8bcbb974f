"""The Kubernetes providers at scale: from LIST answers to router sets, phase by phase.

Generates the LIST answers an API server would send for N Ingresses (each its own host,
a Prefix ``/`` and an Exact ``/api`` path, one in ten with a TLS section and its Secret),
N Services and N EndpointSlices of E ready endpoints each (default 5,000 / 5,000 /
20,000 endpoints), then times, as the provider and the data plane run them: decoding
the LIST bodies (msgspec, ``edge.providers.kubernetes.objects``), the conversion
(``edge.providers.kubernetes.ingress.convert``), merge, validation (rules compiled),
ServersTransports and the router build (TLS certificates included). Then an
endpoints-only change (K EndpointSlices changed): the full conversion again and
``update_endpoints`` (the same result from the previous one), ``changed_servers``,
validation and the in-place server update.
Prints the median of ``--repeat`` runs of each phase, CPU time beside wall time, and
the process's resident memory.

``--crd`` does the same for the kubernetesCRD provider (``edge.providers.kubernetes.crd``)
over the cluster :func:`crd_objects` makes: R IngressRoutes (two routes each, as the
Ingresses' two paths; one in ten with TLS from a Secret, one in five with a Middleware),
T IngressRouteTCPs (``HostSNI``, passthrough except one in ten, terminated), U
IngressRouteUDPs, a Service and an EndpointSlice for each, and E endpoints spread over
them (default 5,000 / 1,000 / 500 / 20,000). In both modes the ``edit`` phases change
one IngressRoute's (Ingress's) match: a whole conversion and a router rebuild.

    python loadtest/kube_scale.py [--ingresses 5000] [--endpoints 4] [--changed 10] [--repeat 3]
    python loadtest/kube_scale.py --crd [--routes 5000] [--tcp-routes 1000] [--udp-routes 500]
        [--total-endpoints 20000]
    python loadtest/kube_scale.py [--crd] --profile [--top 25]   # cProfile per phase

The generators (:func:`list_bodies`, :func:`crd_objects`) are also what
``tests/unit/providers/kubernetes/test_ingress.py`` converts at scale and what
``kube_provider_scale.py`` fills its API server with.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import datetime
import gc
import operator
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge.config.merge import RouterMemo, merge
from edge.config.runtime import RuntimeConfig, build_runtime, check_tls
from edge.providers.kubernetes import crd, objects
from edge.providers.kubernetes import ingress as ingress_conversion
from edge.providers.kubernetes.objects import ClusterState
from edge.router.factory import build_router_sets, servers_for
from edge.tls.certs import TLSCertificates
from edge.transports import TransportRegistry

ENTRY_POINTS = {"web": "tcp", "websecure": "tcp"}
T = TypeVar("T")


def certificate() -> tuple[str, str]:
    """One self-signed EC certificate for ``*.example.com`` (base64 PEM, as in a Secret)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "*.example.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("*.example.com")]), False)
        .sign(key, hashes.SHA256())
    )
    crt = cert.public_bytes(serialization.Encoding.PEM)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.b64encode(crt).decode(), base64.b64encode(pem).decode()


def _namespace(i: int) -> str:
    return f"team-{i % 50}"


def ingress(i: int, edit: int = 0) -> dict[str, Any]:
    """Ingress ``app<i>`` on Service ``svc<i>``; ``edit`` > 0 changes its second path."""
    host = f"app{i}.example.com"
    spec: dict[str, Any] = {
        "ingressClassName": "edge",
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {"path": "/", "pathType": "Prefix",
                         "backend": {"service": {"name": f"svc{i}", "port": {"number": 80}}}},
                        {"path": f"/api/v{edit}" if edit else "/api", "pathType": "Exact",
                         "backend": {"service": {"name": f"svc{i}", "port": {"name": "http"}}}},
                    ]
                },
            }
        ],
    }  # fmt: skip
    if i % 10 == 0:
        spec["tls"] = [{"hosts": [host], "secretName": f"tls{i}"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": f"app{i}", "namespace": _namespace(i), "resourceVersion": str(i),
                     "uid": f"uid-{i}", "generation": 1,
                     "annotations": {"meta.helm.sh/release-name": f"app{i}"}},
        "spec": spec,
    }  # fmt: skip


def service(
    i: int, *, port: int = 80, port_name: str = "http", target: int = 8080, protocol: str = "TCP"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc{i}", "namespace": _namespace(i), "resourceVersion": str(i)},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": f"10.96.{i // 250}.{i % 250}",
            "ports": [
                {"name": port_name, "port": port, "targetPort": target, "protocol": protocol}
            ],
            "selector": {"app": f"app{i}"},
        },
    }


def endpoint_slice(
    i: int,
    endpoints: int,
    generation: int = 0,
    *,
    port: int = 8080,
    port_name: str = "http",
    protocol: str = "TCP",
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"svc{i}-abcde", "namespace": _namespace(i),
                     "labels": {"kubernetes.io/service-name": f"svc{i}"},
                     "resourceVersion": str(i + generation)},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [f"10.{(i // 250) % 250}.{i % 250}.{k + generation}"],
             "conditions": {"ready": True, "serving": True, "terminating": False},
             "nodeName": f"node-{k}", "targetRef": {"kind": "Pod", "name": f"app{i}-{k}"}}
            for k in range(endpoints)
        ],
        "ports": [{"name": port_name, "port": port, "protocol": protocol}],
    }  # fmt: skip


def secret(i: int, pem: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"tls{i}", "namespace": _namespace(i)},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": pem[0], "tls.key": pem[1]},
    }


def list_bodies(ingresses: int, endpoints: int) -> dict[str, bytes]:
    """The LIST answer of every kind, as JSON bytes."""
    pem = certificate()
    return encode_lists({
        "Ingress": [ingress(i) for i in range(ingresses)],
        "IngressClass": [{"metadata": {"name": "edge"},
                          "spec": {"controller": "edge.dev/ingress-controller"}}],
        "Service": [service(i) for i in range(ingresses)],
        "EndpointSlice": [endpoint_slice(i, endpoints) for i in range(ingresses)],
        "Secret": [secret(i, pem) for i in range(0, ingresses, 10)],
    })  # fmt: skip


def encode_lists(items: dict[str, list[dict[str, Any]]]) -> dict[str, bytes]:
    """Each kind's objects as the JSON body of its LIST answer."""
    return {
        kind: msgspec.json.encode({"metadata": {"resourceVersion": "1000"}, "items": docs})
        for kind, docs in items.items()
    }


# --- the kubernetesCRD cluster ------------------------------------------------------------

TRAEFIK = "traefik.io/v1alpha1"
CRD_ENTRY_POINTS = {"web": "tcp", "websecure": "tcp", "udp": "udp"}
TCP_PORT, UDP_PORT = 5432, 53


def _crd(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": TRAEFIK,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": spec,
    }


def ingress_route(i: int, edit: int = 0) -> dict[str, Any]:
    """IngressRoute ``app<i>`` on Service ``svc<i>``: ``Host`` and ``Host && PathPrefix``
    (the Ingress's two paths); one in ten with TLS from Secret ``tls<i>``, one in five
    with the namespace's Middleware. ``edit`` > 0 changes the second route's match."""
    host = f"app{i}.example.com"
    api = f"/api/v{edit}" if edit else "/api"
    routes: list[dict[str, Any]] = [
        {"match": f"Host(`{host}`)", "kind": "Rule",
         "services": [{"name": f"svc{i}", "port": 80}]},
        {"match": f"Host(`{host}`) && PathPrefix(`{api}`)", "kind": "Rule",
         "services": [{"name": f"svc{i}", "port": "http"}]},
    ]  # fmt: skip
    if i % 5 == 0:
        routes[1]["middlewares"] = [{"name": "strip-api"}]
    spec: dict[str, Any] = {"entryPoints": ["web"], "routes": routes}
    if i % 10 == 0:
        spec["entryPoints"] = ["websecure"]
        spec["tls"] = {"secretName": f"tls{i}"}
    return _crd("IngressRoute", f"app{i}", _namespace(i), spec)


def ingress_route_tcp(i: int, j: int) -> dict[str, Any]:
    """IngressRouteTCP ``db<j>`` on Service ``svc<i>``: ``HostSNI``, passthrough, or, when
    a Secret ``tls<i>`` exists (``i`` a multiple of ten), TLS terminated with it."""
    spec: dict[str, Any] = {
        "entryPoints": ["websecure"],
        "routes": [{"match": f"HostSNI(`db{j}.example.com`)",
                    "services": [{"name": f"svc{i}", "port": TCP_PORT}]}],
        "tls": {"secretName": f"tls{i}"} if i % 10 == 0 else {"passthrough": True},
    }  # fmt: skip
    return _crd("IngressRouteTCP", f"db{j}", _namespace(i), spec)


def ingress_route_udp(i: int, k: int) -> dict[str, Any]:
    """IngressRouteUDP ``dns<k>`` on Service ``svc<i>`` (entry point ``udp``)."""
    spec = {
        "entryPoints": ["udp"],
        "routes": [{"services": [{"name": f"svc{i}", "port": UDP_PORT}]}],
    }
    return _crd("IngressRouteUDP", f"dns{k}", _namespace(i), spec)


def crd_spread(routes: int, tcp: int, udp: int, endpoints: int) -> list[int]:
    """Endpoints per Service ``svc<i>``: ``endpoints`` spread as evenly as they go."""
    services = routes + tcp + udp
    per, extra = divmod(endpoints, services)
    return [per + (i < extra) for i in range(services)]


def crd_service(i: int, routes: int, tcp: int) -> dict[str, Any]:
    """Service ``svc<i>``: HTTP for an IngressRoute, then TCP, then UDP ones."""
    if i < routes:
        return service(i)
    if i < routes + tcp:
        return service(i, port=TCP_PORT, port_name="pg", target=TCP_PORT)
    return service(i, port=UDP_PORT, port_name="dns", target=UDP_PORT, protocol="UDP")


def crd_slice(i: int, routes: int, tcp: int, endpoints: int, generation: int = 0) -> dict[str, Any]:
    """Service ``svc<i>``'s EndpointSlice (:func:`crd_service`'s port)."""
    if i < routes:
        return endpoint_slice(i, endpoints, generation)
    if i < routes + tcp:
        return endpoint_slice(i, endpoints, generation, port=TCP_PORT, port_name="pg")
    return endpoint_slice(i, endpoints, generation, port=UDP_PORT, port_name="dns", protocol="UDP")


def crd_objects(routes: int, tcp: int, udp: int, endpoints: int) -> dict[str, list[dict[str, Any]]]:
    """Every object of the kubernetesCRD cluster, by kind (see the module doc)."""
    pem = certificate()
    spread = crd_spread(routes, tcp, udp, endpoints)
    return {
        "IngressRoute": [ingress_route(i) for i in range(routes)],
        "IngressRouteTCP": [ingress_route_tcp(routes + j, j) for j in range(tcp)],
        "IngressRouteUDP": [ingress_route_udp(routes + tcp + k, k) for k in range(udp)],
        "Middleware": [
            _crd("Middleware", "strip-api", _namespace(n), {"stripPrefix": {"prefixes": ["/api"]}})
            for n in range(min(50, routes))
        ],
        "TLSOption": [_crd("TLSOption", "default", _namespace(0), {"minVersion": "VersionTLS12"})],
        "Service": [crd_service(i, routes, tcp) for i in range(len(spread))],
        "EndpointSlice": [crd_slice(i, routes, tcp, e) for i, e in enumerate(spread)],
        "Secret": [secret(i, pem) for i in range(routes + tcp) if i % 10 == 0],
    }


def crd_list_bodies(routes: int, tcp: int, udp: int, endpoints: int) -> dict[str, bytes]:
    """The LIST answer of every kind the kubernetesCRD provider reads, as JSON bytes."""
    return encode_lists(crd_objects(routes, tcp, udp, endpoints))


def decode_state(bodies: dict[str, bytes]) -> ClusterState:
    """What the client's reflectors hold after the first LIST of every kind."""
    tables = {
        kind: {obj.metadata.key: obj for obj in objects.decode_list(kind, body).items}
        for kind, body in bodies.items()
    }
    return ClusterState.from_snapshot(tables)


class Phases:
    """Wall and CPU milliseconds of each named phase, run after run; with ``profile``, each
    phase also runs under a cProfile profiler of its own (its figures then include the
    profiler's overhead). The cyclic GC waits during a phase, as edge pauses it while it
    decodes a LIST, converts and prepares a round; the pass it owes once on again (every
    object the phase made, in the youngest generation) is timed after the phase, as
    ``GC after``: edge pays it too, outside the phase's own figure."""

    def __init__(self, profile: bool) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.gc_after: dict[str, list[float]] = {}
        self.profiles: dict[str, cProfile.Profile] | None = {} if profile else None

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        collecting = gc.isenabled()
        gc.disable()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            if self.profiles is not None:
                out = self.profiles.setdefault(name, cProfile.Profile()).runcall(
                    fn, *args, **kwargs
                )
            else:
                out = fn(*args, **kwargs)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            if collecting:
                gc.enable()
        owed = time.perf_counter()
        if collecting:
            gc.collect(0)
        self.gc_after.setdefault(name, []).append((time.perf_counter() - owed) * 1000)
        self.wall.setdefault(name, []).append(wall * 1000)
        self.cpu.setdefault(name, []).append(cpu * 1000)
        return out

    def report(self, first_swap: list[str], top: int, least_ms: float = 20.0) -> None:
        """Medians per phase; the sum of the ``first_swap`` phases; the profiles of the
        phases that took at least ``least_ms`` of CPU."""
        print(f"  {'phase (median of runs)':<46} {'wall ms':>8} {'CPU ms':>8} {'GC after':>8}"
              "   runs (wall)")  # fmt: skip
        for name, values in self.wall.items():
            wall, cpu = statistics.median(values), statistics.median(self.cpu[name])
            owed = statistics.median(self.gc_after[name])
            runs = ", ".join(f"{v:.0f}" for v in values)
            print(f"  {name:<46} {wall:8.0f} {cpu:8.0f} {owed:8.0f}   ({runs})")
        wall = sum(statistics.median(self.wall[n]) for n in first_swap)
        cpu = sum(statistics.median(self.cpu[n]) for n in first_swap)
        owed = sum(statistics.median(self.gc_after[n]) for n in first_swap)
        print(f"  {'LIST bodies -> router sets (sum)':<46} {wall:8.0f} {cpu:8.0f} {owed:8.0f}")
        for name, prof in (self.profiles or {}).items():
            if statistics.median(self.cpu[name]) < least_ms:
                continue
            print(f"\n--- cProfile: {name} (all runs), by own time ---")
            pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


FIRST_SWAP = ["decode LIST bodies", "convert", "merge", "validate (compile rules)",
              "certificates, check_tls", "transports", "build routers"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--crd", action="store_true", help="the kubernetesCRD provider's cluster")
    p.add_argument("--ingresses", type=int, default=5000)
    p.add_argument("--endpoints", type=int, default=4, help="ready endpoints per Service")
    p.add_argument("--routes", type=int, default=5000, help="--crd: IngressRoutes")
    p.add_argument("--tcp-routes", type=int, default=1000, help="--crd: IngressRouteTCPs")
    p.add_argument("--udp-routes", type=int, default=500, help="--crd: IngressRouteUDPs")
    p.add_argument("--total-endpoints", type=int, default=20000, help="--crd: endpoints in all")
    p.add_argument("--changed", type=int, default=10, help="EndpointSlices in the update")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="cProfile each phase")
    p.add_argument("--top", type=int, default=25, help="--profile: functions shown per phase")
    p.add_argument(
        "--profile-least", type=float, default=20.0, help="--profile: phases of this many CPU ms"
    )
    args = p.parse_args()

    rss_start = rss_mib()
    convert: Callable[[ClusterState], Any]
    if args.crd:
        n = args.routes
        spread = crd_spread(args.routes, args.tcp_routes, args.udp_routes, args.total_endpoints)
        bodies = crd_list_bodies(
            args.routes, args.tcp_routes, args.udp_routes, args.total_endpoints
        )
        convert, entry_points, provider = crd.convert, CRD_ENTRY_POINTS, crd.PROVIDER

        def changed_slice(i: int, generation: int) -> dict[str, Any]:
            return crd_slice(i, args.routes, args.tcp_routes, spread[i], generation)

        def edited(i: int, edit: int) -> tuple[str, dict[str, Any]]:
            return "IngressRoute", ingress_route(i, edit)
    else:
        n = args.ingresses
        bodies = list_bodies(n, args.endpoints)
        convert, entry_points, provider = ingress_conversion.convert, ENTRY_POINTS, "kubernetes"

        def changed_slice(i: int, generation: int) -> dict[str, Any]:
            return endpoint_slice(i, args.endpoints, generation)

        def edited(i: int, edit: int) -> tuple[str, dict[str, Any]]:
            return "Ingress", ingress(i, edit)

    size = sum(len(b) for b in bodies.values())
    loop = asyncio.new_event_loop()
    phases = Phases(args.profile)
    run = phases.run
    state: ClusterState | None = None
    result: Any = None
    for r in range(args.repeat):
        memo: RouterMemo = {}
        state = run("decode LIST bodies", decode_state, bodies)
        result = run("convert", convert, state)
        assert not result.problems, result.problems[:3]
        merged = run("merge", merge, {provider: result.configuration}, memo)
        runtime = run("validate (compile rules)", build_runtime, merged, entry_points)
        certs = run("certificates, check_tls", _certificates, runtime)
        transports = TransportRegistry(loop)
        plan = run("transports", transports.plan, runtime.servers_transports)
        transports.commit(plan)
        services: dict[str, Any] = {}
        run("build routers", build_router_sets, runtime, transports, list(entry_points),
            services, certs)  # fmt: skip

        # K EndpointSlices change (every endpoint of each replaced): the provider's path.
        step = max(n // max(args.changed, 1), 1)
        slices = dict(state.endpoint_slices)
        for i in range(args.changed):
            obj = objects.decode("EndpointSlice", msgspec.json.encode(changed_slice(i * step, 100)))
            slices[obj.metadata.key] = obj
        changed_state = msgspec.structs.replace(state, endpoint_slices=slices)
        label = f"update ({args.changed} slices)"
        result2: Any = run(f"{label}: convert", convert, changed_state)
        update = crd.update_endpoints if args.crd else ingress_conversion.update_endpoints
        result3 = run(f"{label}: update_endpoints", update, result, state, changed_state)
        assert result3 is not None and result3.configuration == result2.configuration
        # the watcher compares with the last configuration (the provider, servers only)
        run(f"{label}: compare with the last", operator.eq, result3.configuration,
            result.configuration)  # fmt: skip
        merged2 = run(f"{label}: merge", merge, {provider: result3.configuration}, memo)
        runtime2 = run(f"{label}: validate", build_runtime, merged2, entry_points,
                       previous=runtime)  # fmt: skip
        names = run(f"{label}: changed_servers", runtime2.changed_servers, runtime)
        # an IngressRoute's two routes each have a load balancer on the Service
        assert names is not None and len(names) == args.changed * (2 if args.crd else 1), names
        run(f"{label}: check_tls", check_tls, runtime2, certs)
        run(f"{label}: servers in place", servers_for, services, runtime2, names, transports)

        # One IngressRoute (Ingress) edited: its second route's match; routers rebuilt.
        kind, doc = edited(n // 2, r + 1)
        obj = objects.decode(kind, msgspec.json.encode(doc))
        table = "ingress_routes" if args.crd else "ingresses"
        edited_state = msgspec.structs.replace(
            state, **{table: {**getattr(state, table), obj.metadata.key: obj}}
        )
        result4: Any = run("edit: convert", convert, edited_state)
        run("edit: compare with the last", operator.eq, result4.configuration,
            result.configuration)  # fmt: skip
        merged4 = run("edit: merge", merge, {provider: result4.configuration}, memo)
        runtime4 = run("edit: validate", build_runtime, merged4, entry_points, previous=runtime)
        assert runtime4.changed_servers(runtime) is None
        run("edit: check_tls", check_tls, runtime4, certs)
        run("edit: build routers", build_router_sets, runtime4, transports, list(entry_points),
            {}, certs)  # fmt: skip

    assert state is not None and result is not None
    conf = result.configuration
    counts = ", ".join(
        f"{len(section.routers)} {label} routers / {len(section.services)} services"
        for label, section in (("http", conf.http), ("tcp", conf.tcp), ("udp", conf.udp))
        if section is not None
    )
    endpoints = sum(len(e.endpoints) for e in state.endpoint_slices.values())
    kinds = ", ".join(f"{len(objects.decode_list(k, b).items)} {k}" for k, b in bodies.items())
    print(f"{kinds} ({endpoints} endpoints); LIST bodies {size / 1e6:.1f} MB; {counts}")
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    phases.report(FIRST_SWAP, args.top, args.profile_least)
    print(f"  resident memory: {rss_mib():.0f} MiB (at start {rss_start:.0f} MiB)")
    loop.close()


def _certificates(runtime: RuntimeConfig) -> TLSCertificates:
    """The certificate snapshot the data plane makes, and its check of ``runtime``."""
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    return certs


if __name__ == "__main__":
    main()
