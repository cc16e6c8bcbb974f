"""Ingresses written for ingress-nginx -> dynamic configuration: the pure conversion of
the ``kubernetesIngressNGINX`` provider.

Owns :func:`convert`, from a :class:`~edge.providers.kubernetes.objects.ClusterState`
and :class:`NGINXOptions` to an :class:`~edge.providers.kubernetes.ingress.Conversion`.
Rules, paths, precedence, TLS, services and names are the Ingress conversion's
(:mod:`edge.providers.kubernetes.ingress`, which this module drives with its own class
selection and annotation reader, never a copy of it); what differs is which Ingresses
are served and what their ``nginx.ingress.kubernetes.io/*`` annotations become. The
invariants are that module's: the same state gives an equal result, nothing in the state
makes it raise, and an Ingress whose annotations edge cannot honour is left out whole
with a problem naming the annotation (served without a middleware it asked for, a
route could be open that its author closed).

Which Ingresses (ingress-nginx's flags, Traefik's keys)
    ``spec.ingressClassName`` naming an IngressClass whose ``spec.controller`` is
    ``controllerClass`` (``k8s.io/ingress-nginx``), or, with ``ingressClassByName``,
    naming ``ingressClass`` (``nginx``) itself; else the legacy
    ``kubernetes.io/ingress.class`` annotation equal to ``ingressClass``; else, naming no
    class, when ``watchIngressWithoutClass``.

Annotations (``nginx.ingress.kubernetes.io/``; ingress-nginx's meaning, edge's parts)
    ``ssl-redirect`` (default true): the plain-HTTP routes of hosts the Ingress has TLS
    for answer 308 to ``https://`` (a ``redirectScheme``); ``force-ssl-redirect``: every
    plain-HTTP route does. ``use-regex``: ImplementationSpecific paths are
    case-insensitive regular expressions anchored at the start (nginx's ``location ~*``),
    a ``PathRegexp``; ``rewrite-target`` implies it and rewrites each such path with a
    ``replacePathRegex`` (``$1``... are the path's capture groups, as in nginx).
    ``app-root``: ``/`` answers 302 to it. ``permanent-redirect`` (301) and
    ``temporal-redirect`` (302): every request answers a redirect to that URL
    (``redirectRegex``). ``backend-protocol`` ``HTTP``, ``HTTPS``, ``GRPC`` (``h2c``) or
    ``GRPCS`` (``https``, h2 by ALPN for gRPC): the scheme to the backends (a copy
    of the service for this Ingress; without it HTTP, whatever the port); to HTTPS backends a serversTransport of the Ingress' own, which verifies
    nothing unless ``proxy-ssl-verify: "on"`` (ingress-nginx's default), with
    ``proxy-ssl-secret``'s CAs and client certificate and ``proxy-ssl-name``.
    ``whitelist-source-range`` / ``allowlist-source-range``: an ``ipAllowList`` (403
    otherwise). ``affinity:
    cookie`` with ``session-cookie-name`` (``INGRESSCOOKIE``), ``-path``, ``-domain``,
    ``-secure``, ``-samesite``, ``-max-age`` (or ``-expires``): a sticky cookie on this
    Ingress' copy of the service. ``service-upstream``: that copy's one server is the
    Service's cluster IP and port. ``proxy-connect-timeout``, ``proxy-read-timeout``
    and ``proxy-send-timeout`` (seconds; nginx's default 60 for the others): a
    serversTransport of the Ingress' own, the dial's bound, the wait for the response
    head (edge bounds no later read) and ``writeTimeout`` (how long the backend may
    take none of the request). ``enable-cors`` with ``cors-allow-origin``,
    ``-methods``, ``-headers``, ``-credentials``, ``-expose-headers``, ``-max-age``
    (ingress-nginx's defaults): a ``headers`` middleware. ``proxy-body-size`` (nginx
    sizes, ``0``: no limit): ``buffering`` with ``maxRequestBodyBytes`` (413 over it).
    ``limit-rps`` / ``limit-rpm`` (burst: ``limit-burst-multiplier``, 5, times the
    rate) per client address: a ``rateLimit``; ``limit-connections``: an
    ``inFlightReq`` per client address. ``upstream-vhost`` and ``x-forwarded-prefix``:
    request headers (``Host``, ``X-Forwarded-Prefix``) set last. ``custom-headers``: a
    ConfigMap of the Ingress' namespace whose data are response headers for the client
    (each in the provider's ``globalAllowedResponseHeaders``). ``server-alias``: more
    names for every host route (:func:`_aliases`). ``default-backend`` (a Service of the
    Ingress' namespace) answers while the Ingress' backends have no endpoint up, and
    ``custom-http-errors`` those statuses, with ingress-nginx's headers
    (:func:`_fallbacks`); the provider's ``defaultBackendService`` answers what no route
    takes, and those errors where an Ingress has no default backend of its own
    (:func:`_controller_default`). ``auth-url`` with
    ``auth-response-headers``, ``auth-signin`` and ``auth-method``: a ``forwardAuth``.
    ``auth-type: basic`` (or ``digest``) with ``auth-secret`` (any namespace) and
    ``auth-realm``: a ``basicAuth`` of the Secret's ``auth`` htpasswd lines (a
    ``digestAuth`` of htdigest lines) (:meth:`_Reader.basic_auth`).
    Canaries (``canary:
    "true"`` with ``canary-by-header`` [``-value``], ``canary-by-cookie``,
    ``canary-weight`` [``-total``]) are taken off the Ingress whose host and path
    they share (:func:`_canaries`). ``ssl-passthrough``: TLS for the Ingress' hosts is
    forwarded untouched to its ``/`` path's backends (:func:`_passthrough`).

TCP and UDP (``tcp-services`` / ``udp-services`` ConfigMaps)
    :func:`convert_services` turns their entries into TCP and UDP routes on the entry
    point of each port; :func:`with_services` adds them to the Ingresses' conversion.
    The provider watches exactly the two ConfigMaps its configuration names.

Refused, named on the route
    ``configuration-snippet``, ``server-snippet`` and every other ``*-snippet``: raw
    nginx text, which edge has no nginx to give to, and whose injection was
    CVE-2021-25742 and CVE-2023-5043. Known ingress-nginx keys edge does not do yet
    (:data:`NOT_YET`, with what edge lacks for each) and unknown ones are named too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from edge.config import htpasswd
from edge.config.durations import Duration, SignedDuration
from edge.config.dynamic import (
    BasicAuth,
    Buffering,
    ClientCertificate,
    Cookie,
    DigestAuth,
    ErrorPage,
    Failover,
    ForwardAuth,
    ForwardingTimeouts,
    Headers,
    HTTPConfiguration,
    InFlightReq,
    IPAllowList,
    IPStrategy,
    Middleware,
    ProxyProtocol,
    RateLimit,
    RedirectRegex,
    RedirectScheme,
    ReplacePathRegex,
    Router,
    RouterTLS,
    ServersTransport,
    Service,
    SourceCriterion,
    Sticky,
    TCPConfiguration,
    TCPLoadBalancer,
    TCPRouter,
    TCPRouterTLS,
    TCPServer,
    TCPService,
    UDPConfiguration,
    UDPLoadBalancer,
    UDPRouter,
    UDPServer,
    UDPService,
    Weighted,
    WRRService,
    go_regexp,
    ip_range,
)
from edge.config.static import KubernetesIngressNGINXConfig
from edge.providers.kubernetes import ingress as base
from edge.providers.kubernetes.endpoints import ready_addresses, service_port, slices_by_service
from edge.providers.kubernetes.gateway import EntryPointPort
from edge.providers.kubernetes.ingress import (
    Conversion,
    IngressOptions,
    Problem,
    RouterOptions,
    ServiceVariant,
)
from edge.providers.kubernetes.objects import (
    INGRESS_CLASS_ANNOTATION,
    ClusterState,
    EndpointSlice,
    Ingress,
    IngressBackend,
    IngressServiceBackend,
    Key,
    ServiceBackendPort,
    ServicesConfigMap,
)
from edge.providers.kubernetes.secrets import SecretError, ca_bundle, tls_certificate

__all__ = [
    "CONTROLLER",
    "NOT_YET",
    "PREFIX",
    "PROVIDER",
    "L4Conversion",
    "L4Problem",
    "NGINXOptions",
    "convert",
    "convert_services",
    "ingress_options",
    "is_selected",
    "with_services",
]

PROVIDER = "kubernetesingressnginx"
"""The provider name that qualifies this source's elements (Traefik's)."""

PREFIX = "nginx.ingress.kubernetes.io/"
CONTROLLER = "k8s.io/ingress-nginx"
DEFAULT_CLASS = "nginx"

SNIPPET_REASON = (
    "raw nginx configuration is refused: edge runs no nginx, and snippet injection "
    "was CVE-2021-25742 and CVE-2023-5043; express it with edge's middlewares"
)

_CLIENT_CERTS = "edge asks no client for a certificate on an Ingress' hosts"
_AUTH_EXTRAS = "edge's forwardAuth asks on every request, with the client's headers only"
_BALANCING = "edge balances by smooth weighted round robin (or affinity: cookie)"
_RETRIES = "edge retries only a request that reached no server (the retry middleware)"
_BUFFERS = "edge streams bodies both ways; proxy-body-size alone holds a request"
_SSL_VERSIONS = "edge's serversTransports choose TLS versions and ciphers by OpenSSL's defaults"
_WAF = "edge has no web application firewall"
NOT_YET: Mapping[str, str] = {
    "auth-tls-secret": _CLIENT_CERTS,
    "auth-tls-verify-client": _CLIENT_CERTS,
    "auth-tls-verify-depth": _CLIENT_CERTS,
    "auth-tls-pass-certificate-to-upstream": _CLIENT_CERTS,
    "auth-tls-error-page": _CLIENT_CERTS,
    "enable-global-auth": "edge has no global external auth to turn off",
    "auth-cache-key": "edge caches no forwardAuth answer",
    "auth-cache-duration": "edge caches no forwardAuth answer",
    "auth-keepalive": _AUTH_EXTRAS,
    "auth-proxy-set-headers": _AUTH_EXTRAS,
    "auth-request-redirect": _AUTH_EXTRAS,
    "affinity-mode": "edge's cookie affinity has one mode: a client keeps its server while up",
    "affinity-canary-behavior": "edge's canary weight applies before cookie affinity",
    "session-cookie-change-on-failure": "edge always sets a new cookie when its server is down",
    "session-cookie-conditional-samesite-none": "edge sends SameSite to every client alike",
    "canary-by-header-pattern": "edge matches a canary header by its value, not a pattern",
    "from-to-www-redirect": "edge has no www redirect of its own (a redirectRegex does it)",
    "upstream-hash-by": _BALANCING,
    "load-balance": _BALANCING,
    "proxy-next-upstream": _RETRIES,
    "proxy-next-upstream-tries": _RETRIES,
    "proxy-next-upstream-timeout": _RETRIES,
    "proxy-http-version": "edge speaks HTTP/1.1 to backends",
    "proxy-request-buffering": _BUFFERS,
    "proxy-buffering": _BUFFERS,
    "proxy-buffer-size": _BUFFERS,
    "proxy-buffers-number": _BUFFERS,
    "proxy-max-temp-file-size": _BUFFERS,
    "client-body-buffer-size": _BUFFERS,
    "proxy-ssl-ciphers": _SSL_VERSIONS,
    "proxy-ssl-protocols": _SSL_VERSIONS,
    "proxy-ssl-verify-depth": "edge verifies a backend's whole chain",
    "enable-access-log": "edge's access log is on or off for every route (accessLog)",
    "enable-modsecurity": _WAF,
    "enable-owasp-core-rules": _WAF,
    "modsecurity-transaction-id": _WAF,
    "preserve-trailing-slash": "edge's ssl-redirect keeps the path as it came, slash and all",
    "permanent-redirect-code": "edge answers 301 (permanent) or 302 (temporal)",
    "temporal-redirect-code": "edge answers 301 (permanent) or 302 (temporal)",
}
"""ingress-nginx annotations edge knows and does not honour yet, each with what edge
lacks for it: named as such, with that reason."""

_KNOWN = frozenset(
    {
        "ssl-redirect",
        "force-ssl-redirect",
        "use-regex",
        "rewrite-target",
        "app-root",
        "permanent-redirect",
        "temporal-redirect",
        "backend-protocol",
        "whitelist-source-range",
        "allowlist-source-range",
        "affinity",
        "session-cookie-name",
        "session-cookie-path",
        "session-cookie-domain",
        "session-cookie-secure",
        "session-cookie-samesite",
        "session-cookie-max-age",
        "session-cookie-expires",
        "enable-cors",
        "cors-allow-origin",
        "cors-allow-methods",
        "cors-allow-headers",
        "cors-allow-credentials",
        "cors-expose-headers",
        "cors-max-age",
        "proxy-body-size",
        "limit-rps",
        "limit-rpm",
        "limit-burst-multiplier",
        "limit-connections",
        "auth-url",
        "auth-response-headers",
        "auth-signin",
        "auth-method",
        "auth-type",
        "auth-secret",
        "auth-secret-type",
        "auth-realm",
        "ssl-passthrough",
        "upstream-vhost",
        "x-forwarded-prefix",
        "service-upstream",
        "server-alias",
        "proxy-connect-timeout",
        "proxy-read-timeout",
        "proxy-send-timeout",
        "custom-headers",
        "default-backend",
        "custom-http-errors",
        "proxy-ssl-secret",
        "proxy-ssl-verify",
        "proxy-ssl-name",
        "proxy-ssl-server-name",
        "canary",
        "canary-by-header",
        "canary-by-header-value",
        "canary-by-cookie",
        "canary-weight",
        "canary-weight-total",
    }
)

_CORS_METHODS = ["GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"]
_CORS_HEADERS = [
    "DNT",
    "Keep-Alive",
    "User-Agent",
    "X-Requested-With",
    "If-Modified-Since",
    "Cache-Control",
    "Content-Type",
    "Range",
    "Authorization",
]
_CORS_MAX_AGE = 1728000
_SIZE_RE = re.compile(r"(\d{1,15})([kKmMgG]?)")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_PER_CLIENT = SourceCriterion(ip_strategy=IPStrategy())


class NGINXOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    """The provider options the conversion reads (Traefik's key names)."""

    ingress_class: str = DEFAULT_CLASS
    controller_class: str = CONTROLLER
    watch_ingress_without_class: bool = False
    ingress_class_by_name: bool = False
    allow_external_name_services: bool = True
    allow_empty_services: bool = True  # ingress-nginx answers 503
    default_backend_service: str = ""  # namespace/name: the controller's default backend
    allowed_response_headers: tuple[str, ...] = ()  # custom-headers may set these (any case)

    @classmethod
    def from_config(cls, config: KubernetesIngressNGINXConfig) -> NGINXOptions:
        return cls(
            ingress_class=config.ingress_class,
            controller_class=config.controller_class,
            watch_ingress_without_class=config.watch_ingress_without_class,
            ingress_class_by_name=config.ingress_class_by_name,
            allow_external_name_services=not config.disable_svc_external_name,
            default_backend_service=config.default_backend_service,
            allowed_response_headers=tuple(config.global_allowed_response_headers),
        )


def is_selected(ing: Ingress, state: ClusterState, options: NGINXOptions) -> bool:
    """Whether ingress-nginx (so this source) serves ``ing``; see the module doc."""
    name = ing.spec.ingress_class_name
    if name:
        if options.ingress_class_by_name and name == options.ingress_class:
            return True
        return any(
            ic.metadata.name == name and ic.spec.controller == options.controller_class
            for ic in state.ingress_classes.values()
        )
    legacy = ing.metadata.annotations.get(INGRESS_CLASS_ANNOTATION, "")
    if legacy:
        return legacy == options.ingress_class
    return options.watch_ingress_without_class


# --- annotations -------------------------------------------------------------------------


def _annotations(ing: Ingress) -> dict[str, str]:
    """The Ingress' ingress-nginx annotations: name after the prefix -> value."""
    size = len(PREFIX)
    return {k[size:]: v for k, v in ing.metadata.annotations.items() if k.startswith(PREFIX)}


def _bool(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"annotation {PREFIX}{key}: {value!r} is not true or false")


def _int(key: str, value: str, low: int = 0, high: int = 10**12) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 13) or not low <= int(text) <= high:
        raise ValueError(f"annotation {PREFIX}{key}: {value!r} is not an integer from {low}")
    return int(text)


