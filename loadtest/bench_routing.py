"""Routing benchmark: RouteTable lookup cost with 10 vs 10,000 host routers.

Run: ``python loadtest/bench_routing.py``. Builds two tables of
``Host(`hN.example.com`) && PathPrefix(`/api`)`` routers plus a few host-agnostic
ones, times a fixed, bounded set of lookups against each (hits, path misses that fall
through to a catch-all, and unknown hosts), and prints lookups/s, ns/lookup and the
ratio. The invariant under test: lookup cost does not grow with the number of hosts.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edge.rules import RequestView, RouteTable, compile_rule, default_priority

LOOKUPS = 200_000
DISTINCT_REQUESTS = 1_000
REPEATS = 5
SEED = 1
AGNOSTIC_RULES = (
    "PathPrefix(`/.well-known/acme-challenge`)",
    "Path(`/health`)",
    "Method(`OPTIONS`) && PathPrefix(`/`)",
    "PathPrefix(`/`)",
)


def build_table(hosts: int) -> RouteTable[str]:
    entries = []
    for i in range(hosts):
        text = f"Host(`h{i}.example.com`) && PathPrefix(`/api`)"
        entries.append((f"r{i}", compile_rule(text), default_priority(text), f"r{i}"))
    for j, text in enumerate(AGNOSTIC_RULES):
        entries.append((f"any{j}", compile_rule(text), default_priority(text), f"any{j}"))
    return RouteTable(entries)


def make_requests(hosts: int, rng: random.Random) -> list[RequestView]:
    views = []
    for _ in range(DISTINCT_REQUESTS):
        roll = rng.random()
        host = f"h{rng.randrange(hosts)}.example.com"
        if roll < 0.7:  # hit
            views.append(RequestView(host=host, path="/api/v1/items", method="GET"))
        elif roll < 0.9:  # known host, path miss: falls through to the catch-all
            views.append(RequestView(host=host, path="/static/app.js", method="GET"))
        else:  # unknown host: only host-agnostic routes
            views.append(RequestView(host="other.example.org", path="/api", method="GET"))
    return views


def time_lookups(table: RouteTable[str], views: list[RequestView]) -> float:
    """Best of REPEATS runs, in seconds, for LOOKUPS lookups."""
    match = table.match
    rounds, rest = divmod(LOOKUPS, len(views))
    batch = views * rounds + views[:rest]
    best = float("inf")
    for _ in range(REPEATS):
        for view in views:  # reset lazily cached per-request state between runs
            view._decoded_path = None
        start = time.perf_counter()
        for view in batch:
            match(view)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    results = {}
    for hosts in (10, 10_000):
        started = time.perf_counter()
        table = build_table(hosts)
        built = time.perf_counter() - started
        views = make_requests(hosts, random.Random(SEED))
        misses = sum(table.match(v) is None for v in views)
        assert misses == 0, "every benchmark request should be routed"
        elapsed = time_lookups(table, views)
        ns = elapsed / LOOKUPS * 1e9
        results[hosts] = ns
        print(
            f"{len(table):>6} routers: {LOOKUPS / elapsed:>12,.0f} lookups/s "
            f"{ns:>8.1f} ns/lookup   (built in {built * 1000:.1f} ms)"
        )
    print(f"ratio 10,000 / 10 routers: {results[10_000] / results[10]:.2f}x ns/lookup")


if __name__ == "__main__":
    main()
