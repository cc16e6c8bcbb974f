"""The path middlewares: stripPrefix, stripPrefixRegex, addPrefix, replacePath,
replacePathRegex, as Traefik v3's (pkg/middlewares/<name>).

Each works on the path as it will go upstream (:attr:`Forward.path`: raw bytes,
escapes as the client wrote them). Prefixes are compared with the path as routers
read it (:func:`edge.rules.routing_path`), so what a ``PathPrefix`` router matched
is what is stripped, however it was escaped. A strip or a regexp replacement whose
result a server would read as another path (``/api./foo`` stripped of ``/api``
is ``/./foo``, that is ``/foo``) is answered 400, as Traefik does: it would
otherwise reach a path the route never exposed.
"""

from __future__ import annotations

import re

from edge.http.codec.forward import sanitize_path
from edge.http.middlewares import Answer, Forward, Middleware
from edge.http.middlewares.goregexp import GoRegexp
from edge.rules import routing_path

__all__ = ["AddPrefix", "ReplacePath", "ReplacePathRegex", "StripPrefix", "StripPrefixRegex"]

X_REPLACED_PATH = b"X-Replaced-Path"
BAD_REQUEST = Answer(400, b"", b"Bad Request\n")


class StripPrefix(Middleware):
    """Removes the first prefix, in configuration order, the path starts with; it
    goes upstream as X-Forwarded-Prefix, as configured."""

    __slots__ = ("prefixes",)

    def __init__(self, name: str, prefixes: list[str]) -> None:
        super().__init__(name)
        self.prefixes = tuple(p.strip().encode() for p in prefixes)

    def request(self, fwd: Forward) -> Answer | None:
        path = fwd.path
        for prefix in self.prefixes:
            if path.startswith(prefix):
                length = len(prefix)
            elif b"%" in path:
                length = _spelt_length(path, prefix)
                if length is None:
                    continue
            else:
                continue
            return _strip(fwd, length, prefix)
        return None


class StripPrefixRegex(Middleware):
    """Removes what the first regexp (in order) matching the path's start matched."""

    __slots__ = ("regexps",)

    def __init__(self, name: str, patterns: list[str]) -> None:
        super().__init__(name)
        self.regexps = tuple(
            GoRegexp(p.strip(), f"stripPrefixRegex.regex[{i}]") for i, p in enumerate(patterns)
        )

    def request(self, fwd: Forward) -> Answer | None:
        path = fwd.path
        routed = _routed(path)
        for regexp in self.regexps:
            spans = regexp.search(routed)
            if spans is None:
                continue
            start, end = spans[0]
            prefix = routed[start:end]
            # As Traefik: the leftmost match, taken off when the path starts with it.
            if not prefix or not routed.startswith(prefix):
                continue
            length = len(prefix) if path.startswith(prefix) else _spelt_length(path, prefix)
            if length is None:
                continue
            return _strip(fwd, length, prefix)
        return None


def _strip(fwd: Forward, length: int, prefix: bytes) -> Answer | None:
    path = fwd.path[length:]
    if path[:1] != b"/":
        path = b"/" + path
    if len(path) > 1 and sanitize_path(path) != path:
        return BAD_REQUEST
    fwd.path = path
    fwd.prefix = prefix
    return None


def _routed(path: bytes) -> bytes:
    """``path`` as routers read it, as bytes (unreserved escapes decoded)."""
    if b"%" not in path:
        return path
    return routing_path(path.decode("latin-1")).encode("utf-8", "surrogateescape")


_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}")


def _spelt_length(path: bytes, prefix: bytes) -> int | None:
    """How many bytes of the raw ``path`` spell ``prefix`` as routers read a path
    (:func:`edge.rules.routing_path`: unreserved escapes decoded, so ``/%61pi``
    starts with ``/api``); None when the path does not start with it. Traefik
    strips the prefix of the decoded path and the escaped bytes spelling it."""
    spelt = b""
    i = 0
    while len(spelt) < len(prefix):
        if i >= len(path):
            return None
        token = path[i : i + 3] if _ESCAPE.match(path, i) else path[i : i + 1]
        spelt += routing_path(token.decode("latin-1")).encode("utf-8", "surrogateescape")
        i += len(token)
        if not prefix.startswith(spelt):
            return None
    return i


class AddPrefix(Middleware):
    """Puts a prefix before the path; the path still starts with ``/`` (``api`` adds ``/api``,
    as Traefik's ensureLeadingSlash makes it)."""

    __slots__ = ("prefix",)

    def __init__(self, name: str, prefix: str) -> None:
        super().__init__(name)
        raw = prefix.encode().rstrip(b"/")
        self.prefix = b"/" + raw if raw and raw[:1] != b"/" else raw

    def request(self, fwd: Forward) -> Answer | None:
        fwd.path = self.prefix + fwd.path
        return None


class ReplacePath(Middleware):
    """The path goes upstream as configured (the query stays); the client's path
    goes as X-Replaced-Path."""

    __slots__ = ("path",)

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        self.path = path.encode() or b"/"  # Go's RequestURI of an empty path

    def request(self, fwd: Forward) -> Answer | None:
        fwd.set_header(X_REPLACED_PATH, fwd.path)
        fwd.path = self.path
        return None


class ReplacePathRegex(Middleware):
    """Every match of the regexp in the (escaped) path replaced, when one matches; the
    client's path goes as X-Replaced-Path."""

    __slots__ = ("regexp",)

    def __init__(self, name: str, pattern: str, replacement: str) -> None:
        super().__init__(name)
        self.regexp = GoRegexp(pattern.strip(), "replacePathRegex.regex", replacement.strip())

    def request(self, fwd: Forward) -> Answer | None:
        path = fwd.path
        replaced = self.regexp.replace_all(path)
        if replaced is None:
            return None
        if _BAD_ESCAPE.search(replaced):
            return Answer(500, b"", b"Internal Server Error\n")  # Go: PathUnescape fails
        if replaced[:1] != b"/":
            # Go's request line writes an origin-form target: a path without its
            # leading slash gets one.
            replaced = b"/" + replaced
        if len(replaced) > 1 and sanitize_path(replaced) != replaced:
            return BAD_REQUEST
        fwd.set_header(X_REPLACED_PATH, path)
        fwd.path = replaced
        return None


_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
