"""The headers middleware, as Traefik v3's (pkg/middlewares/headers, with
unrolled/secure for the security headers): custom request and response headers,
CORS, security headers, allowedHosts.

Everything the configuration fixes is prepared once as header edits: the custom
request headers, and the response headers that do not depend on the request
(frame options, nosniff, XSS, CSP, referrer and permissions policies, CORS
credentials and exposed headers, ``Vary: Origin``). Only what depends on the
request runs per request (:class:`HeadersPerRequest`): a CORS preflight answered
by edge, the allowed origin echoed, allowedHosts, appendRequestHeaders (not a key
of Traefik's files: the Gateway provider's ``add``), and Strict-Transport-Security
and Public-Key-Pins, which go only over HTTPS (TLS at edge, or a request carrying
one of ``sslProxyHeaders``) unless ``forceSTSHeader``. A route whose headers need
nothing per request runs no per-request code for them; one that does reads the
request's headers, lowercasing only names of the lengths it looks for, and finds
an origin in a table made once (what a request without Origin gets, too).

Order as Traefik's: a preflight is answered before the security checks (and
without the security headers); on a response the security headers are set
first, then the custom ones, then CORS's, each replacing a same-named header
(an empty custom value removes it). With ``addVaryHeader``, ``Origin`` is added to
the response's own Vary (:func:`vary_origin`).
"""

from __future__ import annotations

from collections.abc import Iterable

from edge.config.dynamic import Headers as HeadersConfig
from edge.http.codec import Header
from edge.http.codec.forward import HeaderEdits
from edge.http.middlewares import Answer, Forward, Middleware, merge_edits
from edge.http.middlewares.goregexp import GoRegexp

__all__ = ["Headers", "HeadersPerRequest", "headers", "vary_origin"]

ORIGIN = b"origin"
REQUEST_METHOD = b"access-control-request-method"
REQUEST_HEADERS = b"access-control-request-headers"
BAD_HOST = Answer(500, b"X-Content-Type-Options: nosniff\r\n", b"Bad Host\n")


class Headers(Middleware):
    """The fixed part: header edits prepared once."""

    __slots__ = ("request_edits", "response_edits", "vary")

    def __init__(self, name: str, config: HeadersConfig) -> None:
        super().__init__(name)
        c = config
        self.vary = c.add_vary_header
        self.request_edits = _edits(c.custom_request_headers.items())
        fixed: list[tuple[str, str]] = []
        if c.sts_seconds and c.force_sts_header and not c.is_development:
            fixed.append(("Strict-Transport-Security", _sts(c)))
        if c.custom_frame_options_value:
            fixed.append(("X-Frame-Options", c.custom_frame_options_value))
        elif c.frame_deny:
            fixed.append(("X-Frame-Options", "DENY"))
        if c.content_type_nosniff:
            fixed.append(("X-Content-Type-Options", "nosniff"))
        if c.custom_browser_xss_value:
            fixed.append(("X-XSS-Protection", c.custom_browser_xss_value))
        elif c.browser_xss_filter:
            fixed.append(("X-XSS-Protection", "1; mode=block"))
        for header, value in (
            ("Content-Security-Policy", c.content_security_policy),
            ("Content-Security-Policy-Report-Only", c.content_security_policy_report_only),
            ("Referrer-Policy", c.referrer_policy),
            ("Permissions-Policy", c.permissions_policy),
        ):
            if value:
                fixed.append((header, value))
        fixed += c.custom_response_headers.items()
        if c.access_control_allow_credentials:
            fixed.append(("Access-Control-Allow-Credentials", "true"))
        expose = _expose(c)
        if expose:
            fixed.append(("Access-Control-Expose-Headers", expose))
        if c.add_vary_header:
            fixed.append(("Vary", "Origin"))  # the response's own Vary: vary_origin
        self.response_edits = _edits(fixed)


