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

``rateLimit.redis`` keeps the buckets in Redis instead (:class:`RedisRateLimit`), so
every edge node and worker using that server enforces one limit together, as
Traefik 3.4's redis limiter does: the same arithmetic, on the server, in one Lua
script per request (:data:`TOKEN_BUCKET`: atomic, so two nodes never take the
same token), on Redis's clock (``TIME``: nodes' clocks may differ, the server's is
one), the bucket a hash under ``edge:rate:<middleware>:<source>`` that expires
after the same ``ttl`` unused. The request waits for Redis's answer (the
pipeline's waiting step) within the client's timeouts (:mod:`.redis`); while Redis
cannot answer (refused, unreachable, late, an error reply) ``failOpen`` decides:
false (the default, as Traefik) answers 500 ``Could not insert/update bucket``,
true serves the request unlimited; the outage is logged once, when it starts.

``inFlightReq`` counts each source's requests from the pipeline's step to the end
of their exchange (:meth:`Forward.on_end`: answered, failed upstream, or the client
gone); at ``amount`` the next is answered 429 ``max connections reached: <amount>``.
Only sources with requests in flight are kept. It counts in memory only, as Traefik
does: a count shared in Redis (INCR/DECR, a TTL against crashed nodes) cannot tell
a crashed node's slots from a long request's, and leases renewed per request
would cost more round trips than the limit saves.

Invariants: built once per configuration (a reload starts new buckets and counts in
memory, while Redis's, named by the middleware, go on; an exchange admitted before
it gives its slot back to the count that admitted it); the
clock is read once per request; time is a parameter of the bucket arithmetic, so it
is tested without waiting.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

from edge.config.durations import go_duration
from edge.config.dynamic import ClientCertificate, Redis, SourceCriterion, split_host_port
from edge.config.runtime.tls import client_tls_context
from edge.http.codec.forward import reason
from edge.http.middlewares import Answer, Forward, Middleware
from edge.http.middlewares.access import Strategy, ip_strategy
from edge.http.middlewares.redis import (
    RedisClient,
    RedisUnavailable,
    ReplyError,
    Script,
    ScriptCall,
)

__all__ = [
    "MAX_SOURCES",
    "REDIS_PREFIX",
    "TOKEN_BUCKET",
    "InFlightReq",
    "RateLimit",
    "RedisRateLimit",
    "TokenBuckets",
    "go_duration",
    "max_delay",
    "source",
]

MAX_SOURCES = 65536
"""Token buckets kept per rateLimit at most (Traefik's ``maxSources``)."""

log = logging.getLogger("edge.http.middlewares")

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
        return too_many(int(wait * 1e9))


def too_many(ns: int) -> Answer:
    """The 429 for a request whose token comes in ``ns`` nanoseconds (Traefik's)."""
    return Answer(
        429,
        b"Retry-After: %d\r\nX-Retry-In: %s\r\n" % (math.ceil(ns / 1e9), go_duration(ns).encode()),
        reason(429),
    )


REDIS_PREFIX = "edge:rate:"
"""The prefix of every key edge writes in Redis (then the middleware's name)."""

TOKEN_BUCKET = Script(
    """
-- One request of one source: TokenBuckets.reserve on the server, atomically.
-- KEYS[1]: the bucket (a hash: tokens, last). ARGV: rate (tokens a microsecond),
-- burst, ttl (ms), max_delay (us). Returns {taken (1/0), wait (us, rounded up)}.
redis.replicate_commands()  -- TIME before a write (Redis < 5; a no-op since)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tokens = burst
local state = redis.call('HMGET', KEYS[1], 'tokens', 'last')
if state[1] then
  tokens = tonumber(state[1])
  local last = tonumber(state[2])
  if now > last then
    tokens = tokens + (now - last) * rate
  end
  if tokens > burst then
    tokens = burst
  end
end
local wait, taken = 0, 1
if tokens < 1 then
  wait = (1 - tokens) / rate
  if wait - tonumber(ARGV[4]) > 0.001 then  -- over maxDelay: refused, nothing taken
    taken = 0
  end
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens - taken),
  'last', string.format('%.17g', now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {taken, math.ceil(wait)}
"""
)
"""The token bucket in Redis (module doc); the same steps as :meth:`TokenBuckets.reserve`."""

