"""retry's policy: what it hands the request, and Traefik's backoff between tries."""

from __future__ import annotations

import pytest

from edge.http.middlewares import Forward, Pipeline
from edge.http.middlewares.retry import Retry


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
