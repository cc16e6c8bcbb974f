"""The codec factory: which request and response parser classes a name means.

Lives apart from the codec interface (:mod:`edge.http.codec.base`), which both
implementations import, so that imports go one way.
"""

from __future__ import annotations

from edge.http.codec import h11, httptools

PARSERS = {
    "httptools": (httptools.RequestParser, httptools.ResponseParser),
    "h11": (h11.RequestParser, h11.ResponseParser),
}


def parser_classes(name: str) -> tuple[type, type]:
    """(RequestParser, ResponseParser) classes for a codec name: httptools | h11."""
    try:
        return PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown HTTP parser {name!r}: expected 'httptools' or 'h11'") from None