def _list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _size(key: str, value: str) -> int:
    """An nginx size (``8m``, ``512k``, ``1024``) in bytes."""
    found = _SIZE_RE.fullmatch(value.strip())
    if found is None:
        raise ValueError(f"annotation {PREFIX}{key}: {value!r} is not a size (8m, 512k, 1024)")
    return int(found.group(1)) * _SIZE_UNITS[found.group(2).lower()]


def _go_literal(text: str) -> str:
    """``text`` as a replacement template that means itself (``$`` doubled)."""
    return text.replace("$", "$$")


def _check_names(found: Mapping[str, str]) -> None:
    for short in sorted(found):
        if short.endswith("-snippet") or short == "stream-snippet":
            raise ValueError(f"annotation {PREFIX}{short}: {SNIPPET_REASON}")
        if short in NOT_YET:
            raise ValueError(
                f"annotation {PREFIX}{short} is not supported by edge yet: {NOT_YET[short]}"
            )
        if short not in _KNOWN:
            raise ValueError(f"unknown annotation {PREFIX}{short}")


class _Reader:
    """Reads one Ingress' annotations into :class:`RouterOptions`; the middlewares it
    defines are named ``<namespace>-<ingress>-<kind>`` (unique: Ingress keys are)."""

    def __init__(
        self, ing: Ingress, state: ClusterState | None = None, options: NGINXOptions | None = None
    ) -> None:
        self.ing = ing
        self.state = state
        self.options = options or NGINXOptions()
        self.found = _annotations(ing)
        ns, name = ing.metadata.key
        self.prefix = base._normalize(f"{ns}-{name}")
        self.middlewares: list[str] = []
        self.definitions: dict[str, Middleware] = {}
        self.transports: dict[str, ServersTransport] = {}

    def get(self, key: str) -> str | None:
        return self.found.get(key)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        return default if value is None else _bool(key, value)

    def define(self, kind: str, middleware: Middleware, attach: bool = True) -> str:
        name = f"{self.prefix}-{kind}"
        self.definitions[name] = middleware
        if attach:
            self.middlewares.append(name)
        return name

    def read(self) -> RouterOptions:
        _check_names(self.found)
        if self.flag("ssl-passthrough"):
            other = sorted(set(self.found) - {"ssl-passthrough"})
            if other:
                raise ValueError(
                    f"annotation {PREFIX}{other[0]}: with ssl-passthrough edge forwards the "
                    "TLS connection as it is, so no HTTP annotation can apply"
                )
            return RouterOptions([], [], 0, False)
        # nginx's phases: rewrite (app-root, a CORS preflight's answer), preaccess (limits),
        # access (allowlist, then auth), then the body is read (its size).
        redirect = self.redirects()
        self.cors()
        self.limits()
        self.allow_list()
        self.basic_auth()
        self.forward_auth()
        self.body_size()
        self.upstream_headers()
        self.custom_headers()
        self.fallbacks()
        self.aliases()
        rewrite = self.rewrite()
        plain: tuple[str, ...] = ()
        force = self.flag("force-ssl-redirect")
        if force or self.flag("ssl-redirect", True):
            plain = (
                self.define(
                    "ssl-redirect",
                    Middleware(
                        redirect_scheme=RedirectScheme(
                            scheme="https", permanent=True, force_permanent_redirect=True
                        )
                    ),
                    attach=False,
                ),
            )
        if redirect:  # answers every request: nothing after it runs
            self.middlewares = [redirect]
        return RouterOptions(
            entry_points=[],
            middlewares=self.middlewares,
            priority=0,
            tls_only=False,
            path_regex=rewrite or self.flag("use-regex"),
            plain_middlewares=plain,
            plain_everywhere=force,
            service=self.variant(),
            definitions=self.definitions,
            transports=self.transports,
            path_middleware=self.path_rewrite() if rewrite else None,
        )

    def redirects(self) -> str:
        """The redirect middleware answering every request, if any; app-root's is
        attached like any other."""
        root = self.get("app-root")
        if root is not None:
            root = root.strip()
            if not root.startswith("/") or any(c in root for c in " \t\r\n`"):
                raise ValueError(f"annotation {PREFIX}app-root: {root!r} is not a path")
            self.define(
                "app-root",
                Middleware(
                    redirect_regex=RedirectRegex(
                        regex=r"^(https?://[^/]+)/(\?.*)?$",
                        replacement=f"${{1}}{_go_literal(root)}",
                    )
                ),
            )
        permanent, temporal = self.get("permanent-redirect"), self.get("temporal-redirect")
        if permanent is not None and temporal is not None:
            raise ValueError(
                f"annotations {PREFIX}permanent-redirect and temporal-redirect are both set"
            )
        target = permanent if permanent is not None else temporal
        if target is None:
            return ""
        target = target.strip()
        if not re.fullmatch(r"https?://[^\s`]+", target):
            key = "permanent-redirect" if permanent is not None else "temporal-redirect"
            raise ValueError(f"annotation {PREFIX}{key}: {target!r} is not an http(s) URL")
        return self.define(
            "redirect",
            Middleware(
                redirect_regex=RedirectRegex(
                    regex="^.*$", replacement=_go_literal(target), permanent=permanent is not None
                )
            ),
        )

    def allow_list(self) -> None:
        for key in ("allowlist-source-range", "whitelist-source-range"):
            value = self.get(key)
            if value is not None:
                ranges = _list(value)
                for entry in ranges:
                    try:
                        ip_range(entry)
                    except ValueError:
                        raise ValueError(
                            f"annotation {PREFIX}{key}: {entry!r} is not an IP or a CIDR"
                        ) from None
                if ranges:  # empty: no allowlist (as Traefik's provider reads it)
                    allow_list = IPAllowList(source_range=ranges)
                    self.define("allowlist", Middleware(ip_allow_list=allow_list))
                return

    def basic_auth(self) -> None:
        """``auth-type: basic``: a ``basicAuth`` whose users are the htpasswd lines of
        ``auth-secret``'s ``auth`` key (``auth-secret-type: auth-file``, the default), in
        the Ingress' namespace or another (``namespace/name``, as ingress-nginx allows
        with cross-namespace resources); ``auth-realm`` its realm. ``auth-type:
        digest``: a ``digestAuth`` of the key's htdigest lines (``name:realm:md5``)."""
        kind = self.get("auth-type")
        if kind is None:
            for key in ("auth-secret", "auth-secret-type", "auth-realm"):
                if self.get(key) is not None:
                    raise ValueError(f"annotation {PREFIX}{key} needs auth-type")
            return
        kind = kind.strip().lower()
        if kind not in ("basic", "digest"):
            raise ValueError(f"annotation {PREFIX}auth-type: {kind!r} is not basic or digest")
        if self.get("auth-url") is not None:
            raise ValueError(
                f"annotations {PREFIX}auth-type and auth-url are both set: edge asks one of them"
            )
        secret_type = (self.get("auth-secret-type") or "auth-file").strip()
        if secret_type == "auth-map":
            raise ValueError(
                f"annotation {PREFIX}auth-secret-type: auth-map is not supported by edge yet "
                "(edge keeps a Secret's auth key only: use auth-file)"
            )
        if secret_type != "auth-file":
            raise ValueError(
                f"annotation {PREFIX}auth-secret-type: {secret_type!r} is not auth-file or auth-map"
            )
        value = self.get("auth-secret")
        if value is None or not value.strip():
            raise ValueError(f"annotation {PREFIX}auth-type: basic needs auth-secret")
        namespace, _, name = value.strip().rpartition("/")
        if not name or "/" in namespace:
            raise ValueError(f"annotation {PREFIX}auth-secret: {value!r} is not [namespace/]name")
        ref: Key = (namespace or self.ing.metadata.namespace, name)
        realm = (self.get("auth-realm") or "").strip()
        if any(c < " " or c in '"\\\x7f' for c in realm):
            raise ValueError(f"annotation {PREFIX}auth-realm: {realm!r} is not a plain realm")
        secret = (self.state.secrets if self.state is not None else {}).get(ref)
        what = f"secret {ref[0]}/{ref[1]}"
        if secret is None:
            raise ValueError(f"annotation {PREFIX}auth-secret: {what} not found")
        if not secret.data.auth:
            raise ValueError(f"annotation {PREFIX}auth-secret: {what} has no key auth")
        try:
            users = [line for line in secret.data.auth.decode("utf-8").splitlines() if line]
            if kind == "digest":
                htpasswd.digest_users(users, "")
            else:
                htpasswd.basic_users(users, "")
        except UnicodeDecodeError:
            raise ValueError(f"annotation {PREFIX}auth-secret: {what}: auth is not UTF-8") from None
        except ValueError as exc:
            raise ValueError(f"annotation {PREFIX}auth-secret: {what}: key auth: {exc}") from None
        if kind == "digest":
            self.define("digest-auth", Middleware(digest_auth=DigestAuth(users=users, realm=realm)))
        else:
            self.define("basic-auth", Middleware(basic_auth=BasicAuth(users=users, realm=realm)))

    def forward_auth(self) -> None:
        url = self.get("auth-url")
        if url is None:
            for key in ("auth-response-headers", "auth-signin", "auth-method"):
                if self.get(key) is not None:
                    raise ValueError(f"annotation {PREFIX}{key} needs auth-url")
            return
        url = url.strip()
        if not re.fullmatch(r"https?://[^\s`$]+", url):
            raise ValueError(f"annotation {PREFIX}auth-url: {url!r} is not an http(s) URL")
        method = (self.get("auth-method") or "GET").strip().upper()
        if method != "GET":
            raise ValueError(
                f"annotation {PREFIX}auth-method: {method!r}: edge asks with GET, or with the "
                "client's method; not another"
            )
        signin = (self.get("auth-signin") or "").strip()
        if signin and "$" in signin:
            raise ValueError(
                f"annotation {PREFIX}auth-signin: {signin!r}: nginx variables are not expanded"
            )
        self.define(
            "auth",
            Middleware(
                forward_auth=ForwardAuth(
                    address=url,
                    auth_response_headers=_list(self.get("auth-response-headers") or ""),
                    auth_signin_url=signin,
                )
            ),
        )

    def cors(self) -> None:
        if not self.flag("enable-cors"):
            for key in sorted(self.found):
                if key.startswith("cors-"):
                    raise ValueError(f"annotation {PREFIX}{key} needs enable-cors: true")
            return
        origins = _list(self.get("cors-allow-origin") or "*")
        max_age = self.get("cors-max-age")
        self.define(
            "cors",
            Middleware(
                headers=Headers(
                    access_control_allow_origin_list=origins,
                    access_control_allow_methods=_list(self.get("cors-allow-methods") or "")
                    or _CORS_METHODS,
                    access_control_allow_headers=_list(self.get("cors-allow-headers") or "")
                    or _CORS_HEADERS,
                    access_control_allow_credentials=self.flag("cors-allow-credentials", True),
                    access_control_expose_headers=_list(self.get("cors-expose-headers") or ""),
                    access_control_max_age=(
                        _CORS_MAX_AGE if max_age is None else _int("cors-max-age", max_age)
                    ),
                    add_vary_header=origins != ["*"],
                )
            ),
        )

    def limits(self) -> None:
        rps, rpm = self.get("limit-rps"), self.get("limit-rpm")
        multiplier = _int("limit-burst-multiplier", self.get("limit-burst-multiplier") or "5", 1)
        if rps is not None and rpm is not None:
            raise ValueError(f"annotations {PREFIX}limit-rps and limit-rpm are both set")
        if rps is not None or rpm is not None:
            per_second = rps is not None
            rate = _int("limit-rps" if per_second else "limit-rpm", rps or rpm or "", 1)
            self.define(
                "ratelimit",
                Middleware(
                    rate_limit=RateLimit(
                        average=rate,
                        period=SignedDuration(1.0 if per_second else 60.0),
                        burst=rate * multiplier,
                        source_criterion=_PER_CLIENT,
                    )
                ),
            )
        connections = self.get("limit-connections")
        if connections is not None:
            self.define(
                "inflight",
                Middleware(
                    in_flight_req=InFlightReq(
                        amount=_int("limit-connections", connections, 1),
                        source_criterion=_PER_CLIENT,
                    )
                ),
            )

    def body_size(self) -> None:
        value = self.get("proxy-body-size")
        if value is not None:
            size = _size("proxy-body-size", value)
            if size:  # 0: no limit, nothing to do
                self.define(
                    "body-size", Middleware(buffering=Buffering(max_request_body_bytes=size))
                )

    def upstream_headers(self) -> None:
        """``upstream-vhost`` (the Host the backends see) and ``x-forwarded-prefix``
        (that header's value), set on the request as it goes upstream."""
        headers: dict[str, str] = {}
        for key, header in (
            ("upstream-vhost", "Host"),
            ("x-forwarded-prefix", "X-Forwarded-Prefix"),
        ):
            value = self.get(key)
            if value is None:
                continue
            value = value.strip()
            if not value or not value.isprintable() or "$" in value:
                raise ValueError(
                    f"annotation {PREFIX}{key}: {value!r} is not a plain header value "
                    "(nginx variables are not expanded)"
                )
            headers[header] = value
        if headers:
            self.define(
                "upstream-headers", Middleware(headers=Headers(custom_request_headers=headers))
            )

    def custom_headers(self) -> None:
        """``custom-headers``: the ConfigMap it names (``name`` or ``namespace/name``, of
        the Ingress' namespace) holds response headers for the client, set on every
        response (a ``headers`` middleware's ``customResponseHeaders``, as nginx's
        ``more_set_headers``). As in ingress-nginx, each name must be one of the
        provider's ``globalAllowedResponseHeaders`` (any case) and a plain token, and
        each value plain text (nginx variables are not expanded)."""
        value = self.get("custom-headers")
        if value is None:
            return
        key = self.same_namespace("custom-headers", value, "ConfigMap")
        what = f"configmap {key[0]}/{key[1]}"
        found = (self.state.config_maps if self.state is not None else {}).get(key)
        if not isinstance(found, ServicesConfigMap):
            raise ValueError(f"annotation {PREFIX}custom-headers: {what} not found")
        allowed = {h.lower() for h in self.options.allowed_response_headers}
        headers: dict[str, str] = {}
        for name, text in sorted(found.data.items()):
            if not _HEADER_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"annotation {PREFIX}custom-headers: {what}: {name!r} is not a header name"
                )
            if name.lower() not in allowed:
                raise ValueError(
                    f"annotation {PREFIX}custom-headers: {what}: header {name} is not in the "
                    "provider's globalAllowedResponseHeaders"
                )
            if not text or not text.isprintable() or "$" in text:
                raise ValueError(
                    f"annotation {PREFIX}custom-headers: {what}: {name}: {text!r} is not a plain "
                    "header value (nginx variables are not expanded)"
                )
            headers[name] = text
        if headers:
            self.define(
                "custom-headers", Middleware(headers=Headers(custom_response_headers=headers))
            )

    def fallbacks(self) -> _Fallback | None:
        """``default-backend`` (a Service of the Ingress' namespace, its first port) and
        ``custom-http-errors`` (statuses, comma-separated), checked; what
        :func:`_fallbacks` makes of them, None when neither is set."""
        service = self.get("default-backend")
        codes_text = self.get("custom-http-errors")
        if service is None and codes_text is None:
            return None
        fallback: Key | None = None
        if service is not None:
            fallback = self.same_namespace("default-backend", service, "Service")
            svc = (self.state.services if self.state is not None else {}).get(fallback)
            what = f"service {fallback[0]}/{fallback[1]}"
            if svc is None:
                raise ValueError(f"annotation {PREFIX}default-backend: {what} not found")
            if not any(p.protocol in ("TCP", "") for p in svc.spec.ports[:1]):
                raise ValueError(f"annotation {PREFIX}default-backend: {what} has no TCP port")
        codes: list[str] = []
        if codes_text is not None:
            for code in _list(codes_text):
                if not (code.isascii() and code.isdigit() and 300 <= int(code) <= 599):
                    raise ValueError(
                        f"annotation {PREFIX}custom-http-errors: {code!r} is not a status from "
                        "300 to 599"
                    )
                codes.append(str(int(code)))
            if fallback is None and not self.options.default_backend_service:
                raise ValueError(
                    f"annotation {PREFIX}custom-http-errors needs a default backend to answer "
                    f"them: {PREFIX}default-backend, or the provider's defaultBackendService"
                )
        return _Fallback(fallback, tuple(codes))

    def same_namespace(self, key: str, value: str, kind: str) -> Key:
        """A ``name`` or ``namespace/name`` annotation naming an object of the Ingress'
        namespace (another is refused, as Traefik's provider refuses it by default)."""
        ns = self.ing.metadata.namespace
        namespace, slash, name = value.strip().rpartition("/")
        if not name or "/" in namespace or (slash and not namespace):
            raise ValueError(f"annotation {PREFIX}{key}: {value!r} is not [namespace/]name")
        if slash and namespace != ns:
            raise ValueError(
                f"annotation {PREFIX}{key}: {value!r}: a {kind} of namespace {ns} is needed "
                "(another namespace's is refused)"
            )
        return (ns, name)

    def aliases(self) -> list[str]:
        """``server-alias``: more host names for every host of the Ingress, checked."""
        value = self.get("server-alias")
        if value is None:
            return []
        names = []
        for name in _list(value):
            try:
                names.append(base._check_host(name))
            except ValueError as exc:
                raise ValueError(f"annotation {PREFIX}server-alias: {exc}") from None
        return names

    def rewrite(self) -> bool:
        target = self.get("rewrite-target")
        if target is None:
            return False
        # It becomes a replacement in the request line: no whitespace, control
        # character or backquote (edge's rule quoting).
        if not target.strip() or any(c <= " " or c in "\x7f`" for c in target):
            raise ValueError(f"annotation {PREFIX}rewrite-target: {target!r} is not a path")
        return True

    def path_rewrite(self) -> base.PathMiddleware:
        target = (self.get("rewrite-target") or "").strip()

        def rewrite(path: str) -> Middleware:
            regex = f"(?i)^{path}"
            return Middleware(
                replace_path_regex=ReplacePathRegex(
                    regex=regex, replacement=nginx_captures(target, regex)
                )
            )

        return rewrite

    def variant(self) -> ServiceVariant | None:
        scheme: str | None = None
        protocol = self.get("backend-protocol")
        if protocol is not None:
            upper = protocol.strip().upper()
            if upper not in ("HTTP", "HTTPS", "GRPC", "GRPCS"):
                raise ValueError(
                    f"annotation {PREFIX}backend-protocol: {protocol!r}: edge speaks HTTP, "
                    "HTTPS and gRPC to backends (not AJP or FCGI)"
                )
            # GRPC: HTTP/2 without TLS (h2c); GRPCS: HTTPS, where a gRPC request offers h2.
            scheme = {"GRPC": "h2c", "GRPCS": "https"}.get(upper, upper.lower())
        sticky = self.affinity()
        cluster_ip = self.flag("service-upstream")
        if cluster_ip:
            self.check_cluster_ips()
        transport = self.transport(scheme == "https")
        if scheme is None and sticky is None and not cluster_ip and transport is None:
            return None
        return ServiceVariant(  # one per Ingress: named after it
            suffix=self.prefix,
            scheme=scheme,
            sticky=sticky,
            cluster_ip=cluster_ip,
            servers_transport=transport,
        )

    def transport(self, https: bool) -> str | None:
        """A serversTransport of this Ingress' own, its name; None when the default
        one does. ``proxy-connect-timeout`` bounds the dial, ``proxy-read-timeout``
        the wait for the response's head (edge bounds no later read) and
        ``proxy-send-timeout`` how long the backend may take none of the request
        (``writeTimeout``: nginx's time between two successive writes, which edge
        measures while the connection's buffer stays full); seconds, nginx's 60 for
        those not given. To HTTPS backends (``https``) ingress-nginx does not
        verify the certificate unless ``proxy-ssl-verify: "on"``; ``proxy-ssl-secret``
        (a Secret of the Ingress' namespace) gives the CAs (``ca.crt``) and the client
        certificate (``tls.crt``, ``tls.key``); ``proxy-ssl-name`` the name verified
        and sent as SNI."""
        connect, read = self.get("proxy-connect-timeout"), self.get("proxy-read-timeout")
        send = self.get("proxy-send-timeout")
        ssl_keys = sorted(k for k in self.found if k.startswith("proxy-ssl-"))
        if ssl_keys and not https:
            raise ValueError(f"annotation {PREFIX}{ssl_keys[0]} needs backend-protocol: HTTPS")
        if connect is None and read is None and send is None and not https:
            return None
        timeouts = ForwardingTimeouts(
            dial_timeout=Duration(_int("proxy-connect-timeout", connect, 1) if connect else 60),
            response_header_timeout=Duration(_int("proxy-read-timeout", read, 1) if read else 60),
            write_timeout=Duration(_int("proxy-send-timeout", send, 1) if send else 60),
        )
        if connect is None and read is None and send is None:
            timeouts = ForwardingTimeouts()
        verify = (self.get("proxy-ssl-verify") or "off").strip().lower()
        if verify not in ("on", "off"):
            raise ValueError(f"annotation {PREFIX}proxy-ssl-verify: {verify!r} is not on or off")
        sni = (self.get("proxy-ssl-server-name") or "on").strip().lower()
        if sni != "on":
            raise ValueError(
                f"annotation {PREFIX}proxy-ssl-server-name: {sni!r}: edge always sends SNI"
            )
        root_cas: list[str] = []
        certificates: list[ClientCertificate] = []
        secret = self.get("proxy-ssl-secret")
        if secret is not None:
            key = self.secret_key("proxy-ssl-secret", secret)
            secrets = self.state.secrets if self.state is not None else {}
            try:
                root_cas = [ca_bundle(secrets, key)]
            except SecretError as exc:
                raise ValueError(f"annotation {PREFIX}proxy-ssl-secret: {exc.reason}") from None
            found = secrets.get(key)
            if found is not None and found.data.tls_crt and found.data.tls_key:
                try:
                    pair = tls_certificate(secrets, key, any_type=True)
                except SecretError as exc:
                    raise ValueError(f"annotation {PREFIX}proxy-ssl-secret: {exc.reason}") from None
                certificates = [ClientCertificate(cert_file=pair.cert_file, key_file=pair.key_file)]
        name = f"{self.prefix}-transport"
        self.transports[name] = ServersTransport(
            server_name=(self.get("proxy-ssl-name") or "").strip(),
            insecure_skip_verify=https and verify == "off",
            root_cas=root_cas,
            certificates=certificates,
            forwarding_timeouts=timeouts,
        )
        return name

    def secret_key(self, key: str, value: str) -> Key:
        """A Secret named ``name`` or ``namespace/name``, of the Ingress' namespace."""
        ns = self.ing.metadata.namespace
        namespace, slash, name = value.strip().rpartition("/")
        if (slash and namespace != ns) or not name:
            raise ValueError(
                f"annotation {PREFIX}{key}: {value!r}: a Secret of namespace {ns} is needed"
            )
        return (ns, name)

    def check_cluster_ips(self) -> None:
        """``service-upstream`` needs a cluster IP on every Service the Ingress names."""
        if self.state is None:
            return
        ns = self.ing.metadata.namespace
        backends = [self.ing.spec.default_backend] if self.ing.spec.default_backend else []
        for rule in self.ing.spec.rules:
            backends += [p.backend for p in (rule.http.paths if rule.http else [])]
        for backend in backends:
            if backend is None or backend.service is None:
                continue
            svc = self.state.services.get((ns, backend.service.name))
            if svc is not None and svc.spec.cluster_ip in ("", "None"):
                raise ValueError(
                    f"annotation {PREFIX}service-upstream: service {ns}/{svc.metadata.name} "
                    "has no cluster IP (headless)"
                )

    def affinity(self) -> Sticky | None:
        mode = self.get("affinity")
        cookie_keys = sorted(k for k in self.found if k.startswith("session-cookie-"))
        if mode is None:
            if cookie_keys:
                raise ValueError(f"annotation {PREFIX}{cookie_keys[0]} needs affinity: cookie")
            return None
        if mode.strip() != "cookie":
            raise ValueError(f"annotation {PREFIX}affinity: {mode!r} is not cookie")
        max_age = self.get("session-cookie-max-age") or self.get("session-cookie-expires")
        same_site = (self.get("session-cookie-samesite") or "").strip().lower()
        if same_site not in ("", "none", "lax", "strict"):
            raise ValueError(
                f"annotation {PREFIX}session-cookie-samesite: {same_site!r} is not None, Lax "
                "or Strict"
            )
        return Sticky(
            cookie=Cookie(
                name=(self.get("session-cookie-name") or "INGRESSCOOKIE").strip(),
                secure=self.flag("session-cookie-secure"),
                http_only=True,  # ingress-nginx always sets HttpOnly
                same_site=same_site,  # type: ignore[arg-type]  # checked above
                max_age=0 if max_age is None else _int("session-cookie-max-age", max_age),
                path=(self.get("session-cookie-path") or "/").strip(),
                domain=(self.get("session-cookie-domain") or "").strip(),
            )
        )


