"""Durations in configuration: Go/Traefik text forms and plain numbers, as float seconds.

Owns the :class:`Duration` type used by every configuration model and the two hooks
(:func:`dec_hook`, :func:`enc_hook`) that teach msgspec to read and write it.
Invariant: a decoded ``Duration`` is a finite, non-negative number of seconds (a
``SignedDuration`` may be negative, where Traefik gives that a meaning), and
``parse_duration(format_duration(x)) == x`` to the nanosecond.

Accepted forms, as Traefik accepts them:

* Go's ``time.ParseDuration`` text: a sequence of decimal numbers with a unit,
  ``"300ms"``, ``"1.5s"``, ``"1m30s"``, ``"2h45m"``; units ``ns``, ``us``/``µs``/``μs``,
  ``ms``, ``s``, ``m``, ``h``; ``"0"`` alone needs no unit.
* a bare number, as int/float or as text (``10``, ``"10"``, ``0.5``): seconds.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "Duration",
    "SignedDuration",
    "dec_hook",
    "enc_hook",
    "format_duration",
    "go_duration",
    "parse_duration",
]

_UNIT_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_COMPONENT = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+]?(\d+\.?\d*|\.\d+)")


class Duration(float):
    """A duration in seconds (a float), written in configuration as ``"5s"`` or ``5``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Duration({format_duration(self)!r})"

    def __str__(self) -> str:
        return format_duration(self)


class SignedDuration(Duration):
    """A :class:`Duration` that may be negative, for the few settings where Traefik
    gives a negative value a meaning (a TCP serversTransport's ``terminationDelay``:
    no deadline; its ``dialKeepAlive``: no keep-alive probes)."""

    __slots__ = ()


def parse_duration(value: object, *, signed: bool = False) -> float:
    """Seconds from a Go/Traefik duration text or a number of seconds (``signed``:
    a leading ``-`` is allowed).

    Raises ``ValueError`` (or ``TypeError`` for a value of the wrong type) with a
    message quoting the value.
    """
    if isinstance(value, bool):
        raise TypeError(f"invalid duration {value!r}: expected a duration like '5s' or a number")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        negative = signed and text.startswith("-")
        seconds = -_parse_text(text[1:]) if negative else _parse_text(value)
    else:
        raise TypeError(
            f"invalid duration {value!r}: expected a duration like '5s' or a number, "
            f"got {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {value!r}: not a finite number")
    if seconds < 0 and not signed:
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    return seconds


def _parse_text(text: str) -> float:
    s = text.strip()
    if not s:
        raise ValueError("invalid duration '': empty")
    if s.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: must not be negative")
    if _NUMBER.fullmatch(s):  # Traefik: a bare number is seconds
        return float(s)
    body = s[1:] if s.startswith("+") else s
    total_ns = 0.0
    pos = 0
    while pos < len(body):
        m = _COMPONENT.match(body, pos)
        if m is None:
            raise ValueError(
                f"invalid duration {text!r}: expected a number and a unit "
                f"(ns, us, ms, s, m, h) at position {pos + 1}"
            )
        total_ns += float(m.group(1)) * _UNIT_NS[m.group(2)]
        pos = m.end()
    return round(total_ns) / 1e9


def format_duration(seconds: float) -> str:
    """Go-like text for ``seconds``, without zero components: ``"1m30s"``, ``"100ms"``, ``"0s"``."""
    ns = round(float(seconds) * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        return sign + _below_second(ns, "us")
    hours, ns = divmod(ns, 3_600_000_000_000)
    minutes, ns = divmod(ns, 60_000_000_000)
    out = sign
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if ns:
        out += f"{_trim(ns, 1_000_000_000)}s"
    return out


def go_duration(ns: int) -> str:
    """Go's ``time.Duration.String`` of ``ns`` nanoseconds: ``"2.5ms"``, ``"1.5µs"``,
    ``"1m0.5s"``, ``"1h0m0s"``, ``"0s"``."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1_000_000_000:
        return sign + _below_second(u, "µs")
    hours, u = divmod(u, 3_600_000_000_000)
    minutes, u = divmod(u, 60_000_000_000)
    text = _trim(u, 1_000_000_000) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _below_second(ns: int, micro: str) -> str:
    """``ns`` (0 < ns < 1 s) in its largest unit: ns, ``micro`` (edge writes "us",
    Go "µs") or ms."""
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return _trim(ns, 1_000) + micro
    return _trim(ns, 1_000_000) + "ms"


def _trim(ns: int, unit: int) -> str:
    """``ns`` in ``unit`` as an exact decimal without trailing zeros."""
    whole, frac = divmod(ns, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def dec_hook(type_: type, obj: Any) -> Any:
    """msgspec decode hook: builds :class:`Duration` values; other types are not ours."""
    if type_ is Duration:
        return Duration(parse_duration(obj))
    if type_ is SignedDuration:
        return SignedDuration(parse_duration(obj, signed=True))
    raise NotImplementedError(f"cannot decode {type_!r}")


def enc_hook(obj: Any) -> Any:
    """msgspec encode hook: a :class:`Duration` is written as its text form."""
    if isinstance(obj, Duration):
        return format_duration(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")
