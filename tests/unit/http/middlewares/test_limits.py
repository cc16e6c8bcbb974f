"""rateLimit and inFlightReq (edge.http.middlewares.limits) on Traefik's test tables:
pkg/middlewares/ratelimiter (rate_limiter_test.go: TestNewRateLimiter,
TestInMemoryRateLimit, the same configurations, loads and bounds, on a simulated
clock so a minute of load takes milliseconds and no slack for a slow machine is
needed), the 429 Traefik sends, the bound on buckets under made-up sources, and
inFlightReq's counting (oxy's connlimit)."""

from __future__ import annotations

import math

import msgspec
import pytest

from edge.config.durations import dec_hook
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import SourceCriterion
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward, Pipeline
from edge.http.middlewares.builtin import from_config
from edge.http.middlewares.limits import (
    InFlightReq,
    RateLimit,
    RedisRateLimit,
    TokenBuckets,
    max_delay,
    source,
)


def request(client_ip: str = "127.0.0.1", headers=(), host: bytes = b"localhost") -> Forward:
    head = RequestHead(
        b"GET", b"/", b"1.1", [(b"Host", host), *headers], True, False, None, False, False
    )
    return Forward(host.decode(), b"/", b"", b"GET", host, b"http", None, head, client_ip)


def build(config: dict):
    c = msgspec.convert({"rateLimit": config}, MiddlewareConfig, dec_hook=dec_hook)
    assert c.check() == []
    return from_config("rate-limiter", c)


# -- TestNewRateLimiter ---------------------------------------------------------------


def test_no_ratelimit_on_average_zero():
    """rate.Inf: nothing is limited, so the route's pipeline stays empty (express path)."""
    assert Pipeline([build({"average": 0, "burst": 10})]).empty


@pytest.mark.parametrize(
    ("config", "delay"),
    [
        ({"average": 200, "burst": 10}, 0.0025),
        ({"average": 2, "period": "10s", "burst": 10}, 0.5),
    ],
)
def test_max_delay_computation(config, delay):
    assert build(config).buckets.max_delay == delay


def test_default_source_matcher_is_remote_address():
    mw = build({"average": 200, "burst": 10})
    assert mw.source(request("127.0.0.1")) == "127.0.0.1"


def test_source_criterion_in_config_is_respected():
    mw = build({"average": 200, "burst": 10, "sourceCriterion": {"requestHeaderName": "Foo"}})
    assert mw.source(request(headers=[(b"foo", b"bar")])) == "bar"


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"sourceCriterion": {"ipStrategy": {}, "requestHeaderName": "Foo"}},
         "rateLimit.sourceCriterion.ipStrategy and requestHeaderName are mutually exclusive"),
        ({"sourceCriterion": {"ipStrategy": {}, "requestHost": True}},
         "rateLimit.sourceCriterion.ipStrategy and requestHost are mutually exclusive"),
        ({"sourceCriterion": {"requestHeaderName": "Foo", "requestHost": True}},
         "rateLimit.sourceCriterion.requestHost and requestHeaderName are mutually exclusive"),
        ({"average": -1}, "rateLimit.average: -1 is negative"),
        ({"average": 1, "period": "-1s"}, "rateLimit.period: -1s is negative"),
        ({"sourceCriterion": {"ipStrategy": {"depth": -2}}},
         "rateLimit.sourceCriterion.ipStrategy.depth: -2 is negative"),
        ({"sourceCriterion": {"requestHeaderName": "a b"}},
         "rateLimit.sourceCriterion.requestHeaderName: invalid header name"),
    ],
)  # fmt: skip
def test_bad_values_name_their_key(config, error):
    problems = msgspec.convert({"rateLimit": config}, MiddlewareConfig, dec_hook=dec_hook).check()
    assert len(problems) == 1 and problems[0].startswith(error), problems


def test_in_flight_req_checks():
    bad = msgspec.convert({"inFlightReq": {"amount": -1}}, MiddlewareConfig).check()
    assert bad == ["inFlightReq.amount: -1 is negative"]
    bad = msgspec.convert(
        {"inFlightReq": {"amount": 1, "sourceCriterion": {"ipStrategy": {"depth": -1}}}},
        MiddlewareConfig,
    ).check()
    assert bad == ["inFlightReq.sourceCriterion.ipStrategy.depth: -1 is negative (0: no depth)"]


# -- TestInMemoryRateLimit ------------------------------------------------------------


def served(config: dict, load: float, incoming: int, burst: int = 0) -> int:
    """Traefik's load loop on a simulated clock: a request per tick of ``incoming`` a
    second for ``load`` seconds (first ``burst`` let through as fast as they go), a
    held request waiting its delay as Traefik's handler sleeps; the requests served."""
    now = [0.0]
    c = msgspec.convert({"rateLimit": config}, MiddlewareConfig, dec_hook=dec_hook).rate_limit
    assert c is not None
    mw = RateLimit(
        "rate-limiter", c.average, c.period, c.burst, source(None, False), lambda: now[0]
    )
    period = 1.0 / incoming
    tick = period
    count = 0
    for _ in range(1_000_000):
        if now[0] > load:
            break
        fwd = request()
        if mw.request(fwd) is None:
            count += 1
            assert fwd.delay <= mw.buckets.max_delay + 1e-9
            now[0] += fwd.delay
        if burst and count < burst:
            now[0] += 1e-4  # hammering: as fast as they go
            continue
        if tick > now[0]:
            now[0] = tick
            tick += period
        else:  # a tick waits in the ticker's channel; the next comes on its schedule
            while tick <= now[0]:
                tick += period
    return count


