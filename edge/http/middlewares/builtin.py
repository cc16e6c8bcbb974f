"""The middlewares edge has: stripPrefix, addPrefix, headers, redirectScheme.

Each is built once per configuration from its dynamic-configuration model
(:func:`from_config`) and holds only what its requests need, prepared.
"""

from __future__ import annotations

import re

from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.http.codec.forward import HeaderEdits
from edge.http.middlewares import Answer, Forward, Middleware
from edge.rules import routing_path, split_authority

__all__ = ["AddPrefix", "Headers", "RedirectScheme", "StripPrefix", "from_config"]


class StripPrefix(Middleware):
    """Removes the first matching prefix (longest first); it becomes X-Forwarded-Prefix."""

    __slots__ = ("prefixes",)

    def __init__(self, name: str, prefixes: list[str]) -> None:
        super().__init__(name)
        self.prefixes = tuple(sorted((p.encode() for p in prefixes), key=len, reverse=True))

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
            fwd.prefix = prefix.rstrip(b"/") if prefix != b"/" else b""
            path = path[length:]
            fwd.path = path if path.startswith(b"/") else b"/" + path
            break
        return None


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
        prefix = prefix.encode().rstrip(b"/")
        self.prefix = b"/" + prefix if prefix and prefix[:1] != b"/" else prefix

    def request(self, fwd: Forward) -> Answer | None:
        fwd.path = self.prefix + fwd.path
        return None


class Headers(Middleware):
    """Custom request and response headers (an empty value removes the header)."""

    __slots__ = ("request_edits", "response_edits")

    def __init__(self, name: str, request: dict[str, str], response: dict[str, str]) -> None:
        super().__init__(name)
        self.request_edits = _edits(request)
        self.response_edits = _edits(response)


class RedirectScheme(Middleware):
    """Answers with a redirect to the same host and path under another scheme."""

    __slots__ = ("permanent", "port", "scheme")

    def __init__(self, name: str, scheme: str, port: str, permanent: bool) -> None:
        super().__init__(name)
        self.scheme = scheme
        self.port = port
        self.permanent = permanent

    def location(self, host: str, target: bytes) -> bytes:
        port = self.port
        default = {"http": "80", "https": "443"}.get(self.scheme)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        hostport = host if not port or port == default else f"{host}:{port}"
        return f"{self.scheme}://{hostport}".encode() + target

    def already(self, fwd: Forward) -> bool:
        """The request's URL is the one it would be sent to: Traefik then serves the
        route instead (a redirect would loop). Its scheme is the entrypoint's, or
        what a trusted client's X-Forwarded-Proto says (http/ws, https/wss); its
        port the one its Host names, where not the scheme's default."""
        scheme = fwd.scheme.decode()
        if fwd.trusted_head is not None:
            for name, value in fwd.trusted_head.headers:
                if name.lower() == b"x-forwarded-proto":
                    proto = value.strip().lower()
                    if proto in (b"http", b"ws"):
                        scheme = "http"
                    elif proto in (b"https", b"wss"):
                        scheme = "https"
                    break
        if scheme != self.scheme:
            return False
        port = split_authority(fwd.authority.decode("latin-1"))[1]
        if port == _DEFAULT_PORT.get(scheme):
            port = ""
        return port == ("" if self.port == _DEFAULT_PORT.get(self.scheme) else self.port)

    def request(self, fwd: Forward) -> Answer | None:
        if self.already(fwd):
            return None
        target = fwd.path + b"?" + fwd.query if fwd.query else fwd.path
        # As Traefik: a request other than GET gets the status that keeps its method
        # and body (307, 308); a client follows 301 and 302 with a GET.
        if fwd.method == b"GET":
            status = 301 if self.permanent else 302
        else:
            status = 308 if self.permanent else 307
        return Answer(status, b"Location: %s\r\n" % self.location(fwd.host, target))


_DEFAULT_PORT = {"http": "80", "https": "443"}


def _edits(headers: dict[str, str]) -> HeaderEdits | None:
    return HeaderEdits([(k.encode(), v.encode()) for k, v in headers.items()]) if headers else None


def from_config(name: str, config: MiddlewareConfig) -> Middleware:
    """The middleware a validated configuration entry describes."""
    if config.strip_prefix is not None:
        return StripPrefix(name, config.strip_prefix.prefixes)
    if config.add_prefix is not None:
        return AddPrefix(name, config.add_prefix.prefix)
    if config.headers is not None:
        h = config.headers
        return Headers(name, h.custom_request_headers, h.custom_response_headers)
    if config.redirect_scheme is not None:
        rs = config.redirect_scheme
        return RedirectScheme(name, rs.scheme, rs.port, rs.permanent)
    raise AssertionError(f"middleware {name}: no kind set (validated by the model)")
