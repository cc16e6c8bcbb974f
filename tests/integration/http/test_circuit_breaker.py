"""circuitBreaker through a real edge, under both codecs: a purpose-built backend
(:class:`~tests.integration.http.test_health.Scripted`) starts failing, and the time
until edge answers in its place (tripped), then, once it heals, until every request
reaches it again (fallbackDuration, then recoveryDuration letting a growing share
through) is measured and bounded; the figures are printed for the report
(``pytest -s``). A bad expression disables the middleware and its router, naming
``circuitBreaker.expression`` and the position, in the log and the API.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.harness import Edge, get, lb
from tests.integration.http.test_health import Scripted

CODECS = ["httptools", "h11"]
FALLBACK = 1.0
RECOVERY = 1.0


@pytest.fixture
def backend():
    s = Scripted("a")
    yield s
    s.stop()


def start(tmp_path, codec: str, backend: Scripted, expression: str) -> Edge:
    dyn = {
        "http": {
            "routers": {
                "app": {"rule": "Host(`app.example`)", "service": "app", "middlewares": ["cb"]},
                "plain": {"rule": "Host(`plain.example`)", "service": "app"},
            },
            "services": {"app": lb(backend.url)},
            "middlewares": {
                "cb": {
                    "circuitBreaker": {
                        "expression": expression,
                        "checkPeriod": "50ms",
                        "fallbackDuration": f"{FALLBACK}s",
                        "recoveryDuration": f"{RECOVERY}s",
                        "responseCode": 418,
                    }
                }
            },
        }
    }
    return Edge(tmp_path, dyn, parser=codec, static_extra={"api": {"insecure": True}})


def ask(e: Edge) -> tuple[int, bytes]:
    status, _, body = get(e.port, "/", host="app.example", timeout=5)
    return status, body


def until(predicate, timeout: float) -> float:
    began = time.monotonic()
    while not predicate():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"not within {timeout}s")
        time.sleep(0.01)
    return time.monotonic() - began


@pytest.mark.parametrize("codec", CODECS)
def test_it_trips_on_failures_and_recovers_when_the_server_heals(tmp_path, codec, backend):
    e = start(tmp_path, codec, backend, "ResponseCodeRatio(500, 600, 0, 600) > 0.5")
    try:
        assert [ask(e) for _ in range(5)] == [(200, b"a")] * 5
        backend.status = 500
        served = backend.served
        tripped = until(lambda: ask(e) == (418, b"I'm a Teapot"), timeout=5)
        failed = backend.served - served
        # Tripped after more 500s than the 200s before them (the ratio passes 0.5).
        assert 5 <= failed <= 12
        # While tripped the backend sees nothing.
        before = backend.served
        assert [ask(e)[0] for _ in range(5)] == [418] * 5
        assert backend.served == before
        backend.status = 200
        healed = time.monotonic()
        # Back once fallbackDuration and recoveryDuration are over: 10 in a row reach it.
        back = until(lambda: all(ask(e) == (200, b"a") for _ in range(10)), timeout=10)
        back_at = time.monotonic() - healed
        print(
            f"\ncircuitBreaker ({codec}): tripped {tripped * 1000:.0f} ms after the server"
            f" began failing ({failed} failures); served again {back_at:.2f} s after it"
            f" healed (fallback {FALLBACK} s + recovery {RECOVERY} s)"
        )
        assert back_at >= FALLBACK + RECOVERY * 0.5
        assert back < FALLBACK + RECOVERY + 5
        # A router without the middleware was never affected.
        assert get(e.port, "/", host="plain.example")[0] == 200
    finally:
        e.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_recovery_lets_a_growing_share_through(tmp_path, codec, backend):
    """During recoveryDuration some requests reach the server and some get the
    fallback answer; before it, none do."""
    e = start(
        tmp_path,
        codec,
        backend,
        "NetworkErrorRatio() > 0.5 || ResponseCodeRatio(500, 600, 0, 600) > 0.5",
    )
    try:
        backend.status = 503
        until(lambda: ask(e)[0] == 418, timeout=5)
        tripped_at = time.monotonic()
        backend.status = 200
        outcomes: list[tuple[float, int]] = []
        while time.monotonic() - tripped_at < FALLBACK + RECOVERY + 0.3:
            outcomes.append((time.monotonic() - tripped_at, ask(e)[0]))
            time.sleep(0.01)
        early = [s for t, s in outcomes if t < FALLBACK * 0.9]
        recovering = [s for t, s in outcomes if FALLBACK * 1.1 < t < FALLBACK + RECOVERY * 0.9]
        assert early and set(early) == {418}
        assert 200 in recovering and 418 in recovering
        assert ask(e)[0] == 200
    finally:
        e.stop()


def test_a_bad_expression_disables_the_middleware_naming_the_key(tmp_path, backend):
    e = start(tmp_path, "httptools", backend, "NetworkErrorRatio() > 1")
    try:
        assert ask(e)[0] == 404  # its router is disabled
        assert get(e.port, "/", host="plain.example")[0] == 200  # the rest serves
        status, _, body = get(e.ports["traefik"], "/api/http/middlewares/cb@file")
        info = json.loads(body)
        assert (status, info["status"]) == (200, "disabled")
        assert info["error"] == [
            "circuitBreaker.expression: a float expected to compare with NetworkErrorRatio()"
            " (write 1.0), found 1 at position 22 in 'NetworkErrorRatio() > 1'"
        ]
        e.wait_for(r"circuitBreaker\.expression: a float expected", start=0)
    finally:
        e.stop()
