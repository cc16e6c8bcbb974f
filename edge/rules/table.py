"""The route table: routes in priority order, indexed by host (or SNI), so the first
matching route is found without scanning every route.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from edge.rules.hosts import wildcard_of
from edge.rules.nodes import Match
from edge.rules.rule import Rule

T = TypeVar("T")


class RouteTable(Generic[T]):
    """Routes in priority order, indexed by host so lookup cost does not grow with hosts.

    Order: priority descending, then name ascending, then input order. ``match`` returns
    the value of the first entry in that order whose rule matches, exactly as a linear scan
    would, but only looks at entries that can match the request's host.

    Index: for each key named by some rule's ``hosts`` (a host, or a ``*.suffix``
    wildcard), a pre-merged tuple of that key's entries (for a host, those of the
    wildcard covering it too) and the host-agnostic entries ranked above the last of
    them, followed by a shared tail of the remaining host-agnostic entries (so memory
    stays near hosts + entries, not hosts x host-agnostic entries). A request for a host
    with no key of its own uses its wildcard's; any other scans only the host-agnostic
    entries. All sorting and merging happen here.
    """

    __slots__ = ("_agnostic", "_index", "_use_sni", "_wild", "by_host", "entries")

    def __init__(self, entries: Iterable[tuple[str, Rule, int, T]]) -> None:
        items = list(entries)
        kinds = {rule.kind for _, rule, _, _ in items}
        if len(kinds) > 1:
            raise ValueError(f"a RouteTable holds rules of one kind, got {sorted(kinds)}")
        self._use_sni = kinds == {"tcp"}
        order = sorted(range(len(items)), key=lambda i: (-items[i][2], items[i][0], i))
        ordered = [items[i] for i in order]
        self.entries: tuple[tuple[str, Rule, int, T], ...] = tuple(ordered)

        # Host-agnostic entries are checked in full; host entries found through the index
        # skip their top-level Host conjuncts, which the index lookup already satisfied.
        pairs = [(rule._indexed_match, value) for _, rule, _, value in ordered]
        host_only = [rule.host_only for _, rule, _, _ in ordered]
        agnostic_ranks: list[int] = []
        key_ranks: dict[str, list[int]] = {}
        for rank, (_, rule, _, _) in enumerate(ordered):
            if rule.hosts is None:
                agnostic_ranks.append(rank)
            else:  # an empty set (contradictory hosts) can never match: indexed nowhere
                for key in rule.hosts:
                    key_ranks.setdefault(key, []).append(rank)
        self._wild = any(key.startswith("*.") for key in key_ranks)

        agnostic = tuple(pairs[r] for r in agnostic_ranks)
        self._agnostic: tuple[tuple[Match, T], ...] = agnostic
        tails: dict[int, tuple[tuple[Match, T], ...]] = {0: agnostic}
        index: dict[str, tuple[tuple[tuple[Match, T], ...], tuple[tuple[Match, T], ...]]] = {}
        # Hosts whose answer the host alone decides: their first candidate has
        # nothing left to check once the index found it (see ``match_host``).
        by_host: dict[str, T] = {}
        for key, own in key_ranks.items():  # each ``own`` is in rank order
            wildcard = wildcard_of(key) if self._wild and not key.startswith("*") else None
            ranks = sorted(set(own) | set(key_ranks[wildcard])) if wildcard in key_ranks else own
            # Host-agnostic entries ranked above this key's last entry are interleaved;
            # the rest follow as a tail shared by every key with the same cut.
            cut = bisect_left(agnostic_ranks, ranks[-1])
            merged = sorted(ranks + agnostic_ranks[:cut]) if cut else ranks
            if host_only[merged[0]]:
                by_host[key] = ordered[merged[0]][3]
            tail = tails.get(cut)
            if tail is None:
                tail = tails[cut] = agnostic[cut:]
            index[key] = (tuple(pairs[r] for r in merged), tail)
        self._index = index
        self.by_host = by_host

    def match_host(self, host: str) -> T | None:
        """The answer for any request to ``host``, when the host alone decides it.

        None means "look at the whole request" (:meth:`match`), not "no route".
        Lets the server skip building a request view for the common rule.
        """
        return self.by_host.get(host)

    def match(self, req: Any) -> T | None:
        key = req.sni if self._use_sni else req.host
        slot = self._index.get(key)
        if slot is None and self._wild:
            wildcard = wildcard_of(key)
            if wildcard is not None:
                slot = self._index.get(wildcard)
        if slot is not None:
            head, tail = slot
            for fn, value in head:
                if fn(req):
                    return value
        else:
            tail = self._agnostic
        for fn, value in tail:
            if fn(req):
                return value
        return None

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"RouteTable({len(self.entries)} entries, {len(self._index)} indexed keys)"