@pytest.mark.parametrize(
    ("config", "load", "incoming", "burst"),
    [
        ({"average": 100, "burst": 1}, 2, 400, 0),  # Average is respected
        ({"average": 100, "burst": 100}, 2, 200, 0),  # burst allowed, no bursty traffic
        ({"average": 100, "burst": 100}, 2, 200, 50),  # initial burst, under capacity
        ({"average": 100, "burst": 100}, 2, 200, 150),  # initial burst, over capacity
        ({"average": 100, "burst": 200}, 2, 200, 300),  # burst over average, over capacity
        ({"average": 5, "period": "10s"}, 2, 100, 0),  # lower than 1/s
        ({"average": 5, "period": "10s"}, 60, 100, 0),  # lower than 1/s, longer
        ({"average": 1, "period": "1m"}, 60, 100, 0),  # lower than 1/s, longer, harsher
        ({"average": 50, "period": "500ms"}, 2, 300, 0),  # period below 1 second
    ],
)
def test_in_memory_rate_limit(config, load, incoming, burst):
    count = served(config, load, incoming, burst)
    period = (
        msgspec.convert(
            {"rateLimit": config}, MiddlewareConfig, dec_hook=dec_hook
        ).rate_limit.period
        or 1.0
    )
    rate = config["average"] / period
    want = int(rate * load) + max(config.get("burst", 1), 1)
    assert want * 95 // 100 <= count <= want * 102 // 100, (count, want)


def test_refused_requests_get_retry_after_as_traefik_sends_it():
    now = [10.0]
    mw = RateLimit("r", 1, 1.0, 1, source(None, False), lambda: now[0])
    assert mw.request(request()) is None
    now[0] += 0.25
    answer = mw.request(request())
    assert answer.status == 429 and answer.body == b"Too Many Requests"
    assert answer.lines == b"Retry-After: 1\r\nX-Retry-In: 750ms\r\n"
    now[0] += 0.1  # the refusal took nothing: the token comes at 11.0
    answer = mw.request(request())
    assert answer.lines == b"Retry-After: 1\r\nX-Retry-In: 650ms\r\n"
    now[0] += 0.5  # 0.15 s early: within maxDelay (0.5 s), held
    fwd = request()
    assert mw.request(fwd) is None and fwd.delay == pytest.approx(0.15)


def test_a_request_just_early_is_held_not_refused():
    now = [0.0]
    mw = RateLimit("r", 100, 1.0, 1, source(None, False), lambda: now[0])
    assert mw.request(request()) is None
    now[0] += 0.008  # the next token in 2 ms; maxDelay is 5 ms
    fwd = request()
    assert mw.request(fwd) is None and fwd.delay == pytest.approx(0.002)


def test_sources_have_buckets_of_their_own():
    now = [0.0]
    mw = RateLimit("r", 1, 1.0, 1, source(None, False), lambda: now[0])
    assert mw.request(request("127.0.0.2")) is None
    assert mw.request(request("127.0.0.2")).status == 429
    assert mw.request(request("127.0.0.3")) is None


