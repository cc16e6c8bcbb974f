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

:class:`HighestRandomWeight` (Traefik's ``highestRandomWeight``): rendezvous hashing.
A key (the client's address) and each member's name hash together (64 bits, read as
a fraction ``h`` of 2^64) into the score ``weight / -ln(h)``, Traefik's formula; the
highest score wins. The same key gets the same member while the members stay, a
member added or removed moves only the keys it wins or had, and a member's share of
keys is its share of the total weight. Pure: no state changes with a pick.

The hash is Traefik's FNV-1a of key and name, then splitmix64's finalizer. FNV-1a
alone (Traefik's) hardly moves its top bits for names that differ in their last bytes
(``appv1``, ``appv2``, Traefik's own example): their ``h`` are nearly equal for every
key, so the heavier member took every key and weights meant nothing. The finalizer
spreads each bit over all 64, so shares follow weights whatever the names; a client
lands on another member than under Traefik, once, where a migration moves it.
"""

from __future__ import annotations

import math
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


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a_64(data: bytes) -> int:
    """FNV-1a, 64 bits (Go's ``hash/fnv.New64a``)."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def mix64(h: int) -> int:
    """splitmix64's finalizer: every input bit moves about half the output bits."""
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK
    return h ^ (h >> 31)


class HighestRandomWeight(Generic[T]):
    """Rendezvous hashing over ``(member, name, weight)`` (see the module doc): each key
    ranks the members, the same way every time. Members with weight 0 are never
    ranked. A key's ranking is remembered (up to :attr:`REMEMBERED` keys, then they are
    all forgotten), so a client's later requests cost a dict lookup."""

    __slots__ = ("_members", "_ranked")

    REMEMBERED = 4096

    def __init__(self, members: Sequence[tuple[T, str, int]]) -> None:
        self._members = [(m, name.encode(), w) for m, name, w in members if w > 0]
        self._ranked: dict[str, tuple[T, ...]] = {}

    def __len__(self) -> int:
        return len(self._members)

    @staticmethod
    def score(key: bytes, name: bytes, weight: int) -> float:
        """``name``'s score for ``key``: ``weight / -ln(h)``, 0 for h = 0 and -inf where
        ``h`` rounds to 1, as Go's arithmetic makes them."""
        h = mix64(fnv1a_64(key + name)) / 2.0**64
        if h <= 0.0:
            return 0.0
        if h >= 1.0:
            return -math.inf
        return weight / -math.log(h)

    def ranked(self, key: str) -> tuple[T, ...]:
        """The members, best first, for ``key``."""
        ranked = self._ranked.get(key)
        if ranked is None:
            raw = key.encode()
            scored = sorted(
                ((self.score(raw, name, w), i) for i, (_, name, w) in enumerate(self._members)),
                key=lambda si: (-si[0], si[1]),
            )
            ranked = tuple(self._members[i][0] for _, i in scored)
            if len(self._ranked) >= self.REMEMBERED:
                self._ranked.clear()
            self._ranked[key] = ranked
        return ranked

    def pick(self, key: str) -> T | None:
        """The member ``key`` ranks first; None without members."""
        ranked = self.ranked(key)
        return ranked[0] if ranked else None
