"""Traefik v3's ``circuitBreaker`` (vulcand/oxy's cbreaker): stop sending requests to a
service that is failing, and let them back in gradually.

The expression (parsed by :func:`edge.config.dynamic.parse_cb_expression`, compiled
here once per configuration into a predicate over :class:`Metrics`) is checked
after an exchange ends, at most once per ``checkPeriod``. When it holds the breaker
trips: every request is answered ``responseCode`` (its reason phrase as the body) for
``fallbackDuration`` and the metrics start afresh. Then it recovers for
``recoveryDuration``: a request goes through while the share let through so far is
below ``0.5 * elapsed / recoveryDuration`` (oxy's ratio controller), the rest get
the fallback answer; the expression is still checked, and may trip it again. After
that it is on standby again (everything goes through). States: ``standby``,
``tripped``, ``recovering``.

Metrics, as oxy's ``RTMetrics``: counters (exchanges, network errors, one per
status) over a rolling window of ten one-second buckets; latencies in a rolling set
of six histograms, the current one replaced every ten seconds (so a quantile
covers up to a minute). A *network error* is a 502 or a 504 answer, edge's or the
server's, as oxy counts them; a client gone before its answer counts as 499.
The latency is the time from the step to the response head (``Forward.elapsed``;
oxy measures to the end of the body).

``NetworkErrorRatio()`` (network errors / exchanges), ``ResponseCodeRatio(a, b, c,
d)`` (exchanges with a status in [a, b) / those in [c, d); 0 when none), and
``LatencyAtQuantileMS(q)`` (the latency, in whole milliseconds, that q % of them
did not exceed, to 1 %), ``RequestThreshold()`` (exchanges in the window).

Invariant: one breaker per middleware as built (per router when the factory builds
it per router, as Traefik does); the clock is a parameter, so the state machine
and the window are tested without waiting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from edge.config.dynamic import CBNode, parse_cb_expression
from edge.http.codec.forward import reason
from edge.http.middlewares import Answer, Forward, Middleware

__all__ = ["CircuitBreaker", "Metrics", "compile_expression"]

WINDOW = 10  # one-second buckets of the counters
HISTOGRAMS = 6  # latency histograms kept...
HISTOGRAM_PERIOD = 10.0  # ...each the current one for this many seconds

STANDBY, TRIPPED, RECOVERING = "standby", "tripped", "recovering"


class _Second:
    __slots__ = ("codes", "network", "second", "total")

    def __init__(self) -> None:
        self.second = -1
        self.total = 0
        self.network = 0
        self.codes: dict[int, int] = {}


def _quantize(us: int) -> int:
    """A latency in µs to the low end of its bucket: at most 1 % apart (HDR's 2 figures)."""
    if us < 128:
        return us
    shift = us.bit_length() - 8  # keep 8 significant bits: under 1 % error
    return (us >> shift) << shift


class Metrics:
    """Exchanges of the last ten seconds (oxy's RTMetrics); ``now`` in seconds."""

    __slots__ = ("_hist", "_hist_at", "_hist_idx", "_seconds")

    def __init__(self, now: float = 0.0) -> None:
        self._seconds = [_Second() for _ in range(WINDOW)]
        self._hist: list[dict[int, int]] = [{} for _ in range(HISTOGRAMS)]
        self._hist_idx = 0
        self._hist_at = now

    def reset(self, now: float) -> None:
        self.__init__(now)  # type: ignore[misc]

    def record(self, status: int, latency: float, now: float) -> None:
        sec = int(now)
        bucket = self._seconds[sec % WINDOW]
        if bucket.second != sec:
            bucket.second = sec
            bucket.total = bucket.network = 0
            bucket.codes = {}
        bucket.total += 1
        if status in (502, 504):
            bucket.network += 1
        bucket.codes[status] = bucket.codes.get(status, 0) + 1
        if latency >= 0:
            if now - self._hist_at >= HISTOGRAM_PERIOD:
                self._hist_idx = (self._hist_idx + 1) % HISTOGRAMS
                self._hist[self._hist_idx] = {}
                self._hist_at = now
            hist = self._hist[self._hist_idx]
            key = _quantize(max(1, int(latency * 1e6)))
            hist[key] = hist.get(key, 0) + 1

    def _live(self, now: float) -> list[_Second]:
        sec = int(now)
        return [b for b in self._seconds if sec - WINDOW < b.second <= sec]

    def total(self, now: float) -> int:
        return sum(b.total for b in self._live(now))

    def network_error_ratio(self, now: float) -> float:
        live = self._live(now)
        total = sum(b.total for b in live)
        return sum(b.network for b in live) / total if total else 0.0

    def response_code_ratio(self, a: int, b: int, c: int, d: int, now: float) -> float:
        top = bottom = 0
        for bucket in self._live(now):
            for code, n in bucket.codes.items():
                if a <= code < b:
                    top += n
                if c <= code < d:
                    bottom += n
        return top / bottom if bottom else 0.0

    def latency_at_quantile_ms(self, q: float) -> int:
        merged: dict[int, int] = {}
        for hist in self._hist:
            for key, n in hist.items():
                merged[key] = merged.get(key, 0) + n
        count = sum(merged.values())
        if not count:
            return 0
        wanted = max(1, math.floor(min(q, 100.0) / 100.0 * count + 0.5))
        seen = 0
        for key in sorted(merged):
            seen += merged[key]
            if seen >= wanted:
                return key // 1000
        return max(merged) // 1000


Predicate = Callable[[Metrics, float], bool]

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def compile_expression(text: str) -> Predicate:
    """``text`` (see :func:`edge.config.dynamic.parse_cb_expression`) as a predicate
    over metrics at a time; a ``ValueError`` for text that does not parse."""
    return _compile(parse_cb_expression(text))


def _compile(node: CBNode) -> Predicate:
    kind = node[0]
    if kind in ("and", "or"):
        parts = [_compile(n) for n in node[1]]
        if kind == "and":
            return lambda m, now: all(p(m, now) for p in parts)
        return lambda m, now: any(p(m, now) for p in parts)
    _, op, name, args, literal = node
    compare = _COMPARE[op]
    value: Callable[[Metrics, float], float]
    if name == "NetworkErrorRatio":
        value = Metrics.network_error_ratio
    elif name == "ResponseCodeRatio":
        a, b, c, d = args
        value = lambda m, now: m.response_code_ratio(a, b, c, d, now)  # noqa: E731
    elif name == "LatencyAtQuantileMS":
        (q,) = args
        value = lambda m, now: m.latency_at_quantile_ms(q)  # noqa: E731
    else:  # RequestThreshold
        value = Metrics.total
    return lambda m, now: compare(value(m, now), literal)


class CircuitBreaker(Middleware):
    """The breaker of one middleware (module doc)."""

    __slots__ = (
        "allowed",
        "check_period",
        "clock",
        "condition",
        "denied",
        "expression",
        "fallback_duration",
        "last_check",
        "metrics",
        "recovery_duration",
        "recovery_start",
        "response_code",
        "state",
        "until",
    )

    def __init__(
        self,
        name: str,
        expression: str,
        check_period: float = 0.1,
        fallback_duration: float = 10.0,
        recovery_duration: float = 10.0,
        response_code: int = 503,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name)
        self.expression = expression
        self.condition = compile_expression(expression)
        # Traefik keeps oxy's defaults for values that are not positive.
        self.check_period = check_period if check_period > 0 else 0.1
        self.fallback_duration = fallback_duration if fallback_duration > 0 else 10.0
        self.recovery_duration = recovery_duration if recovery_duration > 0 else 10.0
        self.response_code = response_code
        self.clock = clock
        self.state = STANDBY
        self.until = 0.0
        self.last_check = 0.0
        self.recovery_start = 0.0
        self.allowed = self.denied = 0
        self.metrics = Metrics(clock())

    def request(self, fwd: Forward) -> Answer | None:
        if self.state is not STANDBY and not self._let_through():
            return Answer(self.response_code, body=reason(self.response_code))
        fwd.on_end(lambda: self._ended(fwd), timed=True)
        return None

    def _let_through(self) -> bool:
        now = self.clock()
        if self.state is TRIPPED:
            if now < self.until:
                return False
            self.state = RECOVERING
            self.until = now + self.recovery_duration
            self.recovery_start = now
            self.allowed = self.denied = 0
        if now > self.until:
            self.state = STANDBY
            return True
        # oxy's ratio controller: let through while the share allowed stays under target.
        target = 0.5 * (now - self.recovery_start) / self.recovery_duration
        if (self.allowed + 1) / (self.allowed + 1 + self.denied) < target:
            self.allowed += 1
            return True
        self.denied += 1
        return False

    def _ended(self, fwd: Forward) -> None:
        now = self.clock()
        self.metrics.record(fwd.status, fwd.elapsed, now)
        if now <= self.last_check:
            return
        self.last_check = now + self.check_period
        if self.state is TRIPPED:
            return
        if self.condition(self.metrics, now):
            self.state = TRIPPED
            self.until = now + self.fallback_duration
            self.metrics.reset(now)