# --- canaries ----------------------------------------------------------------------------


class _Canary(NamedTuple):
    header: str
    header_value: str
    cookie: str
    weight: int
    total: int


_CANARY_ONLY = frozenset(
    {
        "canary",
        "canary-by-header",
        "canary-by-header-value",
        "canary-by-cookie",
        "canary-weight",
        "canary-weight-total",
    }
)
_TOKEN_RE = re.compile(r"[!#$%&'*+.^_|~0-9A-Za-z-]{1,256}")


def _canary(ing: Ingress) -> _Canary | None:
    """The canary settings of ``ing``, None when it is not a canary; ``ValueError``
    naming what is wrong."""
    found = _annotations(ing)
    if "canary" not in found or not _bool("canary", found["canary"]):
        stray = sorted(k for k in _CANARY_ONLY - {"canary"} if k in found)
        if stray:
            raise ValueError(f"annotation {PREFIX}{stray[0]} needs canary: true")
        return None
    _check_names(found)
    other = sorted(set(found) - _CANARY_ONLY)
    if other:
        raise ValueError(
            f"annotation {PREFIX}{other[0]}: a canary Ingress takes its other annotations "
            "from the Ingress it is the canary of (ingress-nginx ignores them there)"
        )
    header = found.get("canary-by-header", "").strip()
    cookie = found.get("canary-by-cookie", "").strip()
    for key, token in (("canary-by-header", header), ("canary-by-cookie", cookie)):
        if token and not _TOKEN_RE.fullmatch(token):
            raise ValueError(f"annotation {PREFIX}{key}: {token!r} is not a header or cookie name")
    value = found.get("canary-by-header-value", "").strip()
    if value and (not header or "`" in value or not value.isprintable()):
        raise ValueError(f"annotation {PREFIX}canary-by-header-value: {value!r} is not usable")
    total = _int("canary-weight-total", found.get("canary-weight-total", "100"), 1, 10**6)
    weight = _int("canary-weight", found.get("canary-weight", "0"), 0, total)
    return _Canary(header, value, cookie, weight, total)