UNAVAILABLE = Answer(500, body=b"Could not insert/update bucket")
"""Traefik's answer when its limiter cannot reach Redis (``failOpen`` false)."""


class RedisRateLimit(Middleware):
    """Traefik's ``rateLimit`` with ``redis`` (module doc): a waiting step."""

    __slots__ = (
        "args",
        "call",
        "client",
        "fail_open",
        "failure",
        "max_delay",
        "prefix",
        "source",
    )

    def __init__(
        self,
        name: str,
        average: int,
        period: float,
        burst: int,
        source: Strategy,
        client: RedisClient,
        fail_open: bool = False,
    ) -> None:
        super().__init__(name)
        rate = average / (period or 1.0)
        self.max_delay = max_delay(rate)
        # The script's arguments, made once: rate per microsecond, burst, ttl (ms),
        # maxDelay (us).
        self.args = (
            repr(rate / 1e6),
            max(burst, 1),
            round(bucket_ttl(rate) * 1000),
            repr(self.max_delay * 1e6),
        )
        self.call = ScriptCall(TOKEN_BUCKET, self.args)
        self.prefix = f"{REDIS_PREFIX}{name}:"
        self.source = source
        self.client = client
        self.fail_open = fail_open
        self.failure = ""  # the last error reply logged (each logged once in a row)

    async def request_async(self, fwd: Forward) -> Answer | None:
        try:
            reply = await self.client.run(self.call, (self.prefix + self.source(fwd)).encode())
            taken, wait_us = reply  # type: ignore[misc]
        except RedisUnavailable:  # logged by the client, once an outage
            return None if self.fail_open else UNAVAILABLE
        except (ReplyError, TypeError, ValueError) as exc:  # an error reply, or not the script's
            text = str(exc)
            if text != self.failure:
                self.failure = text
                log.warning("middleware %s: %s: %s", self.name, self.client.where, text)
            return None if self.fail_open else UNAVAILABLE
        if not taken:
            return too_many(int(wait_us) * 1000)
        if wait_us:
            wait = int(wait_us) / 1e6
            if wait > fwd.delay:
                fwd.delay = wait
        return None


def redis_client(name: str, redis: Redis) -> RedisClient:
    """The client of ``rateLimit.redis`` (checked by the model), for middleware ``name``."""
    host, port = split_host_port(redis.endpoints[0])
    context = None
    if redis.tls is not None:
        t = redis.tls
        context = client_tls_context(
            insecure_skip_verify=t.insecure_skip_verify,
            root_cas=[t.ca] if t.ca else [],
            certificates=[ClientCertificate(cert_file=t.cert, key_file=t.key)] if t.cert else [],
        )
    caps = [n for n in (redis.max_active_conns, redis.pool_size) if n > 0]
    return RedisClient(
        host or "localhost",
        port,
        username=redis.username,
        password=redis.password,
        db=redis.db,
        ssl_context=context,
        max_conns=min(caps) if caps else 10 * (os.cpu_count() or 1),  # go-redis's default
        min_conns=redis.min_idle_conns,
        dial_timeout=redis.dial_timeout if redis.dial_timeout > 0 else 5.0,
        read_timeout=redis.read_timeout if redis.read_timeout > 0 else math.inf,
        write_timeout=redis.write_timeout if redis.write_timeout > 0 else math.inf,
        owner=f"middleware {name}",
        outage="requests served unlimited" if redis.fail_open else "requests answered 500",
    )


def rate_limit(
    name: str,
    average: int,
    period: float,
    burst: int,
    criterion: SourceCriterion | None,
    redis: Redis | None = None,
) -> Middleware:
    """The rateLimit ``average``/``period``/``burst``/``criterion`` describe (checked),
    its buckets in ``redis`` when set."""
    if average == 0:
        return Middleware(name)  # Traefik's rate.Inf: every request passes at once
    strategy = source(criterion, by_host=False)
    if redis is not None:
        client = redis_client(name, redis)
        return RedisRateLimit(name, average, period, burst, strategy, client, redis.fail_open)
    return RateLimit(name, average, period, burst, strategy)


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