class HeadersPerRequest(Headers):
    """The fixed part, and what depends on each request."""

    __slots__ = (
        "allow_headers",
        "allow_methods",
        "allowed_hosts",
        "appends",
        "cors",
        "credentials",
        "exact",
        "expose",
        "host_headers",
        "lengths",
        "max_age",
        "no_origin",
        "origin_regexps",
        "public_key",
        "reads",
        "ssl_headers",
        "star",
        "sts",
        "wildcard_headers",
        "wildcard_methods",
    )

    def __init__(self, name: str, config: HeadersConfig) -> None:
        super().__init__(name, config)
        c = config
        dev = c.is_development
        self.cors = c.has_cors()
        self.credentials = c.access_control_allow_credentials
        # The origin list as Traefik's matchOrigin walks it, in order: the origins
        # before the first ``*`` are found as themselves; past it, any is allowed.
        origins = [o.encode() for o in c.access_control_allow_origin_list]
        self.star = b"*" in origins
        self.exact = {o: o for o in origins[: origins.index(b"*") if self.star else None]}
        self.origin_regexps = tuple(
            GoRegexp(p, f"headers.accessControlAllowOriginListRegex[{i}]")
            for i, p in enumerate(c.access_control_allow_origin_list_regex)
        )
        # What a request without Origin is allowed (``*``, or a regexp matching "").
        self.no_origin = self.allowed_origin(b"")
        self.allow_headers = ",".join(c.access_control_allow_headers).encode()
        self.allow_methods = ",".join(c.access_control_allow_methods).encode()
        self.wildcard_headers = "*" in c.access_control_allow_headers and self.credentials
        self.wildcard_methods = "*" in c.access_control_allow_methods and self.credentials
        self.max_age = (
            b"%d" % c.access_control_max_age if c.access_control_max_age is not None else None
        )
        self.expose = _expose(c).encode()
        self.allowed_hosts = (
            frozenset(h.lower().encode() for h in c.allowed_hosts) if not dev else None
        ) or None
        self.host_headers = tuple(h.lower().encode() for h in c.hosts_proxy_headers)
        self.ssl_headers = tuple(
            (k.lower().encode(), v.encode()) for k, v in c.ssl_proxy_headers.items()
        )
        # Over HTTPS only (else forceSTSHeader made it fixed); the custom one wins.
        custom = {n.lower() for n in c.custom_response_headers}
        self.sts = (
            _sts(c).encode()
            if c.sts_seconds
            and not c.force_sts_header
            and not dev
            and "strict-transport-security" not in custom
            else None
        )
        self.public_key = (
            c.public_key.encode()
            if c.public_key and not dev and "public-key-pins" not in custom
            else None
        )
        # appendRequestHeaders: (lowercased name, name, value to append).
        self.appends = tuple(
            (n.lower().encode(), n.encode(), v.encode())
            for n, v in c.append_request_headers.items()
        )
        # What allowedHosts and sslProxyHeaders read (CORS finds its own: _first).
        reads = {name for name, _ in self.ssl_headers}
        reads.update(self.host_headers if self.allowed_hosts else ())
        self.reads = frozenset(reads)
        # Only a name of one of these lengths is lowercased to be looked up.
        self.lengths = frozenset(len(name) for name in reads)

    def request(self, fwd: Forward) -> Answer | None:
        seen: dict[bytes, bytes] = {}
        head = fwd.head
        headers = head.headers if head is not None else []
        if self.reads:
            reads = self.reads
            lengths = self.lengths
            for name, value in headers:
                if len(name) in lengths:
                    lname = name.lower()
                    if lname in reads and lname not in seen:
                        seen[lname] = value
        if self.cors:
            origin = _first(headers, ORIGIN)
            if origin:
                if fwd.method == b"OPTIONS":
                    method = _first(headers, REQUEST_METHOD)
                    if method:
                        asked = _first(headers, REQUEST_HEADERS) or b""
                        return self.preflight(origin, method, asked)
                allowed = self.allowed_origin(origin)
            else:
                allowed = self.no_origin
            if allowed is not None:
                fwd.add_response(b"Access-Control-Allow-Origin", allowed)
        if self.allowed_hosts is not None:
            host = fwd.authority
            for name in self.host_headers:
                if seen.get(name):
                    host = seen[name]
                    break
            if host.lower() not in self.allowed_hosts:
                return BAD_HOST
        if self.sts is not None or self.public_key is not None:
            ssl = fwd.scheme == b"https" or any(seen.get(k) == v for k, v in self.ssl_headers)
            if ssl:
                if self.sts is not None:
                    fwd.add_response(b"Strict-Transport-Security", self.sts)
                if self.public_key is not None:
                    fwd.add_response(b"Public-Key-Pins", self.public_key)
        if self.appends:
            self.append(fwd)
        return None

    def append(self, fwd: Forward) -> None:
        """appendRequestHeaders: each value after the request's own values of its
        header (every line of it, in order), comma-joined, as one line."""
        sent = fwd.head.headers if fwd.head is not None else []
        for lname, name, value in self.appends:
            values = [v for n, v in sent if n.lower() == lname]
            fwd.set_header(name, b",".join([*values, value]))

    def allowed_origin(self, origin: bytes) -> bytes | None:
        """What Access-Control-Allow-Origin says to ``origin`` (Traefik's matchOrigin):
        the list in order (``*`` is ``*``, or the origin itself with credentials,
        which forbid ``*``), then the regexps; None: not allowed."""
        found = self.exact.get(origin)
        if found is not None:
            return found
        if self.star:
            return origin if self.credentials else b"*"
        for regexp in self.origin_regexps:
            if regexp.search(origin) is not None:
                return origin
        return None

    def preflight(self, origin: bytes, method: bytes, request_headers: bytes) -> Answer:
        lines = []
        if self.credentials:
            lines.append(b"Access-Control-Allow-Credentials: true\r\n")
        if self.wildcard_headers:
            if request_headers:
                lines.append(b"Access-Control-Allow-Headers: %s\r\n" % request_headers)
        elif self.allow_headers:
            lines.append(b"Access-Control-Allow-Headers: %s\r\n" % self.allow_headers)
        if self.wildcard_methods:
            lines.append(b"Access-Control-Allow-Methods: %s\r\n" % method)
        elif self.allow_methods:
            lines.append(b"Access-Control-Allow-Methods: %s\r\n" % self.allow_methods)
        allowed = self.allowed_origin(origin)
        if allowed is not None:
            lines.append(b"Access-Control-Allow-Origin: %s\r\n" % allowed)
        if self.max_age is not None:
            lines.append(b"Access-Control-Max-Age: %s\r\n" % self.max_age)
        if self.expose:
            lines.append(b"Access-Control-Expose-Headers: %s\r\n" % self.expose)
        return Answer(200, b"".join(lines))


