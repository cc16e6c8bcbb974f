"""Load-balancing strategies over a snapshot's members: smooth weighted round robin
(the nginx algorithm, edge's default) and the power of two random choices.

:class:`SmoothWeightedRoundRobin`: each pick adds every member's weight to its running score, takes the member with
the highest score (the first one on ties, so the sequence depends only on the
weights and their order) and subtracts the total from it. Over any window of
``sum(weights)`` picks every member is chosen exactly ``weight`` times, spread
out rather than in bursts. Members with weight 0 are never picked.

The running scores are the only mutable state; a balancer belongs to one router
snapshot and is rebuilt with it.

:class:`PowerOfTwoChoices` (Traefik's ``p2c``): each pick draws two distinct members at
random among those up and takes the one with fewer requests in flight (the first
drawn on a tie). The load is the caller's to count: the balancer only reads it.
As in Traefik, weights play no part (a server of weight 0 is drawn like any other).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class SmoothWeightedRoundRobin(Generic[T]):
    __slots__ = ("_current", "_members", "_total", "_weights", "single")

    def __init__(self, members: Sequence[tuple[T, int]]) -> None:
        live = [(m, w) for m, w in members if w > 0]
        self._members: list[T] = [m for m, _ in live]
        self._weights: list[int] = [w for _, w in live]
        self._current: list[int] = [0] * len(live)
        self._total = sum(self._weights)
        # One member (the common case) needs no arithmetic at all.
        self.single: T | None = self._members[0] if len(live) == 1 else None

    def __len__(self) -> int:
        return len(self._members)

    def inherit(self, old: SmoothWeightedRoundRobin[T], key) -> None:
        """Take over ``old``'s running scores for the members both have (same ``key(member)``),
        so a changed member list does not restart the rotation."""
        scores = {key(m): c for m, c in zip(old._members, old._current, strict=True)}
        for i, member in enumerate(self._members):
            score = scores.get(key(member))
            if score is not None:
                self._current[i] = score

    def pick(self) -> T | None:
        """The next member, or None when there is none with a positive weight."""
        if self.single is not None:
            return self.single
        members = self._members
        if not members:
            return None
        current = self._current
        weights = self._weights
        best = 0
        best_score = None
        for i in range(len(members)):
            score = current[i] + weights[i]
            current[i] = score
            if best_score is None or score > best_score:
                best = i
                best_score = score
        current[best] -= self._total
        return members[best]


class PowerOfTwoChoices(Generic[T]):
    """Two random members, the less loaded one (see the module doc).

    ``rng`` draws the members (a seeded ``random.Random`` makes the picks repeatable);
    ``load(member)`` is its number of requests in flight, ``up(member)`` whether it
    may serve (None: every member may).
    """

    __slots__ = ("_members", "_rng", "single")

    def __init__(self, members: Sequence[T], rng: random.Random | None = None) -> None:
        self._members: list[T] = list(members)
        self._rng = rng if rng is not None else random.Random()
        self.single: T | None = self._members[0] if len(self._members) == 1 else None

    def __len__(self) -> int:
        return len(self._members)

    def pick(self, load: Callable[[T], int], up: Callable[[T], bool] | None = None) -> T | None:
        """The chosen member, or None when no member is up."""
        members = self._members
        if up is not None:
            members = [m for m in members if up(m)]
        n = len(members)
        if n < 2:
            return members[0] if n else None
        randrange = self._rng.randrange
        first = randrange(n)
        # A second draw among the others: never the same member twice.
        second = randrange(n - 1)
        if second >= first:
            second += 1
        a, b = members[first], members[second]
        return b if load(b) < load(a) else a
