"""One Kubernetes endpoint-churn round, as edge runs it, counted in instructions or timed.

Builds the kube_scale cluster (:mod:`kube_scale`: N Ingresses, Services and
EndpointSlices, one Ingress in ten with TLS) and its first configuration as the
provider and the data plane do, then runs R churn rounds: each replaces K
EndpointSlices (a different set each round) and runs what follows in edge:
``update_endpoints``, ``merge`` with the watcher's memo, ``build_runtime`` with the
previous snapshot, the data plane's question (``edge.app._changed_backends``: which
HTTP, TCP and UDP load balancers changed in their servers alone), ``check_tls`` with
the live certificates and ``servers_for``, ``tcp_servers_for``, ``udp_servers_for``
with each live load balancer's ``update`` (the in-place path).

``--crd`` runs the kubernetesCRD provider's round over :func:`kube_scale.crd_objects`'
cluster (default 5,000 IngressRoutes, 1,000 IngressRouteTCPs, 500 IngressRouteUDPs,
20,000 endpoints), its ``update_endpoints`` in place of the Ingress one; ``--full``
converts the whole cluster instead (what a round cost before that provider had an
endpoints-only path, and still costs for any other change) and compares the result
with the last (the provider, then the watcher). ``--slices tcp`` changes TCP and UDP
Services' slices, which the data plane also takes in place. A round that must build
every router again (counted as rebuilt) is a failure. The cyclic GC waits during a
round, as edge pauses it.

    python loadtest/kube_churn_round.py [--ingresses 2000] [--changed 20] [--rounds 10]
    python loadtest/kube_churn_round.py --crd [--slices http|tcp] [--routes 5000] ...
    python loadtest/kube_churn_round.py --instructions   # callgrind: instructions per round

``--instructions`` runs this script under callgrind at two round counts (see
:mod:`callgrind`): set-up cancels out, and what remains is one round.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube_scale import (
    CRD_ENTRY_POINTS,
    ENTRY_POINTS,
    crd_list_bodies,
    crd_slice,
    crd_spread,
    decode_state,
    endpoint_slice,
    list_bodies,
)

from edge.app import _changed_backends
from edge.config.merge import RouterMemo, merge
from edge.config.runtime import build_runtime, check_tls
from edge.providers.kubernetes import crd, objects
from edge.providers.kubernetes.ingress import convert, update_endpoints
from edge.router.factory import build_router_sets, servers_for
from edge.router.tcp import tcp_servers_for
from edge.router.udp import udp_servers_for
from edge.tls.certs import TLSCertificates
from edge.transports import TransportRegistry


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--crd", action="store_true", help="the kubernetesCRD provider's round")
    p.add_argument("--ingresses", type=int, default=2000)
    p.add_argument("--endpoints", type=int, default=4, help="ready endpoints per Service")
    p.add_argument("--routes", type=int, default=5000, help="--crd: IngressRoutes")
    p.add_argument("--tcp-routes", type=int, default=1000, help="--crd: IngressRouteTCPs")
    p.add_argument("--udp-routes", type=int, default=500, help="--crd: IngressRouteUDPs")
    p.add_argument("--total-endpoints", type=int, default=20000, help="--crd: endpoints in all")
    p.add_argument(
        "--slices", choices=("http", "tcp"), default="http", help="--crd: whose slices change"
    )
    p.add_argument("--full", action="store_true", help="--crd: convert all, no update_endpoints")
    p.add_argument("--changed", type=int, default=20, help="EndpointSlices changed per round")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--instructions", action="store_true", help="callgrind: instructions per round")
    args = p.parse_args()
    if args.crd:
        flags = ["--crd", "--routes", str(args.routes), "--tcp-routes", str(args.tcp_routes),
                 "--udp-routes", str(args.udp_routes), "--total-endpoints",
                 str(args.total_endpoints), "--slices", args.slices]  # fmt: skip
        flags += ["--full"] if args.full else []
        what = f"{args.changed} {args.slices} slices changed, {args.routes} IngressRoutes"
        what += ", whole conversions" if args.full else ""
    else:
        flags = ["--ingresses", str(args.ingresses), "--endpoints", str(args.endpoints)]
        what = f"{args.changed} slices changed, {args.ingresses} Ingresses"
    if args.instructions:
        from callgrind import per_unit

        flags += ["--changed", str(args.changed)]
        per_round = per_unit(__file__, "--rounds", flags, 2, 6)
        print(f"{per_round / 1e6:.1f}M instructions per churn round ({what})")
        return

    slice_of: Callable[[int, int], dict[str, Any]]
    if args.crd:
        spread = crd_spread(args.routes, args.tcp_routes, args.udp_routes, args.total_endpoints)
        state = decode_state(
            crd_list_bodies(args.routes, args.tcp_routes, args.udp_routes, args.total_endpoints)
        )
        result: Any = crd.convert(state)
        provider, entry_points = crd.PROVIDER, CRD_ENTRY_POINTS
        first, n = (
            (0, args.routes) if args.slices == "http" else (args.routes, len(spread) - args.routes)
        )

        def slice_of(i: int, generation: int) -> dict[str, Any]:
            return crd_slice(i, args.routes, args.tcp_routes, spread[i], generation)
    else:
        state = decode_state(list_bodies(args.ingresses, args.endpoints))
        result = convert(state)
        provider, entry_points = "kubernetes", ENTRY_POINTS
        first, n = 0, args.ingresses

        def slice_of(i: int, generation: int) -> dict[str, Any]:
            return endpoint_slice(i, args.endpoints, generation)

    loop = asyncio.new_event_loop()
    memo: RouterMemo = {}
    merged = merge({provider: result.configuration}, memo)
    runtime = build_runtime(merged, entry_points)
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    transports = TransportRegistry(loop)
    transports.commit(transports.plan(runtime.servers_transports))
    services: dict = {}
    tcp_services: dict = {}
    udp_services: dict = {}
    build_router_sets(
        runtime, transports, list(entry_points), services, certs,
        tcp_services=tcp_services, udp_services=udp_services,
    )  # fmt: skip

    step = max(n // max(args.changed, 1), 1)
    spent = 0.0
    for r in range(args.rounds):
        slices = dict(state.endpoint_slices)
        for i in range(args.changed):
            doc = slice_of(first + (i * step + r + 1) % n, 100 + r)
            obj = objects.decode("EndpointSlice", msgspec.json.encode(doc))
            slices[obj.metadata.key] = obj
        new_state = msgspec.structs.replace(state, endpoint_slices=slices)
        gc.disable()
        start = time.process_time()
        new_result: Any
        if args.full:
            new_result = crd.convert(new_state)
            for _ in ("provider", "watcher"):  # each drops a configuration equal to the last
                assert new_result.configuration != result.configuration
        else:
            update = crd.update_endpoints if args.crd else update_endpoints
            new_result = update(result, state, new_state)
            assert new_result is not None
        new_merged = merge({provider: new_result.configuration}, memo)
        new_runtime = build_runtime(new_merged, entry_points, previous=runtime)
        changed = _changed_backends(runtime, new_runtime)  # as the data plane asks
        check_tls(new_runtime, certs)
        if changed is None:  # the data plane would build every router again
            raise AssertionError(f"round {r}: the routers were rebuilt")
        names = [*changed.http, *changed.tcp, *changed.udp]
        assert len(names) == args.changed * (2 if args.crd and args.slices == "http" else 1), (
            changed
        )
        for service, servers in servers_for(services, new_runtime, changed.http, transports):
            service.update(servers)
        for tcp_service, tcp_servers in tcp_servers_for(tcp_services, new_runtime, changed.tcp):
            tcp_service.update(tcp_servers)
        for udp_service, udp_servers in udp_servers_for(udp_services, new_runtime, changed.udp):
            udp_service.update(udp_servers)
        spent += time.process_time() - start
        gc.enable()
        state, result, runtime = new_state, new_result, new_runtime
    print(
        f"{args.rounds} rounds ({what}; all in place): "
        f"{spent / args.rounds * 1e3:.1f} ms CPU per round"
    )
    loop.close()


if __name__ == "__main__":
    main()