def _canaries(
    conversion: Conversion, canaries: Mapping[Key, _Canary], problems: list[Problem]
) -> Conversion:
    """Each canary Ingress' routers folded into the routers of the other Ingress with
    the same rule (host and path) and TLS: its header and cookie become routers one
    priority above that router's (a request saying ``always``, or the header's value,
    goes to the canary; ``never`` to the main service; the header decides before the
    cookie, as in nginx), its weight a weighted service
    of the two in the main router's place. A canary no Ingress shares a route with is
    left out with a problem (ingress-nginx serves it as a plain Ingress; edge would then
    serve a canary to everyone)."""
    http = conversion.configuration.http
    if not canaries or http is None:
        return conversion
    routers = dict(http.routers)
    services = dict(http.services)
    main_by_rule: dict[tuple[str, bool], str] = {}
    for name in sorted(routers):
        owner = conversion.owners.get(name)
        if owner is not None and owner not in canaries:
            main_by_rule.setdefault((routers[name].rule, routers[name].tls is not None), name)
    for name in sorted(routers):
        owner = conversion.owners.get(name)
        if owner is None or owner not in canaries:
            continue
        settings = canaries[owner]
        router = routers.pop(name)
        main_name = main_by_rule.get((router.rule, router.tls is not None))
        if main_name is None:
            found = Problem(
                f"{owner[0]}/{owner[1]}",
                "metadata.annotations",
                "invalid-annotation",
                f"canary route {router.rule} has no main Ingress with the same host and path",
            )
            problems.append(found)
            routers[f"{name}-left-out"] = Router(
                rule=router.rule,
                service="",
                entry_points=router.entry_points,
                rule_syntax=router.rule_syntax,
                problems=[str(found)],
            )
            continue
        main = routers[main_name]
        stable, canary = main.service, router.service
        if settings.weight:
            weighted = f"{stable}-canary-{base._normalize(f'{owner[0]}-{owner[1]}')}"
            services[weighted] = Service(
                weighted=Weighted(
                    services=[
                        WRRService(name=stable, weight=settings.total - settings.weight),
                        WRRService(name=canary, weight=settings.weight),
                    ]
                )
            )
            routers[main_name] = main = msgspec.structs.replace(main, service=weighted)

        pins: list[tuple[str, str, str]] = []  # (name suffix, extra matcher, service)
        if settings.header:
            header = settings.header
            if settings.header_value:
                match = f"Header(`{header}`, `{settings.header_value}`)"
                pins.append(("canary-header", match, canary))
            else:
                pins.append(("canary-header", f"Header(`{header}`, `always`)", canary))
                pins.append(("canary-header-never", f"Header(`{header}`, `never`)", stable))
        if settings.cookie:
            cookie = re.escape(settings.cookie)
            # the header decides first: the cookie only where it did not
            unless = ""
            if settings.header_value:
                unless = f" && !Header(`{settings.header}`, `{settings.header_value}`)"
            elif settings.header:
                unless = f" && !HeaderRegexp(`{settings.header}`, `^(always|never)$`)"
            for value, to in (("always", canary), ("never", stable)):
                regex = rf"(^|;\s*){cookie}={value}(;|$)"
                match = f"HeaderRegexp(`Cookie`, `{regex}`){unless}"
                pins.append((f"canary-cookie-{value}", match, to))
        for suffix, match, to in pins:
            routers[f"{name}-{suffix}"] = msgspec.structs.replace(
                main, rule=f"({main.rule}) && {match}", priority=main.priority + 1, service=to
            )
    http = msgspec.structs.replace(
        http, routers=dict(sorted(routers.items())), services=dict(sorted(services.items()))
    )
    configuration = msgspec.structs.replace(conversion.configuration, http=http)
    return conversion._replace(configuration=configuration, problems=problems)


