"""retry's policy: what it hands the request, whether a try goes again (a network
failure, a status, the timeout), what body it holds, and Traefik's backoff."""

from __future__ import annotations

import msgspec
import pytest

from edge.config.durations import dec_hook
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import Retry as RetryConfig
from edge.http.codec import RequestHead
from edge.http.middlewares import Forward, Pipeline
from edge.http.middlewares.retry import DEFAULT_MAX_BODY, Retry, replayable, retry


def test_the_policy_goes_with_the_request_when_a_retry_is_possible():
    fwd = Forward("a.test", b"/", b"")
    Retry("r", 3).request(fwd)
    assert fwd.retry is not None and fwd.retry.attempts == 3
    once = Forward("a.test", b"/", b"")
    Retry("r", 1).request(once)
    assert once.retry is None  # one try: nothing to retry
    assert Pipeline([Retry("r", 3)]).steps  # a step of its pipeline


def test_attempts_below_one_cannot_be_built():
    with pytest.raises(ValueError, match=r"middleware r: retry\.attempts"):
        Retry("r", 0)


@pytest.mark.parametrize(
    ("attempts", "interval", "waits"),
    [
        # The multiplier makes the last wait twice the first: 2 ** (1 / (attempts - 1)).
        (3, 0.1, [0.1, 0.1 * 2**0.5]),
        (5, 0.2, [0.2, 0.2 * 2**0.25, 0.2 * 2**0.5, 0.2 * 2**0.75]),
        (2, 1.0, [1.0]),
    ],
)
def test_the_backoff_grows_to_twice_the_initial_interval(attempts, interval, waits):
    r = Retry("r", attempts, interval)
    middle = [r.backoff(attempt, rand=0.5) for attempt in range(2, attempts + 1)]
    assert middle == pytest.approx(waits)
    # Randomised by half the interval either way, as cenkalti/backoff does.
    assert r.backoff(2, rand=0.0) == pytest.approx(interval * 0.5)
    assert r.backoff(2, rand=0.999999) == pytest.approx(interval * 1.5, rel=1e-5)


def test_no_interval_no_wait():
    assert Retry("r", 4).backoff(2) == 0.0
    assert Retry("r", 4, -1.0).backoff(3) == 0.0


def test_the_wait_is_capped_at_a_minute():
    assert Retry("r", 2, 100.0).backoff(2, rand=0.5) == 60.0


# -- Traefik 3.7's keys: status, timeout, maxRequestBodyBytes, disableRetryOnNetworkError,
# retryNonIdempotentMethod (the exchange asks again() after each try that went wrong).


def _policy(**config: object) -> Retry:
    return retry("r", msgspec.convert({"attempts": 3, **config}, RetryConfig, dec_hook=dec_hook))


def _again(r: Retry, tries=1, elapsed=0.0, status=502, sent=None, safe=True, streamed=False):
    return r.again(tries, elapsed, status, sent, safe, streamed)


def test_a_network_failure_goes_again_as_before_and_not_once_disabled():
    r = _policy()
    assert _again(r, sent=False, safe=False, streamed=True) == 0.0  # a dial sent nothing
    assert _again(r, sent=True) == 0.0  # replayable, no body lost
    assert _again(r, sent=True, safe=False) is None  # may have acted on it
    assert _again(r, sent=True, streamed=True) is None  # its body is gone
    assert _again(r, sent=None, status=504) is None  # a timeout: no network failure
    assert _again(r, tries=3, sent=False) is None  # the last try's answer goes
    assert r.retries == 2
    off = _policy(disableRetryOnNetworkError=True, status=["503"])
    assert _again(off, sent=False) is None and _again(off, sent=True) is None


def test_a_status_goes_again_when_the_request_may_go_twice():
    r = _policy(status=["500-502", "429"])
    assert _again(r, status=500) == 0.0 and _again(r, status=429) == 0.0
    assert _again(r, status=503) is None and _again(r, status=200) is None
    assert _again(r, status=500, safe=False) is None  # a POST, without the key
    assert _again(r, status=500, streamed=True) is None  # a body edge did not hold
    assert _again(r, status=500, tries=3) is None
    every = _policy(status=["500"], retryNonIdempotentMethod=True)
    assert _again(every, status=500, safe=False) == 0.0
    # edge's own 502 for a failure retries by status when the network retry does not:
    # Traefik's status check sees the 502 its proxy writes.
    statuses = _policy(status=["502"], disableRetryOnNetworkError=True)
    assert _again(statuses, sent=True, safe=True, status=502) == 0.0
    assert _again(statuses, sent=True, safe=False, status=502) is None


def test_the_timeout_bounds_when_another_try_may_start():
    r = _policy(status=["503"], timeout="1s")
    assert _again(r, status=503, elapsed=0.99) == 0.0
    assert _again(r, status=503, elapsed=1.0) is None
    assert _again(r, sent=False, elapsed=1.5) is None  # network failures too
    assert _again(_policy(status=["503"]), status=503, elapsed=3600.0) == 0.0  # 0: no bound


def _head(method: bytes, length: int | None, chunked: bool = False, headers=()) -> RequestHead:
    return RequestHead(method, b"/", b"1.1", list(headers), True, chunked, length, False, False)


def _held(r: Retry, head: RequestHead) -> bool:
    fwd = Forward("a.test", b"/", b"", head.method, head=head)
    assert r.request(fwd) is None and fwd.retry is r
    return fwd.spool is not None


def test_a_body_is_held_only_where_a_status_may_send_it_again():
    r = _policy(status=["503"], maxRequestBodyBytes=10)
    assert _held(r, _head(b"GET", 10))
    assert not _held(r, _head(b"GET", 11))  # over maxRequestBodyBytes: streamed
    assert not _held(r, _head(b"GET", None, chunked=True))  # its length unknown
    assert not _held(r, _head(b"GET", None)) and not _held(r, _head(b"GET", 0))
    assert not _held(r, _head(b"POST", 5))  # never retried by status
    assert _held(r, _head(b"POST", 5, headers=[(b"Idempotency-Key", b"k")]))
    assert _held(_policy(status=["503"], retryNonIdempotentMethod=True), _head(b"POST", 5))
    assert not _held(_policy(), _head(b"GET", 5))  # no status: nothing to hold for
    unlimited = _policy(status=["503"], maxRequestBodyBytes=-1)
    assert _held(unlimited, _head(b"PUT", 10**9, headers=[(b"X-Idempotency-Key", b"k")]))


def test_the_default_body_limit_is_traefiks_two_mebibytes():
    assert RetryConfig(attempts=2).max_request_body_bytes == DEFAULT_MAX_BODY == 2 * 1024 * 1024


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"attempts": 2, "status": ["5xx"]}, "retry.status[0]: '5xx' is not a status"),
        (
            {"attempts": 2, "disableRetryOnNetworkError": True},
            "retry.disableRetryOnNetworkError: retrying nothing else, it needs status",
        ),
    ],
)
def test_bad_values_name_their_key(config, error):
    model = msgspec.convert({"retry": config}, MiddlewareConfig)
    assert model.check()[0].startswith(error)


def test_replayable_is_gos_rule():
    assert replayable(_head(b"GET", None)) and replayable(_head(b"TRACE", None))
    assert not replayable(_head(b"PUT", None)) and not replayable(_head(b"POST", None))
    assert replayable(_head(b"POST", None, headers=[(b"x-idempotency-key", b"1")]))
