"""One Kubernetes endpoint-churn round, as edge runs it, counted in instructions or timed.

Builds the kube_scale cluster (:mod:`kube_scale`: N Ingresses, Services and
EndpointSlices, one Ingress in ten with TLS) and its first configuration as the
provider and the data plane do, then runs R churn rounds: each replaces K
EndpointSlices (a different set each round) and runs what follows in edge:
``update_endpoints``, ``merge`` with the watcher's memo, ``build_runtime`` with the
previous snapshot, ``changed_servers`` (the data plane's question), ``check_tls`` with
the live certificates and ``servers_for`` (the in-place update).

    python loadtest/kube_churn_round.py [--ingresses 2000] [--changed 20] [--rounds 10]
    python loadtest/kube_churn_round.py --instructions   # callgrind: instructions per round

``--instructions`` runs this script under callgrind at two round counts (see
:mod:`callgrind`): set-up cancels out, and what remains is one round.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube_scale import ENTRY_POINTS, decode_state, endpoint_slice, list_bodies

from edge.config.merge import RouterMemo, merge
from edge.config.runtime import build_runtime, check_tls
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.ingress import convert, update_endpoints
from edge.router.factory import build_router_sets, servers_for
from edge.tls.certs import TLSCertificates
from edge.transports import TransportRegistry


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ingresses", type=int, default=2000)
    p.add_argument("--endpoints", type=int, default=4, help="ready endpoints per Service")
    p.add_argument("--changed", type=int, default=20, help="EndpointSlices changed per round")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--instructions", action="store_true", help="callgrind: instructions per round")
    args = p.parse_args()
    if args.instructions:
        from callgrind import per_unit

        flags = ["--ingresses", str(args.ingresses), "--endpoints", str(args.endpoints),
                 "--changed", str(args.changed)]  # fmt: skip
        per_round = per_unit(__file__, "--rounds", flags, 2, 6)
        print(f"{per_round / 1e6:.1f}M instructions per churn round "
              f"({args.changed} slices changed, {args.ingresses} Ingresses"
              ")")  # fmt: skip
        return

    n = args.ingresses
    loop = asyncio.new_event_loop()
    state = decode_state(list_bodies(n, args.endpoints))
    result = convert(state)
    memo: RouterMemo = {}
    merged = merge({"kubernetes": result.configuration}, memo)
    runtime = build_runtime(merged, ENTRY_POINTS)
    certs = TLSCertificates(runtime.tls)
    check_tls(runtime, certs)
    transports = TransportRegistry(loop)
    transports.commit(transports.plan(runtime.servers_transports))
    services: dict = {}
    build_router_sets(runtime, transports, list(ENTRY_POINTS), services, certs)

    step = max(n // max(args.changed, 1), 1)
    spent = 0.0
    for r in range(args.rounds):
        slices = dict(state.endpoint_slices)
        for i in range(args.changed):
            doc = endpoint_slice((i * step + r + 1) % n, args.endpoints, generation=100 + r)
            obj = objects.decode("EndpointSlice", msgspec.json.encode(doc))
            slices[obj.metadata.key] = obj
        new_state = msgspec.structs.replace(state, endpoint_slices=slices)
        start = time.process_time()
        new_result = update_endpoints(result, state, new_state)
        assert new_result is not None
        new_merged = merge({"kubernetes": new_result.configuration}, memo)
        new_runtime = build_runtime(new_merged, ENTRY_POINTS, previous=runtime)
        names = new_runtime.changed_servers(runtime)  # as the data plane asks
        assert names is not None and len(names) == args.changed, names
        check_tls(new_runtime, certs)
        servers_for(services, new_runtime, names, transports)
        spent += time.process_time() - start
        state, result, runtime = new_state, new_result, new_runtime
    print(f"{args.rounds} rounds: {spent / args.rounds * 1e3:.1f} ms CPU per round")
    loop.close()


if __name__ == "__main__":
    main()