# --- default backends and custom errors --------------------------------------------------


class _Fallback(NamedTuple):
    """An Ingress' ``default-backend`` (its Service, None when unset) and
    ``custom-http-errors`` (the statuses, empty when unset)."""

    service: Key | None
    codes: tuple[str, ...]


_HEADER_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")  # ingress-nginx's, for custom-headers
_DEFAULT_BACKEND = "default-backend"
# The controller's default backend's routers: a dot, which no name made from an Ingress
# holds (those are runs of letters and digits joined by "-"), keeps them apart.
_CATCH_ALL = "default-backend.all"
_DEFAULT_PRIORITY = -1  # the controller's default backend: below every other route


class _Services:
    """The services a post-processing step adds to a conversion: the first port of a
    Service, built by the Ingress conversion's own builder and named as it names them,
    each added to ``service_names`` (so endpoint churn updates it in place) once."""

    def __init__(self, conversion: Conversion, state: ClusterState, options: NGINXOptions):
        http = conversion.configuration.http
        self.services: dict[str, Service] = dict(http.services) if http is not None else {}
        self.names = dict(conversion.service_names)
        self.builder = base._Services(state, ingress_options(options))

    def first_port(self, key: Key) -> tuple[str, base.ServiceKey]:
        """The name and key of the service for the first port of Service ``key``, made
        if need be; ``ValueError`` with the reason when it cannot be served."""
        svc = self.builder.state.services.get(key)
        what = f"service {key[0]}/{key[1]}"
        if svc is None:
            raise ValueError(f"{what} not found")
        if not svc.spec.ports or svc.spec.ports[0].protocol not in ("TCP", ""):
            raise ValueError(f"{what} has no TCP port")
        port = ServiceBackendPort(number=svc.spec.ports[0].port)
        backend = IngressBackend(service=IngressServiceBackend(name=key[1], port=port))
        try:
            service_key = self.builder.resolve(key[0], backend)
        except base._Refused as refused:
            raise ValueError(refused.reason) from None
        name = self.names.get(service_key)
        if name is None:
            name = base._normalize("-".join(service_key))
            while name in self.services:
                name = f"{name}-{_DEFAULT_BACKEND}"
            self.names[service_key] = name
            self.services[name] = self.builder.built[service_key]
        return name, service_key

    def done(self, conversion: Conversion, http: HTTPConfiguration, **more: Any) -> Conversion:
        http = msgspec.structs.replace(http, services=dict(sorted(self.services.items())))
        configuration = msgspec.structs.replace(conversion.configuration, http=http)
        return conversion._replace(
            configuration=configuration,
            service_names=self.names,
            refused=conversion.refused | frozenset(self.builder.refused),
            **more,
        )


