"""The Kubernetes Ingress provider at scale: from LIST answers to router sets, phase by phase.

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
Prints the median of ``--repeat`` runs of each phase and the process's resident memory.

    python loadtest/kube_scale.py [--ingresses 5000] [--endpoints 4] [--changed 10] [--repeat 3]

The generator (:func:`list_bodies`) is also what ``tests/unit/providers/kubernetes/test_ingress.py``
converts at scale.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge.config.diff import changed_servers
from edge.config.merge import merge
from edge.config.runtime import build_runtime
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.ingress import convert, update_endpoints
from edge.providers.kubernetes.objects import ClusterState
from edge.router.factory import build_router_sets, servers_for
from edge.transports import TransportRegistry

ENTRY_POINTS = {"web": "tcp", "websecure": "tcp"}


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


def ingress(i: int) -> dict[str, Any]:
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
                        {"path": "/api", "pathType": "Exact",
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


def service(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"svc{i}", "namespace": _namespace(i), "resourceVersion": str(i)},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": f"10.96.{i // 250}.{i % 250}",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "selector": {"app": f"app{i}"},
        },
    }


def endpoint_slice(i: int, endpoints: int, generation: int = 0) -> dict[str, Any]:
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
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
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
    items = {
        "Ingress": [ingress(i) for i in range(ingresses)],
        "IngressClass": [{"metadata": {"name": "edge"},
                          "spec": {"controller": "edge.dev/ingress-controller"}}],
        "Service": [service(i) for i in range(ingresses)],
        "EndpointSlice": [endpoint_slice(i, endpoints) for i in range(ingresses)],
        "Secret": [secret(i, pem) for i in range(0, ingresses, 10)],
    }  # fmt: skip
    return {
        kind: msgspec.json.encode({"metadata": {"resourceVersion": "1000"}, "items": docs})
        for kind, docs in items.items()
    }


def decode_state(bodies: dict[str, bytes]) -> ClusterState:
    """What the client's reflectors hold after the first LIST of every kind."""
    tables = {
        kind: {obj.metadata.key: obj for obj in objects.decode_list(kind, body).items}
        for kind, body in bodies.items()
    }
    return ClusterState.from_snapshot(tables)


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, (time.perf_counter() - start) * 1000


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ingresses", type=int, default=5000)
    p.add_argument("--endpoints", type=int, default=4, help="ready endpoints per Service")
    p.add_argument("--changed", type=int, default=10, help="EndpointSlices in the update")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    n = args.ingresses

    rss_start = rss_mib()
    bodies = list_bodies(n, args.endpoints)
    size = sum(len(b) for b in bodies.values())
    loop = asyncio.new_event_loop()
    phases: dict[str, list[float]] = {}

    def record(name: str, ms: float) -> None:
        phases.setdefault(name, []).append(ms)

    state = None
    for _ in range(args.repeat):
        state, ms = timed(decode_state, bodies)
        record("decode LIST bodies", ms)
        result, ms = timed(convert, state)
        record("convert", ms)
        assert not result.problems, result.problems[:3]
        merged, ms = timed(merge, {"kubernetes": result.configuration})
        record("merge", ms)
        runtime, ms = timed(build_runtime, merged, ENTRY_POINTS)
        record("validate (compile rules)", ms)
        transports = TransportRegistry(loop)
        plan, ms = timed(transports.plan, runtime.servers_transports)
        transports.commit(plan)
        record("transports", ms)
        services: dict[str, Any] = {}
        _, ms = timed(build_router_sets, runtime, transports, list(ENTRY_POINTS), services)
        record("build routers", ms)

        # K EndpointSlices change (every endpoint of each replaced): the provider's path.
        slices = dict(state.endpoint_slices)
        for i in range(args.changed):
            doc = endpoint_slice(i * (n // max(args.changed, 1)), args.endpoints, generation=100)
            obj = objects.decode("EndpointSlice", msgspec.json.encode(doc))
            slices[obj.metadata.key] = obj
        changed_state = msgspec.structs.replace(state, endpoint_slices=slices)
        result2, ms = timed(convert, changed_state)
        record(f"update: convert ({args.changed} slices changed)", ms)
        result3, ms = timed(update_endpoints, result, state, changed_state)
        record("update: update_endpoints (same result)", ms)
        assert result3 == result2
        merged2 = merge({"kubernetes": result2.configuration})
        names, ms = timed(changed_servers, merged, merged2)
        record("update: changed_servers", ms)
        assert names is not None and len(names) == args.changed, names
        runtime2, ms = timed(build_runtime, merged2, ENTRY_POINTS, previous=runtime)
        record("update: validate (rules cached)", ms)
        _, ms = timed(servers_for, services, runtime2, names, transports)
        record("update: servers in place", ms)

    assert state is not None
    http = result.configuration.http
    assert http is not None
    print(
        f"{n} Ingresses, {n} Services, {n} EndpointSlices ({n * args.endpoints} endpoints), "
        f"{len(state.secrets)} TLS Secrets; LIST bodies {size / 1e6:.1f} MB; "
        f"{len(http.routers)} routers, {len(http.services)} services"
    )
    first = 0.0
    for name, values in phases.items():
        median = statistics.median(values)
        if not name.startswith("update"):
            first += median
        print(f"  {name:<40} {median:8.0f} ms   (runs: {', '.join(f'{v:.0f}' for v in values)})")
    print(f"  {'LIST bodies -> router sets (sum)':<40} {first:8.0f} ms")
    print(f"  resident memory: {rss_mib():.0f} MiB (at start {rss_start:.0f} MiB)")
    loop.close()


if __name__ == "__main__":
    main()
