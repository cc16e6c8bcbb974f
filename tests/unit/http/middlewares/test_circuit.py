"""circuitBreaker: its expression language (parsed in the configuration, compiled
here), the rolling metrics, and the breaker's states on a clock the test moves."""

from __future__ import annotations

import pytest

from edge.config.dynamic import CircuitBreaker as CircuitBreakerConfig
from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import parse_cb_expression
from edge.http.middlewares import Answer, Forward
from edge.http.middlewares.circuit import (
    RECOVERING,
    STANDBY,
    TRIPPED,
    CircuitBreaker,
    Metrics,
    compile_expression,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the expression ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("NetworkErrorRatio() > 0.5", ("cmp", ">", "NetworkErrorRatio", (), 0.5)),
        (
            "ResponseCodeRatio(500, 600, 0, 600) > 0.25",
            ("cmp", ">", "ResponseCodeRatio", (500, 600, 0, 600), 0.25),
        ),
        ("LatencyAtQuantileMS(50) > 100", ("cmp", ">", "LatencyAtQuantileMS", (50.0,), 100)),
        ("LatencyAtQuantileMS(99.9)>=1", ("cmp", ">=", "LatencyAtQuantileMS", (99.9,), 1)),
        ("RequestThreshold() != 3", ("cmp", "!=", "RequestThreshold", (), 3)),
        (
            "NetworkErrorRatio() > 0.5 || LatencyAtQuantileMS(50.0) > 10 && RequestThreshold() > 5",
            (
                "or",
                (
                    ("cmp", ">", "NetworkErrorRatio", (), 0.5),
                    (
                        "and",
                        (
                            ("cmp", ">", "LatencyAtQuantileMS", (50.0,), 10),
                            ("cmp", ">", "RequestThreshold", (), 5),
                        ),
                    ),
                ),
            ),
        ),
        (
            "(NetworkErrorRatio() > 0.5 || RequestThreshold() > 5) && RequestThreshold() < 9",
            (
                "and",
                (
                    (
                        "or",
                        (
                            ("cmp", ">", "NetworkErrorRatio", (), 0.5),
                            ("cmp", ">", "RequestThreshold", (), 5),
                        ),
                    ),
                    ("cmp", "<", "RequestThreshold", (), 9),
                ),
            ),
        ),
    ],
)
def test_expressions_parse(text, tree):
    assert parse_cb_expression(text) == tree


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expression: empty at position 0"),
        ("NetworkErrorRatio() > 1", "a float expected to compare with NetworkErrorRatio()"),
        ("Foo() > 0.5", "unknown function 'Foo'"),
        ("NetworkErrorRatio( > 0.5", "')' expected, found '>' at position 19"),
        ("LatencyAtQuantileMS(50.0) > 1.5", "an integer expected to compare"),
        ("NetworkErrorRatio() > 0.5 &&", "a function expected, found 'the end' at position 28"),
        ("(NetworkErrorRatio() > 0.5", "')' expected, found 'the end' at position 26"),
        ("NetworkErrorRatio() > 0.5 ; x", "unexpected ';' at position 26"),
        ("ResponseCodeRatio(500.0, 600, 0, 600) > 0.5", "an integer expected as argument 1"),
        ("NetworkErrorRatio()", "a comparison expected after NetworkErrorRatio()"),
        ("0.5 < NetworkErrorRatio()", "a function expected, found '0.5' at position 0"),
    ],
)
def test_bad_expressions_name_the_key_and_the_position(text, message):
    with pytest.raises(ValueError, match=r"^expression: ") as caught:
        parse_cb_expression(text)
    assert message in str(caught.value)


def test_a_bad_expression_disables_the_middleware_with_its_reason():
    config = MiddlewareConfig(circuit_breaker=CircuitBreakerConfig(expression="Foo() > 1"))
    (problem,) = config.check()
    assert problem.startswith("circuitBreaker.expression: unknown function 'Foo'")
    bad_code = CircuitBreakerConfig(expression="NetworkErrorRatio() > 0.5", response_code=42)
    assert MiddlewareConfig(circuit_breaker=bad_code).check() == [
        "circuitBreaker.responseCode: 42 is not a status (200-999)"
    ]


# -- the metrics ---------------------------------------------------------------------------


def test_ratios_over_the_last_ten_seconds():
    m = Metrics(0.0)
    for i in range(10):
        m.record(200, 0.01, 100.0 + i * 0.1)
    for i in range(10):
        m.record(502 if i % 2 else 504, 0.01, 101.0)
    m.record(500, 0.01, 101.5)
    assert m.total(101.5) == 21
    assert m.network_error_ratio(101.5) == pytest.approx(10 / 21)
    assert m.response_code_ratio(500, 600, 0, 600, 101.5) == pytest.approx(11 / 21)
    assert m.response_code_ratio(300, 400, 0, 600, 101.5) == 0.0
    assert m.response_code_ratio(500, 600, 600, 700, 101.5) == 0.0  # none below: 0
    # The bucket of second 100 leaves the window at 110, second 101's at 111.
    assert m.total(109.99) == 21 and m.total(110.0) == 11 and m.total(111.0) == 0
    assert m.network_error_ratio(111.0) == 0.0


