"""The middlewares edge has, built from their configuration (:func:`from_config`).

Each is built once per configuration from its dynamic-configuration model and
holds only what its requests need, prepared (regexps compiled, header edits
made). The families live in their own modules: :mod:`.paths` (stripPrefix,
stripPrefixRegex, addPrefix, replacePath, replacePathRegex), :mod:`.redirect`
(redirectScheme, redirectRegex), :mod:`.headers`, :mod:`.auth`. ``chain`` is unrolled into the
routers naming it by validation (:mod:`edge.config.runtime.http`), so it is never
built; ``contentType`` builds to a middleware that does nothing (edge never sniffs
a body's type), which leaves the route's pipeline empty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import http_code_ranges
from edge.config.merge import qualify, split_name
from edge.http.middlewares import Middleware
from edge.http.middlewares.access import IPAllowList, ip_strategy
from edge.http.middlewares.auth import BasicAuth, DigestAuth, basic_auth, digest_auth
from edge.http.middlewares.buffering import Buffering, buffering
from edge.http.middlewares.circuit import CircuitBreaker
from edge.http.middlewares.clientcert import PassTLSClientCert
from edge.http.middlewares.compress import Compress
from edge.http.middlewares.errors import ErrorPages
from edge.http.middlewares.forwardauth import ForwardAuth, forward_auth
from edge.http.middlewares.headers import Headers, headers
from edge.http.middlewares.limits import InFlightReq, RateLimit, rate_limit, source
from edge.http.middlewares.nginx_errors import NginxErrorPages
from edge.http.middlewares.paths import (
    AddPrefix,
    ReplacePath,
    ReplacePathRegex,
    StripPrefix,
    StripPrefixRegex,
)
from edge.http.middlewares.redirect import RedirectRegex, RedirectScheme
from edge.http.middlewares.retry import Retry, retry

__all__ = [
    "AddPrefix",
    "BasicAuth",
    "Buffering",
    "CircuitBreaker",
    "Compress",
    "DigestAuth",
    "ErrorPages",
    "ForwardAuth",
    "Headers",
    "IPAllowList",
    "InFlightReq",
    "NginxErrorPages",
    "PassTLSClientCert",
    "RateLimit",
    "RedirectRegex",
    "RedirectScheme",
    "ReplacePath",
    "ReplacePathRegex",
    "Retry",
    "StripPrefix",
    "StripPrefixRegex",
    "from_config",
]


def from_config(
    name: str, config: MiddlewareConfig, services: Callable[[str], Any] | None = None
) -> Middleware:
    """The middleware a validated configuration entry describes (its values judged
    by :meth:`MiddlewareConfig.check`: a ``ValueError`` here is a bug). ``services``
    builds a service by its qualified name (the router factory's), for the kinds
    that name one (``errors``); without it they find none."""
    c = config
    if c.strip_prefix is not None:
        return StripPrefix(name, c.strip_prefix.prefixes)
    if c.strip_prefix_regex is not None:
        return StripPrefixRegex(name, c.strip_prefix_regex.regex)
    if c.add_prefix is not None:
        return AddPrefix(name, c.add_prefix.prefix)
    if c.replace_path is not None:
        return ReplacePath(name, c.replace_path.path)
    if c.replace_path_regex is not None:
        r = c.replace_path_regex
        return ReplacePathRegex(name, r.regex, r.replacement)
    if c.headers is not None:
        return headers(name, c.headers)
    if c.redirect_scheme is not None:
        rs = c.redirect_scheme
        return RedirectScheme(name, rs.scheme, rs.port, rs.permanent, rs.force_permanent_redirect)
    if c.redirect_regex is not None:
        rr = c.redirect_regex
        return RedirectRegex(name, rr.regex, rr.replacement, rr.permanent, rr.status_code)
    if c.content_type is not None:
        return Middleware(name)
    if c.basic_auth is not None:
        return basic_auth(name, c.basic_auth)
    if c.digest_auth is not None:
        return digest_auth(name, c.digest_auth)
    if c.ip_allow_list is not None:
        a = c.ip_allow_list
        return IPAllowList(name, a.source_range, ip_strategy(a.ip_strategy), a.reject_status_code)
    if c.ip_white_list is not None:
        w = c.ip_white_list
        return IPAllowList(name, w.source_range, ip_strategy(w.ip_strategy))
    if c.rate_limit is not None:
        rl = c.rate_limit
        return rate_limit(name, rl.average, rl.period, rl.burst, rl.source_criterion, rl.redis)
    if c.in_flight_req is not None:
        f = c.in_flight_req
        return InFlightReq(name, f.amount, source(f.source_criterion, by_host=True))
    if c.compress is not None:
        cp = c.compress
        return Compress(
            name,
            cp.encodings,
            cp.default_encoding,
            cp.min_response_body_bytes,
            cp.included_content_types,
            cp.excluded_content_types,
        )
    if c.forward_auth is not None:
        return forward_auth(name, c.forward_auth)
    if c.pass_tls_client_cert is not None:
        p = c.pass_tls_client_cert
        return PassTLSClientCert(name, p.pem, p.info)
    if c.retry is not None:
        return retry(name, c.retry)
    if c.circuit_breaker is not None:
        cb = c.circuit_breaker
        return CircuitBreaker(
            name,
            cb.expression,
            cb.check_period,
            cb.fallback_duration,
            cb.recovery_duration,
            cb.response_code,
        )
    if c.errors is not None:
        e = c.errors
        _, provider = split_name(name)
        service = services(qualify(e.service, provider)) if services is not None else None
        rewrites = tuple((http_code_ranges([k]), v) for k, v in e.status_rewrites.items())
        if e.nginx_headers is not None:  # ingress-nginx's custom errors
            return NginxErrorPages(
                name, http_code_ranges(e.status), service, e.query, rewrites, e.nginx_headers
            )
        return ErrorPages(name, http_code_ranges(e.status), service, e.query, rewrites)
    if c.buffering is not None:
        return buffering(name, c.buffering)
    if c.chain is not None:
        raise AssertionError(f"middleware {name}: a chain is unrolled by validation, not built")
    raise AssertionError(f"middleware {name}: no kind set (validated by the model)")