def _controller_default(
    conversion: Conversion, state: ClusterState, options: NGINXOptions
) -> tuple[Conversion, str]:
    """The provider's ``defaultBackendService`` (``namespace/name``, its first port, as
    ingress-nginx's ``--default-backend-service``): it answers what no route takes, a
    ``PathPrefix(`/`)`` router below every other (an Ingress' own defaultBackend
    catch-all ranks above it), and the paths none of a host's routes take, a ``Host``
    router at the bottom of that host's tier (under an Ingress' defaultBackend for the
    host, over every route of another tier: nginx's server for the host answers them;
    on plain HTTP it redirects to HTTPS where the host's routes do).
    Its routers are ``default-backend.all`` and ``default-backend.<host>`` (``-tls``
    for HTTPS). Its service's name (for :func:`_fallbacks`), "" when unset or when it
    cannot be served: then a disabled ``default-backend.all`` router names why."""
    if not options.default_backend_service:
        return conversion, ""
    http = conversion.configuration.http or HTTPConfiguration()
    namespace, _, name = options.default_backend_service.partition("/")
    added = _Services(conversion, state, options)
    routers = dict(http.routers)
    try:
        service, _ = added.first_port((namespace, name))
    except ValueError as exc:
        routers[_CATCH_ALL] = Router(
            rule="PathPrefix(`/`)",
            service="",
            rule_syntax=base.RULE_SYNTAX,
            problems=[f"defaultBackendService {namespace}/{name}: {exc}"],
        )
        http = msgspec.structs.replace(http, routers=routers)
        return conversion._replace(
            configuration=msgspec.structs.replace(conversion.configuration, http=http)
        ), ""
    hosts: dict[str, tuple[bool, list[str]]] = {}  # host -> TLS routers?, ssl-redirect
    for router_name, router in sorted(http.routers.items()):
        found = _HOST_PREFIX_RE.match(router.rule)
        if router_name not in conversion.owners or found is None:
            continue
        has_tls, redirect = hosts.get(found.group(1), (False, []))
        if router.tls is None and router.middlewares[:1] and not redirect:
            redirect = [m for m in router.middlewares[:1] if m.endswith("-ssl-redirect")]
        hosts[found.group(1)] = (has_tls or router.tls is not None, redirect)
    tls = RouterTLS()
    for host, (has_tls, redirect) in sorted(hosts.items()):
        base_name = f"{_DEFAULT_BACKEND}.{base._normalize(base._host_name_part(host))}"
        for suffix, router_tls in (("", None), ("-tls", tls))[: 2 if has_tls else 1]:
            routers[base_name + suffix] = Router(
                rule=f"Host(`{host}`)",
                service=service,
                priority=base._tier(host) - 1,
                rule_syntax=base.RULE_SYNTAX,
                middlewares=redirect if router_tls is None else [],
                tls=router_tls,
            )
    for suffix, router_tls in (("", None), ("-tls", tls)):
        routers[_CATCH_ALL + suffix] = Router(
            rule="PathPrefix(`/`)",
            service=service,
            priority=_DEFAULT_PRIORITY,
            rule_syntax=base.RULE_SYNTAX,
            tls=router_tls,
        )
    http = msgspec.structs.replace(http, routers=dict(sorted(routers.items())))
    return added.done(conversion, http), service


