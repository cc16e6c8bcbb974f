"""Routing benchmark: what looking up a route costs (in-process, no network).

Two measurements, each the best of ``--repeats`` timed runs of ``--lookups`` lookups:

``hosts``
    Tables of ``Host(`hN.example.com`) && PathPrefix(`/api`)`` routers (10 and
    10,000 of them) plus four host-agnostic ones, against requests that hit (70 %),
    miss the path and fall through to the catch-all (20 %), or name an unknown host
    (10 %). The invariant under test: lookup cost does not grow with the number of
    hosts (the ratio line).

``regexp``
    The same lookups through routers whose rules need regexps (``HostRegexp`` per
    host, a ``PathRegexp`` and a ``HeaderRegexp`` catch-all), compiled by edge's
    engine (RE2, linear time) and, for comparison, by Python's backtracking ``re``
    with the same patterns: the cost per lookup and per regexp evaluated.

Run: ``python loadtest/bench_routing.py [--only hosts|regexp] [--lookups N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import edge.rules.regexp as rules_mod
from edge.rules import RequestView, RouteTable, compile_rule, default_priority

DISTINCT_REQUESTS = 1_000
SEED = 1
AGNOSTIC_RULES = (
    "PathPrefix(`/.well-known/acme-challenge`)",
    "Path(`/health`)",
    "Method(`OPTIONS`) && PathPrefix(`/`)",
    "PathPrefix(`/`)",
)
REGEXP_HOSTS = 10


def table(rules: list[str]) -> RouteTable[str]:
    return RouteTable(
        (f"r{i}", compile_rule(text), default_priority(text), f"r{i}")
        for i, text in enumerate(rules)
    )


def host_rules(hosts: int) -> list[str]:
    rules = [f"Host(`h{i}.example.com`) && PathPrefix(`/api`)" for i in range(hosts)]
    return rules + list(AGNOSTIC_RULES)


def regexp_rules(hosts: int) -> list[str]:
    rules = [
        rf"HostRegexp(`^h{i}\.example\.(com|net)$`) && PathPrefix(`/api`)" for i in range(hosts)
    ]
    return [
        *rules,
        r"PathRegexp(`^/static/[a-z0-9]+\.(js|css)$`)",
        r"HeaderRegexp(`User-Agent`, `(?i)bot|crawler`) && PathPrefix(`/`)",
        "PathPrefix(`/`)",
    ]


def make_requests(hosts: int, rng: random.Random) -> list[RequestView]:
    views = []
    headers = [(b"User-Agent", b"curl/8.5.0"), (b"Accept", b"*/*")]
    for _ in range(DISTINCT_REQUESTS):
        roll = rng.random()
        host = f"h{rng.randrange(hosts)}.example.com"
        if roll < 0.7:  # hit
            views.append(
                RequestView(host=host, path="/api/v1/items", method="GET", headers=headers)
            )
        elif roll < 0.9:  # known host, path miss: falls through to the catch-all
            views.append(
                RequestView(host=host, path="/static/app.js", method="GET", headers=headers)
            )
        else:  # unknown host: only host-agnostic routes
            views.append(
                RequestView(host="other.example.org", path="/api", method="GET", headers=headers)
            )
    return views


def time_lookups(
    tbl: RouteTable[str], views: list[RequestView], lookups: int, repeats: int
) -> float:
    """Best of ``repeats`` runs, in seconds, for ``lookups`` lookups."""
    match = tbl.match
    rounds, rest = divmod(lookups, len(views))
    batch = views * rounds + views[:rest]
    best = float("inf")
    for _ in range(repeats):
        for view in views:  # reset lazily cached per-request state between runs
            view._routing_path = None
            view._query_map = None
        start = time.perf_counter()
        for view in batch:
            match(view)
        best = min(best, time.perf_counter() - start)
    return best


def bench_hosts(args: argparse.Namespace) -> None:
    results = {}
    for hosts in (10, 10_000):
        started = time.perf_counter()
        tbl = table(host_rules(hosts))
        built = time.perf_counter() - started
        views = make_requests(hosts, random.Random(SEED))
        assert all(tbl.match(v) is not None for v in views), "every request should be routed"
        elapsed = time_lookups(tbl, views, args.lookups, args.repeats)
        ns = results[hosts] = elapsed / args.lookups * 1e9
        print(
            f"hosts  {len(tbl):>6} routers: {args.lookups / elapsed:>12,.0f} lookups/s "
            f"{ns:>8.1f} ns/lookup   (built in {built * 1000:.1f} ms)"
        )
    print(f"hosts  ratio 10,004 / 14 routers: {results[10_000] / results[10]:.2f}x ns/lookup")


class _BacktrackingRegexp:
    """Python's ``re`` behind the interface of edge's RE2 regexps (comparison only)."""

    def __init__(self, pattern: str) -> None:
        self._search = re.compile(pattern).search

    def search(self, text: str) -> bool:
        return self._search(text) is not None


def count_evaluations(tbl: RouteTable[str], views: list[RequestView]) -> float:
    """Regexp evaluations per lookup, counted through a wrapper around each search."""
    counter = [0]
    real = rules_mod._compile_re2

    def counting(pattern: str) -> Any:
        compiled = real(pattern)

        class Counted:
            def search(self, text: str, _search: Callable[[str], bool] = compiled.search) -> bool:
                counter[0] += 1
                return _search(text)

        return Counted()

    rules_mod._compile_re2 = counting
    try:
        counted = table([rule.text for _, rule, _, _ in tbl.entries])
    finally:
        rules_mod._compile_re2 = real
    for view in views:
        counted.match(view)
    return counter[0] / len(views)


def bench_regexp(args: argparse.Namespace) -> None:
    texts = regexp_rules(REGEXP_HOSTS)
    views = make_requests(REGEXP_HOSTS, random.Random(SEED))
    results: dict[str, float] = {}
    real = rules_mod._compile_re2
    for engine, compile_ in (("re2", real), ("re", _BacktrackingRegexp)):
        rules_mod._compile_re2 = compile_  # type: ignore[assignment]
        try:
            tbl = table(texts)
        finally:
            rules_mod._compile_re2 = real
        answers = [tbl.match(v) for v in views]
        assert all(a is not None for a in answers)
        elapsed = time_lookups(tbl, views, args.lookups, args.repeats)
        ns = results[engine] = elapsed / args.lookups * 1e9
        print(
            f"regexp {len(tbl):>6} routers, {engine:>3}: {args.lookups / elapsed:>12,.0f} lookups/s {ns:>8.1f} ns/lookup"
        )
    per_lookup = count_evaluations(table(texts), views)
    extra = (results["re2"] - results["re"]) / per_lookup
    print(
        f"regexp {per_lookup:.1f} regexp evaluations per lookup; RE2 costs "
        f"{results['re2'] / results['re']:.2f}x re per lookup, {extra:+.0f} ns per evaluation"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("hosts", "regexp"), help="run one measurement")
    parser.add_argument("--lookups", type=int, default=200_000, help="lookups per timed run")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the best counts")
    args = parser.parse_args(argv)
    if args.only in (None, "hosts"):
        bench_hosts(args)
    if args.only in (None, "regexp"):
        bench_regexp(args)


if __name__ == "__main__":
    main()