def headers(name: str, config: HeadersConfig) -> Headers:
    """The headers middleware ``config`` describes: per-request code only when it needs some."""
    c = config
    dev = c.is_development
    # Any CORS key: a preflight is answered by edge (Traefik's hasCorsHeaders).
    per_request = (
        c.has_cors()
        or (bool(c.allowed_hosts) and not dev)
        or (bool(c.sts_seconds) and not c.force_sts_header and not dev)
        or (bool(c.public_key) and not dev)
        or bool(c.append_request_headers)
    )
    return (HeadersPerRequest if per_request else Headers)(name, config)


def vary_origin(edits: HeaderEdits, response: list[Header]) -> HeaderEdits:
    """``edits`` (which set ``Vary: Origin``) with ``Origin`` added to the response's
    own Vary instead (Traefik: its first Vary value, then ``,Origin``, unless it is
    exactly ``Origin``)."""
    for name, value in response:
        if len(name) == 4 and name.lower() == b"vary":
            if not value or value == b"Origin":
                return edits
            return HeaderEdits(
                [
                    *((n, v) for n, v in edits.pairs if n.lower() != b"vary"),
                    (b"Vary", value + b",Origin"),
                ]
            )
    return edits


def _first(headers: list[Header], lname: bytes) -> bytes | None:
    """The value of the first header named ``lname`` (lowercase), or None; only names
    of its length are lowercased."""
    size = len(lname)
    for name, value in headers:
        if len(name) == size and name.lower() == lname:
            return value
    return None


def _sts(c: HeadersConfig) -> str:
    sub = "; includeSubDomains" if c.sts_include_subdomains else ""
    return f"max-age={c.sts_seconds}{sub}{'; preload' if c.sts_preload else ''}"


def _expose(c: HeadersConfig) -> str:
    expose = c.access_control_expose_headers
    if not expose or ("*" in expose and c.access_control_allow_credentials):
        return ""
    return ",".join(expose)


def _edits(headers: Iterable[tuple[str, str]]) -> HeaderEdits | None:
    """One edit per name (the later wins); None when there is none."""
    return merge_edits([HeaderEdits([(n.encode(), v.encode()) for n, v in headers])])
