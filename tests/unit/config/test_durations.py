"""Durations (edge.config.durations): Go's syntax and plain seconds, formatting back,
the msgspec hooks."""

from __future__ import annotations

import math

import pytest

from edge.config.durations import (
    Duration,
    dec_hook,
    enc_hook,
    format_duration,
    go_duration,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5s", 5.0),
        ("100ms", 0.1),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("250μs", 0.00025),
        ("10ns", 1e-8),
        ("1h2m3s4ms", 3723.004),
        (".5s", 0.5),
        ("+3s", 3.0),
        ("10", 10.0),  # Traefik: a bare number is seconds
        ("2.5", 2.5),
        (10, 10.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_duration(text: object, seconds: float) -> None:
    assert math.isclose(parse_duration(text), seconds, rel_tol=0, abs_tol=1e-12)


@pytest.mark.parametrize(
    "bad", ["", "5x", "s", "1m30", "-1s", "1.2.3s", "5 s", "1d", True, None, [], -3, math.inf]
)
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (5, "5s"),
        (0.1, "100ms"),
        (90, "1m30s"),
        (7200, "2h"),
        (1.5, "1.5s"),
        (0.00025, "250us"),
        (1e-8, "10ns"),
        (3723.004, "1h2m3.004s"),
    ],
)
def test_format_duration_round_trips(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert math.isclose(parse_duration(text), seconds, abs_tol=1e-12)


def test_duration_hooks() -> None:
    assert dec_hook(Duration, "1m") == 60.0
    assert isinstance(dec_hook(Duration, 3), Duration)
    assert enc_hook(Duration(90)) == "1m30s"
    assert str(Duration(0.5)) == "500ms"


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (999, "999ns"),
        (1_500, "1.5µs"),
        (2_500_000, "2.5ms"),
        (999_999_999, "999.999999ms"),
        (1_000_000_000, "1s"),
        (1_500_000_000, "1.5s"),
        (60_000_000_000, "1m0s"),
        (90_500_000_000, "1m30.5s"),
        (3_600_000_000_000, "1h0m0s"),
    ],
)
def test_go_duration_writes_what_gos_duration_string_writes(ns, text):
    assert go_duration(ns) == text