def _fallbacks(
    conversion: Conversion,
    state: ClusterState,
    options: NGINXOptions,
    fallbacks: Mapping[Key, _Fallback],
    controller: str,
) -> Conversion:
    """``default-backend`` and ``custom-http-errors``, on each router of the Ingresses
    setting them (ingress-nginx's semantics).

    ``default-backend`` (the first port of a Service of the Ingress' namespace) answers
    while the router's own service has no server up: the router's service becomes a
    ``failover`` of it and the default backend (read with the Ingress' own annotations,
    as ingress-nginx copies the upstream), so endpoints coming and going switch between
    them in place. ``custom-http-errors``: an ``errors`` middleware, first after the
    ssl-redirect, whose ``service`` is that default backend, else the provider's
    (``controller``), with ``nginxHeaders``: the Ingress' namespace and name, and the
    router's Service and port as the Ingress names it (so one middleware per Service
    port). A default backend that cannot be served leaves its Ingress out."""
    http = conversion.configuration.http
    if not fallbacks or http is None:
        return conversion
    added = _Services(conversion, state, options)
    by_name = {name: key for key, name in added.names.items()}
    variants = dict(conversion.variants)
    routers = dict(http.routers)
    middlewares = dict(http.middlewares)
    problems = list(conversion.problems)
    fallback_names: dict[Key, tuple[str, base.ServiceKey]] = {}
    served = set(conversion.owners.values())
    for key, wanted in sorted(fallbacks.items()):
        if wanted.service is None or key not in served:
            continue
        try:
            fallback_names[key] = added.first_port(wanted.service)
        except ValueError as exc:
            _leave_out(
                routers,
                conversion.owners,
                key,
                f"annotation {PREFIX}default-backend: {exc}",
                problems,
            )
    for name in sorted(routers):
        router = routers[name]
        owner = conversion.owners.get(name)
        settings = fallbacks.get(owner) if owner is not None else None
        if owner is None or settings is None or router.problems:
            continue
        main = router.service
        service_key, variant = variants.get(main, (by_name.get(main), None))
        if service_key is None:
            continue
        fallback, fallback_key = fallback_names.get(owner, ("", None))
        if fallback_key is not None and variant is not None:  # read as the Ingress reads
            named = f"{fallback}-{variant.suffix}"
            if named not in added.services:
                kube = state.services.get(fallback_key[:2])
                built = added.services[fallback]
                added.services[named] = variant.apply(built, kube, fallback_key[2])
                variants[named] = (fallback_key, variant)
            fallback = named
        if fallback:
            wrapped = f"{main}-or-{fallback}"
            added.services[wrapped] = Service(failover=Failover(service=main, fallback=fallback))
            router = msgspec.structs.replace(router, service=wrapped)
        pages = fallback or controller
        if settings.codes and pages:
            ing = state.ingresses[owner]
            port = _written_port(ing, service_key, state)
            errors = f"{base._normalize(f'{owner[0]}-{owner[1]}')}-custom-http-errors-{base._normalize(f'{service_key[1]}-{port}')}"
            middlewares[errors] = Middleware(
                errors=ErrorPage(
                    status=list(settings.codes),
                    service=pages,
                    nginx_headers={
                        "X-Namespace": [owner[0]],
                        "X-Ingress-Name": [owner[1]],
                        "X-Service-Name": [service_key[1]],
                        "X-Service-Port": [port],
                    },
                )
            )
            chain = list(router.middlewares)
            at = 1 if chain and chain[0].endswith("-ssl-redirect") else 0
            router = msgspec.structs.replace(router, middlewares=[*chain[:at], errors, *chain[at:]])
        routers[name] = router
    http = msgspec.structs.replace(
        http, routers=routers, middlewares=dict(sorted(middlewares.items()))
    )
    return added.done(conversion, http, variants=variants, problems=problems)


def _written_port(ing: Ingress, service_key: tuple[str, str, str], state: ClusterState) -> str:
    """The Service port of ``service_key`` as ``ing``'s backends name it (its number or
    its name: ingress-nginx's ``$service_port``)."""
    svc = state.services.get(service_key[:2])
    backends = [ing.spec.default_backend] if ing.spec.default_backend is not None else []
    for rule in ing.spec.rules:
        backends += [p.backend for p in (rule.http.paths if rule.http else [])]
    for backend in backends:
        ref = backend.service if backend is not None else None
        if svc is None or ref is None or ref.name != service_key[1]:
            continue
        found = service_port(svc, ref.port.number, ref.port.name)
        if found is not None and (found.name or str(found.port)) == service_key[2]:
            return str(ref.port.number) if ref.port.number else ref.port.name
    return service_key[2]


def _leave_out(
    routers: dict[str, Router],
    owners: Mapping[str, Key],
    key: Key,
    reason: str,
    problems: list[Problem],
) -> None:
    """Every router of Ingress ``key`` becomes a stand-in disabled with ``reason``."""
    found = Problem(f"{key[0]}/{key[1]}", "metadata.annotations", "invalid-annotation", reason)
    problems.append(found)
    for name, router in list(routers.items()):
        if owners.get(name) == key:
            routers[name] = Router(
                rule=router.rule,
                service="",
                entry_points=router.entry_points,
                rule_syntax=router.rule_syntax,
                problems=[str(found)],
            )


# --- server-alias ------------------------------------------------------------------------


def _aliases(conversion: Conversion, aliases: Mapping[Key, list[str]]) -> Conversion:
    """Each router of an Ingress with ``server-alias`` also answers for the aliases: its
    ``Host(`h`)`` becomes ``(Host(`h`) || Host(`alias`)...)`` (nginx's ``server_name``
    list); host-less routers are left as they are."""
    http = conversion.configuration.http
    if not aliases or http is None:
        return conversion
    routers = dict(http.routers)
    for name, router in http.routers.items():
        owner = conversion.owners.get(name)
        if owner is None or owner not in aliases:
            continue
        found = _HOST_PREFIX_RE.match(router.rule)
        if found is None:
            continue
        hosts = " || ".join(f"Host(`{h}`)" for h in [found.group(1), *aliases[owner]])
        rule = f"({hosts}){router.rule[found.end() :]}"
        routers[name] = msgspec.structs.replace(router, rule=rule)
    configuration = msgspec.structs.replace(
        conversion.configuration, http=msgspec.structs.replace(http, routers=routers)
    )
    return conversion._replace(configuration=configuration)


_HOST_PREFIX_RE = re.compile(r"Host\(`([^`]+)`\)")


# --- ssl-passthrough ---------------------------------------------------------------------

_HOST_RULE_RE = re.compile(r"Host\(`([^`]+)`\)")


def _passthrough(
    conversion: Conversion, passthrough: frozenset[Key], problems: list[Problem]
) -> Conversion:
    """The hosts of each ``ssl-passthrough`` Ingress as TCP routers (``HostSNI``, TLS
    passed through) to the servers of its ``/`` path's service: the client's TLS goes
    to the backend untouched (its certificate arrives as the backend sent it). Its
    plain-HTTP routers stay (ingress-nginx serves the host's HTTP as usual); its TLS
    routers go, TLS being the backend's. An Ingress none of whose hosts has a ``/``
    path is a problem."""
    http = conversion.configuration.http
    if not passthrough or http is None:
        return conversion
    routers = dict(http.routers)
    tcp_routers: dict[str, TCPRouter] = {}
    tcp_services: dict[str, TCPService] = {}
    hosts: dict[Key, set[str]] = {}
    for name in sorted(http.routers):
        owner = conversion.owners.get(name)
        if owner is None or owner not in passthrough:
            continue
        router = routers[name]
        if router.tls is not None:
            del routers[name]
            continue
        found = _HOST_RULE_RE.fullmatch(router.rule)
        if found is None:
            continue
        host = found.group(1)
        service = http.services[router.service].load_balancer
        if service is None:  # a canary's weighted service: its TLS is not passed through
            continue
        hosts.setdefault(owner, set()).add(host)
        tcp_services[router.service] = TCPService(
            load_balancer=TCPLoadBalancer(
                servers=[TCPServer(address=s.url.partition("://")[2]) for s in service.servers]
            )
        )
        tcp_routers[f"{name}-passthrough"] = TCPRouter(
            rule=f"HostSNI(`{host}`)",
            service=router.service,
            entry_points=router.entry_points,
            rule_syntax=router.rule_syntax,
            tls=TCPRouterTLS(passthrough=True),
        )
    named = {p.ingress for p in problems}
    for key in sorted(passthrough):
        label = f"{key[0]}/{key[1]}"
        if key in conversion.selected and not hosts.get(key) and label not in named:
            problems.append(
                Problem(
                    label,
                    "metadata.annotations",
                    "invalid-annotation",
                    f"annotation {PREFIX}ssl-passthrough: no host of the Ingress has a "
                    "path / whose backend the TLS connections could go to",
                )
            )
    configuration = msgspec.structs.replace(
        conversion.configuration,
        http=msgspec.structs.replace(http, routers=routers),
        tcp=TCPConfiguration(routers=tcp_routers, services=tcp_services) if tcp_routers else None,
    )
    return conversion._replace(configuration=configuration, problems=problems)


# --- the conversion ----------------------------------------------------------------------


def ingress_options(options: NGINXOptions) -> IngressOptions:
    """What the Ingress conversion reads of this source's options (for
    :func:`~edge.providers.kubernetes.ingress.update_endpoints` too)."""
    return IngressOptions(
        allow_empty_services=options.allow_empty_services,
        allow_external_name_services=options.allow_external_name_services,
        scheme_by_port=False,  # plain HTTP unless backend-protocol says otherwise
    )


