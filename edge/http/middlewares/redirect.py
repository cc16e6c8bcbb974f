"""The redirect middlewares: redirectScheme and redirectRegex, as Traefik v3's
(pkg/middlewares/redirect).

Both answer with edge's own response (a Location and the status's text as body)
instead of forwarding; the status keeps a request's method and body when it is
not a GET (307, 308), as Traefik's do; ``forcePermanentRedirect`` (set by
Traefik's providers, not a key of its files) makes it 308 whatever the method, and
redirectRegex's ``statusCode`` (the Gateway provider's RequestRedirect: 301, 302,
303, 307 or 308; not a key of Traefik's files either) is its status for every method.
"""

from __future__ import annotations

import re

from edge.http.middlewares import Answer, Forward, Middleware
from edge.http.middlewares.goregexp import GoRegexp
from edge.rules import split_authority

__all__ = ["RedirectRegex", "RedirectScheme"]

_DEFAULT_PORT = {"http": "80", "https": "443"}
_TEXT = {
    301: b"Moved Permanently",
    302: b"Found",
    303: b"See Other",
    307: b"Temporary Redirect",
    308: b"Permanent Redirect",
}


def _redirect(method: bytes, permanent: bool, force: bool, location: bytes) -> Answer:
    if force:
        status = 308
    elif method == b"GET":
        status = 301 if permanent else 302
    else:
        status = 308 if permanent else 307
    return Answer(status, b"Location: %s\r\n" % location, _TEXT[status])


class RedirectScheme(Middleware):
    """Answers with a redirect to the same host and path under another scheme."""

    __slots__ = ("force", "permanent", "port", "scheme")

    def __init__(
        self, name: str, scheme: str, port: str, permanent: bool, force: bool = False
    ) -> None:
        super().__init__(name)
        self.scheme = scheme
        self.port = port
        self.permanent = permanent
        self.force = force

    def location(self, host: str, target: bytes) -> bytes:
        port = self.port
        default = _DEFAULT_PORT.get(self.scheme)
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
        return _redirect(fwd.method, self.permanent, self.force, self.location(fwd.host, target))


class RedirectRegex(Middleware):
    """Redirects to the replacement of the request's URL (``scheme://host[:port]/path?query``,
    the scheme the entrypoint's) when the regexp matches it and the result differs."""

    __slots__ = ("permanent", "regexp", "status")

    def __init__(
        self, name: str, regex: str, replacement: str, permanent: bool, status: int = 0
    ) -> None:
        super().__init__(name)
        self.regexp = GoRegexp(regex, "redirectRegex.regex", replacement)
        self.permanent = permanent
        self.status = status

    def request(self, fwd: Forward) -> Answer | None:
        target = fwd.path + b"?" + fwd.query if fwd.query else fwd.path
        url = b"%s://%s%s" % (fwd.scheme, fwd.authority, target)
        new = self.regexp.replace_all(url)
        if new is None or new == url:
            return None
        if not _parses(new):
            return BAD_GATEWAY  # Traefik: url.Parse fails, its error handler answers 502
        if self.status:
            return Answer(self.status, b"Location: %s\r\n" % new, _TEXT[self.status])
        return _redirect(fwd.method, self.permanent, False, new)


BAD_GATEWAY = Answer(502, b"", b"Bad Gateway\n")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_HOST_ESCAPE = re.compile(rb"%(?!25)[0-7][0-9A-Fa-f]")


def _parses(url: bytes) -> bool:
    """What Go's url.Parse takes: every ``%`` starts an escape, and the host escapes
    no ASCII byte but ``%25`` (Go: "invalid URL escape")."""
    if _BAD_ESCAPE.search(url):
        return False
    _, sep, rest = url.partition(b"://")
    if sep:
        host = re.split(rb"[/?#]", rest, maxsplit=1)[0].rpartition(b"@")[2]
        if _HOST_ESCAPE.search(host):
            return False
    return True
