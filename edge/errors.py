"""Typed errors.

Every error edge raises on purpose derives from :class:`EdgeError`. Errors that end
up as an HTTP answer carry the status to answer with; errors about configuration
name what failed (a key path, a router, a service) so the message alone tells a
user where to look. Bodies sent to clients never include internal detail: the
``public`` text of an HTTP error is fixed per status.
"""

from __future__ import annotations


class EdgeError(Exception):
    """Base of every error edge raises deliberately."""


# --- configuration ------------------------------------------------------------


class ConfigError(EdgeError):
    """A configuration file or value is invalid.

    ``path`` is a JSON-path-like location (``$.entryPoints.web.adress``) when known,
    ``source`` the file it came from.
    """

    def __init__(self, message: str, *, path: str | None = None, source: str | None = None):
        self.message = message
        self.path = path
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.source:
            where += f"{self.source}: "
        if self.path:
            where += f"{self.path}: "
        return where + self.message


class RuleError(ConfigError):
    """A router rule does not parse; names the rule and the 1-based column."""

    def __init__(self, rule: str, column: int, message: str):
        self.rule = rule
        self.column = column
        super().__init__(f"rule {rule!r}: column {column}: {message}")


# --- HTTP answers -------------------------------------------------------------


class HTTPError(EdgeError):
    """An error that becomes an HTTP response with ``status``.

    ``detail`` is for logs; the client only ever sees the status line and its
    standard reason.
    """

    status = 500

    def __init__(self, detail: str = "", *, status: int | None = None):
        if status is not None:
            self.status = status
        self.detail = detail
        super().__init__(detail or str(self.status))


class ProtocolError(HTTPError):
    """The peer sent bytes that are not valid HTTP/1.x (400 unless stated)."""

    status = 400


class HeadersTooLarge(ProtocolError):
    status = 431


class NoRoute(HTTPError):
    status = 404


class NoServers(HTTPError):
    """The service exists but has no server to send to."""

    status = 503


class UpstreamConnectError(HTTPError):
    """Connecting to, or talking to, the upstream failed before a response began."""

    status = 502


class UpstreamDialTimeout(UpstreamConnectError):
    """The upstream did not accept the connection within dialTimeout: 504, as Traefik
    answers any timeout of its transport (a refused connection stays 502)."""

    status = 504


class UpstreamTimeout(HTTPError):
    """The upstream did not send its response head within responseHeaderTimeout."""

    status = 504