def convert(state: ClusterState, options: NGINXOptions | None = None) -> Conversion:
    """The dynamic configuration for ``state`` as ingress-nginx would serve it (see the
    module doc)."""
    options = options or NGINXOptions()
    canaries: dict[Key, _Canary] = {}
    passthrough: set[Key] = set()
    aliases: dict[Key, list[str]] = {}
    fallbacks: dict[Key, _Fallback] = {}
    for key, ing in state.ingresses.items():
        try:
            settings = _canary(ing)
            reader = _Reader(ing, state, options)
            if settings is None and reader.flag("ssl-passthrough"):
                passthrough.add(key)
            if settings is None and (names := reader.aliases()):
                aliases[key] = names
            if settings is None and (fallback := reader.fallbacks()) is not None:
                fallbacks[key] = fallback
        except ValueError:
            continue  # the conversion names it, reading the annotations again
        if settings is not None:
            canaries[key] = settings

    def annotate(ing: Ingress, state: ClusterState) -> RouterOptions:
        _canary(ing)  # raises for a bad canary, before it is read as a plain Ingress
        if _canary(ing) is not None:
            return RouterOptions([], [], 0, False)
        return _Reader(ing, state, options).read()

    conversion = base.convert(
        state,
        ingress_options(options),
        select=lambda ing: is_selected(ing, state, options),
        annotate=annotate,
    )
    conversion, controller = _controller_default(conversion, state, options)
    conversion = _fallbacks(conversion, state, options, fallbacks, controller)
    conversion = _canaries(conversion, canaries, list(conversion.problems))
    conversion = _aliases(conversion, aliases)
    return _passthrough(conversion, frozenset(passthrough), list(conversion.problems))


# --- tcp-services and udp-services ConfigMaps ---------------------------------------------


class L4Problem(msgspec.Struct, frozen=True):
    """Why an entry of a ``tcp-services`` / ``udp-services`` ConfigMap is not served;
    ``config_map`` is ``namespace/name``, ``where`` the entry (``data.9000``)."""

    config_map: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"configmap {self.config_map}: {self.where}: {self.reason}"


class L4Conversion(NamedTuple):
    """What :func:`convert_services` returns."""

    tcp: TCPConfiguration | None
    udp: UDPConfiguration | None
    problems: list[L4Problem]


_ENTRY_RE = re.compile(
    r"(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/(?P<svc>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r":(?P<port>[^:]+)(?P<flags>(:[A-Za-z]*){0,2})"
)


def convert_services(
    state: ClusterState,
    tcp_services: tuple[str, Mapping[str, str]] | None,
    udp_services: tuple[str, Mapping[str, str]] | None,
    entry_points: Sequence[EntryPointPort],
) -> L4Conversion:
    """ingress-nginx's ``tcp-services`` and ``udp-services`` ConfigMaps ((``namespace/
    name``, data) each) as TCP and UDP routes. An entry ``"<port>": "<namespace>/
    <service>:<service port>[:PROXY][:PROXY]"`` serves the edge entry point of that port
    and protocol (its TCP routes match every connection, ``HostSNI(`*`)``) with the
    ready endpoints of that Service port. The first ``PROXY`` is the PROXY protocol from
    clients, which is the entry point's own setting (``proxyProtocol``): named when
    asked, since a route cannot turn it on; the second sends a PROXY v1 header to the
    backends (TCP only). An entry whose port has no entry point, whose Service or port
    is missing, or that is malformed, is a problem, and a router of its name disabled
    with it stands in its place (so the API and ``edge check`` show it); the others are
    served. Routers and services are named ``tcp-services-<port>`` and
    ``udp-services-<port>``."""
    problems: list[L4Problem] = []
    tcp_routers: dict[str, TCPRouter] = {}
    tcp_svcs: dict[str, TCPService] = {}
    udp_routers: dict[str, UDPRouter] = {}
    udp_svcs: dict[str, UDPService] = {}
    for protocol, source in (("TCP", tcp_services), ("UDP", udp_services)):
        if source is None:
            continue
        label, data = source
        slices = slices_by_service(state.endpoint_slices)
        for key in sorted(data, key=lambda k: (len(k), k)):
            where = f"data.{key}"
            name = f"{protocol.lower()}-services-{base._normalize(key) or 'entry'}"
            while name in tcp_routers or name in udp_routers:
                name = f"{name}-{len(tcp_routers) + len(udp_routers)}"
            try:
                entry_point, servers, send_proxy = _l4_entry(
                    state, slices, protocol, key, data[key], entry_points
                )
            except ValueError as exc:
                problem = L4Problem(label, where, str(exc))
                problems.append(problem)
                # A stand-in, disabled with the reason: the API and edge check show it.
                if protocol == "TCP":
                    tcp_routers[name] = TCPRouter(
                        rule="HostSNI(`*`)", service="", problems=[str(problem)]
                    )
                else:
                    udp_routers[name] = UDPRouter(service="", problems=[str(problem)])
                continue
            if protocol == "TCP":
                tcp_routers[name] = TCPRouter(
                    rule="HostSNI(`*`)", service=name, entry_points=[entry_point]
                )
                tcp_svcs[name] = TCPService(
                    load_balancer=TCPLoadBalancer(
                        servers=[TCPServer(address=a) for a in servers],
                        proxy_protocol=ProxyProtocol(version=1) if send_proxy else None,
                    )
                )
            else:
                udp_routers[name] = UDPRouter(service=name, entry_points=[entry_point])
                udp_svcs[name] = UDPService(
                    load_balancer=UDPLoadBalancer(servers=[UDPServer(address=a) for a in servers])
                )
    return L4Conversion(
        TCPConfiguration(routers=tcp_routers, services=tcp_svcs) if tcp_routers else None,
        UDPConfiguration(routers=udp_routers, services=udp_svcs) if udp_routers else None,
        problems,
    )


def with_services(conversion: Conversion, l4: L4Conversion) -> Conversion:
    """``conversion`` with ``l4``'s TCP and UDP routes added, beside the TCP routers
    ``ssl-passthrough`` made (their names cannot meet: ``tcp-services-<port>`` against
    ``<router>-passthrough``). ``l4``'s problems are the caller's to report."""
    if l4.tcp is None and l4.udp is None:
        return conversion
    configuration = conversion.configuration
    tcp = configuration.tcp
    if l4.tcp is not None:
        tcp = l4.tcp if tcp is None else msgspec.structs.replace(
            tcp,
            routers={**tcp.routers, **l4.tcp.routers},
            services={**tcp.services, **l4.tcp.services},
        )  # fmt: skip
    configuration = msgspec.structs.replace(configuration, tcp=tcp, udp=l4.udp)
    return conversion._replace(configuration=configuration)


def _l4_entry(
    state: ClusterState,
    slices: Mapping[Key, list[EndpointSlice]],
    protocol: str,
    key: str,
    value: str,
    entry_points: Sequence[EntryPointPort],
) -> tuple[str, list[str], bool]:
    """(entry point, sorted server addresses, send PROXY) for one entry; ``ValueError``."""
    if not (key.isascii() and key.isdigit() and 0 < int(key) <= 65535):
        raise ValueError(f"{key!r} is not a port")
    found = _ENTRY_RE.fullmatch(value.strip())
    if found is None:
        raise ValueError(
            f"{base._shown(value)!r} is not <namespace>/<service>:<port>[:PROXY][:PROXY]"
        )
    flags = found.group("flags").split(":")[1:]
    if any(f not in ("PROXY", "") for f in flags):
        raise ValueError(f"{base._shown(value)!r}: only PROXY may follow the port")
    decode = len(flags) > 0 and flags[0] == "PROXY"
    encode = len(flags) > 1 and flags[1] == "PROXY"
    if decode:
        raise ValueError(
            "PROXY from clients is the entry point's setting: set proxyProtocol on the "
            f"entry point of port {key} and drop the first PROXY"
        )
    if encode and protocol == "UDP":
        raise ValueError("PROXY protocol to UDP backends is not supported")
    udp = protocol == "UDP"
    names = [ep.name for ep in entry_points if ep.port == int(key) and ep.udp == udp]
    if not names:
        raise ValueError(f"no {protocol} entry point listens on port {key}")
    ns, name, port_text = found.group("ns"), found.group("svc"), found.group("port")
    svc = state.services.get((ns, name))
    if svc is None:
        raise ValueError(f"service {ns}/{name} not found")
    number = int(port_text) if port_text.isdigit() else 0
    port = service_port(svc, number, "" if number else port_text, protocol)
    if port is None:
        raise ValueError(f"{protocol} port {port_text} not found on service {ns}/{name}")
    addresses, _ = ready_addresses(slices.get((ns, name), ()), port.name, protocol=protocol)
    if not addresses:
        raise ValueError(f"service {ns}/{name} has no ready endpoints for port {port_text}")
    return sorted(names)[0], sorted(addresses), encode


_NGINX_CAPTURE = re.compile(r"\$(?:\{([0-9])\}|([0-9]))")


def nginx_captures(target: str, regex: str) -> str:
    """``rewrite-target`` as nginx reads its captures, in Go's template syntax: ``$1``
    is one digit (``$12`` is group 1, then ``2``), and a group the path's regex does
    not have is an empty string (Go's template names ``${1}``; edge refuses a
    missing group, so it is dropped here, as nginx would)."""
    try:
        groups = go_regexp(regex, "rewrite-target").NumberOfCapturingGroups()
    except ValueError:
        return target  # the router's own check says why the path is no regexp

    def group(m: re.Match[str]) -> str:
        index = int(m.group(1) or m.group(2))
        return f"${{{index}}}" if index <= groups else ""

    return _NGINX_CAPTURE.sub(group, target)