def test_latency_quantiles_to_one_percent():
    m = Metrics(0.0)
    for ms in range(1, 101):  # 1 .. 100 ms
        m.record(200, ms / 1000, 1.0)
    assert m.latency_at_quantile_ms(50.0) in (49, 50)
    assert m.latency_at_quantile_ms(99.0) in (98, 99)
    assert m.latency_at_quantile_ms(100.0) in (99, 100)
    # Six histograms of ten seconds each: a minute later the old latencies are gone.
    for i in range(1, 7):
        m.record(200, 0.001, 1.0 + 10 * i)
    assert m.latency_at_quantile_ms(99.0) <= 1


# -- the breaker -----------------------------------------------------------------------


def exchange(cb: CircuitBreaker, status: int, elapsed: float = 0.001) -> Answer | None:
    fwd = Forward("a.test", b"/", b"")
    answer = cb.request(fwd)
    if answer is None:
        fwd.status = status
        fwd.elapsed = elapsed
        for end in fwd.ends or ():
            end()
    return answer


def test_it_trips_on_the_expression_then_recovers_gradually():
    clock = Clock()
    cb = CircuitBreaker(
        "cb",
        "NetworkErrorRatio() > 0.5",
        check_period=0.1,
        fallback_duration=2.0,
        recovery_duration=4.0,
        clock=clock,
    )
    assert exchange(cb, 200) is None and cb.state is STANDBY
    clock.now += 0.2
    assert exchange(cb, 502) is None and cb.state is STANDBY  # 1 of 2: not above 0.5
    clock.now += 0.2
    assert exchange(cb, 502) is None
    assert cb.state is TRIPPED  # 2 of 3
    answer = exchange(cb, 200)
    assert answer is not None and (answer.status, answer.body) == (503, b"Service Unavailable")
    clock.now += 1.99
    assert exchange(cb, 200) is not None
    # Recovering: a growing share goes through, up to half at the end.
    clock.now += 0.02
    through = []
    for _ in range(40):
        through.append(exchange(cb, 200) is None)
        assert cb.state is RECOVERING
        clock.now += 0.1
    assert not through[0] and any(through[:20]) and through.count(True) < 40
    assert sum(through[20:]) > sum(through[:20])
    clock.now += 0.1
    assert exchange(cb, 200) is None and cb.state is STANDBY


def test_it_checks_at_most_once_per_check_period():
    clock = Clock()
    cb = CircuitBreaker("cb", "NetworkErrorRatio() > 0.5", check_period=1.0, clock=clock)
    exchange(cb, 200)  # checked (ratio 0)
    exchange(cb, 502)
    exchange(cb, 502)
    assert cb.state is STANDBY  # within the period: not checked yet
    clock.now += 1.01
    exchange(cb, 502)
    assert cb.state is TRIPPED


def test_tripping_starts_the_metrics_afresh_and_recovery_may_trip_again():
    clock = Clock()
    cb = CircuitBreaker(
        "cb",
        "ResponseCodeRatio(500, 600, 0, 600) > 0.5",
        check_period=0.01,
        fallback_duration=1.0,
        recovery_duration=1.0,
        response_code=429,
        clock=clock,
    )
    exchange(cb, 500)
    assert cb.state is TRIPPED and cb.metrics.total(clock.now) == 0
    assert exchange(cb, 200).status == 429
    clock.now += 1.5  # then recovering: the first request let through fails, and trips it
    let_through = 0
    for _ in range(40):
        let_through += exchange(cb, 500) is None
        clock.now += 0.02
        if cb.state is TRIPPED:
            break
    assert cb.state is TRIPPED and let_through == 1


def test_latency_trips_it():
    clock = Clock()
    cb = CircuitBreaker("cb", "LatencyAtQuantileMS(50.0) > 100", clock=clock)
    exchange(cb, 200, elapsed=0.05)
    clock.now += 0.2
    exchange(cb, 200, elapsed=0.3)
    assert cb.state is STANDBY  # the median of 50 and 300 ms is 50
    clock.now += 0.2
    exchange(cb, 200, elapsed=0.3)
    assert cb.state is TRIPPED


def test_compile_expression_refuses_what_does_not_parse():
    with pytest.raises(ValueError, match="expression: "):
        compile_expression("NetworkErrorRatio() >")
    assert compile_expression("RequestThreshold() >= 0")(Metrics(0.0), 0.0)
