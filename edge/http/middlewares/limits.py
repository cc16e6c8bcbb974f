"""How much one source may ask: Traefik v3's ``rateLimit`` (pkg/middlewares/ratelimiter,
in memory) and ``inFlightReq`` (pkg/middlewares/inflightreq, oxy's connlimit).

A *source* is what a ``sourceCriterion`` names (:func:`source`): the client address
an ``ipStrategy`` picks (:mod:`.access`), the value of a request header, or the Host
as sent. ``rateLimit`` groups by the peer's address when none is set, ``inFlightReq``
by the Host, as Traefik does.

``rateLimit`` is Go's ``x/time/rate`` token bucket per source: ``average / period``
tokens a second, at most ``burst`` kept, one per request. A request finding no token
is let through after the wait for the next one when that wait is at most
``maxDelay`` (half the interval between two tokens, 0.5 s below one token a second;
the exchange holds it meanwhile: :attr:`Forward.delay`), else answered 429 with
``Retry-After`` (whole seconds, rounded up) and ``X-Retry-In`` (Go's duration text)
and takes nothing. Buckets are kept per source while used: one untouched for a
``ttl`` (2 s, or 1 s plus a token's interval below one a second) is forgotten (a new
one starts full), and at most :data:`MAX_SOURCES` are kept, the least recently used
forgotten first, so a flood of made-up sources (a spoofed X-Forwarded-For) costs
bounded memory.

``inFlightReq`` counts each source's requests from the pipeline's step to the end
of their exchange (:meth:`Forward.on_end`: answered, failed upstream, or the client
gone); at ``amount`` the next is answered 429 ``max connections reached: <amount>``.
Only sources with requests in flight are kept.

Invariants: built once per configuration (a reload starts new buckets and counts; an
exchange admitted before it gives its slot back to the count that admitted it); the
clock is read once per request; time is a parameter of the bucket arithmetic, so it
is tested without waiting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from edge.config.durations import go_duration
from edge.config.dynamic import SourceCriterion
from edge.http.codec.forward import reason
from edge.http.middlewares import Answer, Forward, Middleware
from edge.http.middlewares.access import Strategy, ip_strategy

__all__ = [
    "MAX_SOURCES",
    "InFlightReq",
    "RateLimit",
    "TokenBuckets",
    "go_duration",
    "max_delay",
    "source",
]

MAX_SOURCES = 65536
"""Token buckets kept per rateLimit at most (Traefik's ``maxSources``)."""

_FORWARDED = frozenset(
    (
        b"x-forwarded-for",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-proto",
        b"x-forwarded-server",
        b"x-forwarded-uri",
        b"x-forwarded-method",
        b"x-forwarded-prefix",
        b"x-forwarded-tls-client-cert",
        b"x-forwarded-tls-client-cert-info",
        b"x-real-ip",
    )
)


def source(criterion: SourceCriterion | None, by_host: bool) -> Strategy:
    """What names a request's source under ``criterion`` (checked: at most one kind);
    with none set, the Host (``by_host``, inFlightReq's default) or the peer's address."""
    if criterion is not None and criterion.request_header_name:
        return _header(criterion.request_header_name.encode("latin-1").lower())
    if criterion is not None and criterion.request_host:
        return _host
    if criterion is not None and criterion.ip_strategy is not None:
        return ip_strategy(criterion.ip_strategy)
    return _host if by_host else ip_strategy(None)


def _host(fwd: Forward) -> str:
    return fwd.authority.decode("latin-1")  # Go's req.Host: as sent, port included


def _header(lname: bytes) -> Strategy:
    """The header's first value as the middleware sees it: a value an earlier step set
    wins (an empty one removed it); an X-Forwarded-* header of a client the entrypoint
    does not trust is absent, as Traefik deletes those before any middleware."""
    forwarded = lname in _FORWARDED

    def value(fwd: Forward) -> str:
        if fwd.headers is not None:
            for name, v in reversed(fwd.headers):
                if name.lower() == lname:
                    return v.decode("latin-1")
        head = fwd.trusted_head if forwarded else fwd.head
        if head is not None:
            for name, v in head.headers:
                if len(name) == len(lname) and name.lower() == lname:
                    return v.decode("latin-1")
        return ""

    return value


def max_delay(rate: float) -> float:
    """Traefik's ``maxDelay`` for ``rate`` tokens a second: the longest wait a request
    is held for rather than refused (0.5 s below one token a second, else half the
    interval of the whole-number rate, in nanoseconds as Go divides)."""
    if rate < 1:
        return 0.5
    return (1_000_000_000 // (int(rate) * 2)) / 1e9


def bucket_ttl(rate: float) -> float:
    """Seconds an unused bucket is kept (Traefik's ``ttl``)."""
    if rate >= 1:
        return 2.0
    return 1.0 + int(1 / rate)


class TokenBuckets:
    """A token bucket per source (``x/time/rate``'s ``Limiter``: ``rate`` tokens a
    second, ``burst`` at most), kept while used and at most ``capacity`` of them."""

    __slots__ = ("buckets", "burst", "capacity", "max_delay", "rate", "ttl")

    def __init__(self, rate: float, burst: int, capacity: int = MAX_SOURCES) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.max_delay = max_delay(rate)
        self.ttl = bucket_ttl(rate)
        self.capacity = capacity
        # source -> [tokens, time of the last update]; in the order of last use, so
        # the first entry is the one closest to expiring.
        self.buckets: dict[str, list[float]] = {}

    def reserve(self, key: str, now: float) -> float:
        """Take a token for a request of ``key`` at ``now``: the seconds it must wait
        for it, 0.0 for none. A wait over :attr:`max_delay` takes nothing: the
        request is refused (Go's ``Reservation.Cancel`` right away)."""
        buckets = self.buckets
        bucket = buckets.pop(key, None)
        if bucket is None or bucket[1] + self.ttl <= now:
            bucket = [self.burst, now]
            self._make_room(now)
        tokens = bucket[0] + max(now - bucket[1], 0.0) * self.rate
        if tokens > self.burst:
            tokens = self.burst
        bucket[1] = now
        wait = 0.0
        if tokens < 1.0:
            wait = (1.0 - tokens) / self.rate
            if wait - self.max_delay > 1e-9:  # Go compares whole nanoseconds
                bucket[0] = tokens
                buckets[key] = bucket
                return wait
        bucket[0] = tokens - 1.0
        buckets[key] = bucket
        return wait

    def _make_room(self, now: float) -> None:
        """Before a new source: forget the expired buckets at the front, then the least
        recently used while there are ``capacity``."""
        buckets = self.buckets
        ttl = self.ttl
        while buckets:
            first = next(iter(buckets))
            if buckets[first][1] + ttl <= now or len(buckets) >= self.capacity:
                del buckets[first]
            else:
                break

    def __len__(self) -> int:
        return len(self.buckets)


class RateLimit(Middleware):
    """Traefik's ``rateLimit`` in memory (module doc); ``average`` 0 is built as a
    middleware that does nothing (:func:`rate_limit`)."""

    __slots__ = ("buckets", "clock", "source")

    def __init__(
        self,
        name: str,
        average: int,
        period: float,
        burst: int,
        source: Strategy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name)
        rate = average / (period or 1.0)
        self.buckets = TokenBuckets(rate, max(burst, 1))
        self.source = source
        self.clock = clock

    def request(self, fwd: Forward) -> Answer | None:
        wait = self.buckets.reserve(self.source(fwd), self.clock())
        if wait == 0.0:
            return None
        if wait - self.buckets.max_delay <= 1e-9:
            if wait > fwd.delay:
                fwd.delay = wait
            return None
        ns = int(wait * 1e9)
        return Answer(
            429,
            b"Retry-After: %d\r\nX-Retry-In: %s\r\n"
            % (math.ceil(ns / 1e9), go_duration(ns).encode()),
            reason(429),
        )


def rate_limit(
    name: str, average: int, period: float, burst: int, criterion: SourceCriterion | None
) -> Middleware:
    """The rateLimit ``average``/``period``/``burst``/``criterion`` describe (checked)."""
    if average == 0:
        return Middleware(name)  # Traefik's rate.Inf: every request passes at once
    return RateLimit(name, average, period, burst, source(criterion, by_host=False))


class InFlightReq(Middleware):
    """Traefik's ``inFlightReq`` (module doc)."""

    __slots__ = ("amount", "counts", "refusal", "source")

    def __init__(self, name: str, amount: int, source: Strategy) -> None:
        super().__init__(name)
        self.amount = amount
        self.source = source
        self.counts: dict[str, int] = {}  # source -> requests in flight (none: absent)
        self.refusal = Answer(429, b"", b"max connections reached: %d" % amount)

    def request(self, fwd: Forward) -> Answer | None:
        key = self.source(fwd)
        counts = self.counts
        n = counts.get(key, 0)
        if n >= self.amount:
            return self.refusal
        counts[key] = n + 1
        fwd.on_end(lambda: self._release(key))
        return None

    def _release(self, key: str) -> None:
        counts = self.counts
        n = counts.get(key, 0) - 1
        if n > 0:
            counts[key] = n
        else:
            counts.pop(key, None)