def test_made_up_sources_cost_bounded_memory():
    """A spoofed X-Forwarded-For flood: every request a new source. Buckets stay at
    most the capacity, the least recently used forgotten first; an expired one goes."""
    buckets = TokenBuckets(1.0, 1, capacity=1000)
    buckets.reserve("steady", 0.0)
    for i in range(20_000):
        buckets.reserve(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", 0.5 + i * 1e-6)
        if i % 100 == 0:
            assert buckets.reserve("steady", 0.5 + i * 1e-6) > 0  # used: kept, and empty
        assert len(buckets) <= 1000
    assert "steady" in buckets.buckets
    assert buckets.reserve("late", 100.0) == 0.0
    assert len(buckets) == 1  # everything else had expired (ttl 2 s)


@pytest.mark.parametrize(("rate", "ttl"), [(100.0, 2.0), (1.0, 2.0), (0.5, 3.0), (1 / 60, 61.0)])
def test_bucket_ttl(rate, ttl):
    assert TokenBuckets(rate, 1).ttl == ttl


def test_max_delay():
    assert max_delay(200) == 0.0025
    assert max_delay(0.2) == 0.5
    assert max_delay(3.5) == pytest.approx(1 / 6, abs=1e-9)  # int(rate): 3


# -- inFlightReq ----------------------------------------------------------------------


def test_in_flight_req_counts_until_the_exchange_ends():
    c = msgspec.convert({"inFlightReq": {"amount": 2}}, MiddlewareConfig)
    assert c.check() == []
    mw = from_config("if", c)
    assert isinstance(mw, InFlightReq)
    held = [request(host=b"a.test:80") for _ in range(2)]
    for fwd in held:
        assert mw.request(fwd) is None
    refused = mw.request(request(host=b"a.test:80"))
    assert (refused.status, refused.body) == (429, b"max connections reached: 2")
    assert mw.request(request(host=b"b.test")) is None  # by Host (as sent), by default
    for end in held[0].ends:
        end()
    assert mw.request(request(host=b"a.test:80")) is None
    assert mw.counts == {"a.test:80": 2, "b.test": 1}


def test_in_flight_req_by_header_and_ip():
    by_ip = InFlightReq("if", 1, source(SourceCriterion(ip_strategy=None), by_host=False))
    assert by_ip.request(request("10.0.0.1")) is None
    assert by_ip.request(request("10.0.0.1")).status == 429
    assert by_ip.request(request("10.0.0.2")) is None
    by_header = InFlightReq("if", 1, source(SourceCriterion(request_header_name="X-User"), True))
    assert by_header.request(request(headers=[(b"x-user", b"a")])) is None
    assert by_header.request(request(headers=[(b"X-User", b"a")])).status == 429
    assert by_header.request(request(headers=[(b"X-User", b"b")])) is None


def test_amount_zero_refuses_everything_as_connlimit_does():
    mw = InFlightReq("if", 0, source(None, True))
    assert mw.request(request()).status == 429


# -- rateLimit.redis ------------------------------------------------------------------


def test_redis_builds_a_waiting_step_with_the_local_arithmetic():
    """The script gets the local bucket's numbers, made once: rate per microsecond,
    burst, ttl (ms) and maxDelay (us); the step waits (request_async), so the route
    takes the general path; keys are prefixed with the middleware's name."""
    mw = build({"average": 200, "burst": 10, "redis": {"endpoints": ["127.0.0.1:6390"], "db": 2}})
    assert isinstance(mw, RedisRateLimit)
    assert mw.args == (repr(200 / 1e6), 10, 2000, repr(0.0025 * 1e6))
    assert mw.max_delay == TokenBuckets(200, 10).max_delay
    assert mw.prefix == "edge:rate:rate-limiter:"
    pipeline = Pipeline([mw])
    assert pipeline.waits == (True,) and not pipeline.empty
    slow = build({"average": 2, "period": "10s", "redis": {}})
    assert slow.args[2:] == (6000, "500000.0")  # ttl 1 s + 1/rate; maxDelay 0.5 s
    assert slow.client.where == "middleware rate-limiter: redis localhost:6379"


def test_redis_client_takes_traefiks_timeouts_and_pool_keys():
    mw = build(
        {
            "average": 1,
            "redis": {
                "endpoints": ["[::1]:7000"],
                "username": "u",
                "password": "p",
                "poolSize": 8,
                "maxActiveConns": 3,
                "minIdleConns": 2,
                "readTimeout": "0s",
                "writeTimeout": "-1s",
                "dialTimeout": "0s",
            },
        }
    )
    c = mw.client
    assert (c.host, c.port, c.username, c.password) == ("::1", 7000, "u", "p")
    assert (c.max_conns, c.min_conns) == (3, 2)  # maxActiveConns caps poolSize
    assert c.read_timeout == c.write_timeout == math.inf  # <= 0: none, as in Traefik
    assert c.dial_timeout == 5.0  # 0: go-redis's default
    assert c.where.endswith("redis [::1]:7000")
    d = build({"average": 1, "redis": {}}).client
    assert (d.read_timeout, d.write_timeout, d.dial_timeout) == (3.0, 3.0, 5.0)
    assert not d.conns and d.loop is None  # built off the loop: nothing dialled yet


def test_redis_with_average_zero_limits_nothing():
    assert Pipeline([build({"average": 0, "redis": {"endpoints": ["r:1"]}})]).empty


@pytest.mark.parametrize(
    ("redis", "error"),
    [
        ({"endpoints": ["a:1", "b:2"]}, "rateLimit.redis.endpoints: 2 given; edge speaks to one"),
        ({"endpoints": []}, "rateLimit.redis.endpoints: 0 given"),
        ({"endpoints": ["nohost"]}, "rateLimit.redis.endpoints[0]: invalid address 'nohost'"),
        ({"db": -1}, "rateLimit.redis.db: -1 is negative"),
        ({"poolSize": -1}, "rateLimit.redis.poolSize: -1 is negative"),
        ({"tls": {"cert": "/x.pem"}}, "rateLimit.redis.tls.cert, key: both must be set"),
        ({"tls": {"ca": "/no/such/ca.pem"}}, "rateLimit.redis.tls.ca /no/such/ca.pem: no such file"),
    ],
)  # fmt: skip
def test_redis_bad_values_name_their_key(redis, error):
    problems = msgspec.convert(
        {"rateLimit": {"average": 1, "redis": redis}}, MiddlewareConfig, dec_hook=dec_hook
    ).check()
    assert len(problems) == 1 and problems[0].startswith(error), problems
