"""Traefik's read-only API: the configuration edge serves, each element with its status
and the reasons it is disabled.

Served on the ``traefik`` entry point when ``api.insecure`` is true, as Traefik does,
and, with ``api`` set, by every router naming the service ``api@internal``, behind that
router's rule and middlewares (:mod:`edge.entrypoints.internal`); ``api@internal`` is
listed as Traefik lists it, without a configuration of its own.
The paths and JSON shapes are Traefik's, so its tools and the habits of its users
carry over:

* ``/api/http/routers``, ``/api/http/services``, ``/api/http/middlewares``, the same
  under ``/api/tcp/`` and ``/api/udp/`` (no UDP middlewares), each also ``/{name}``
  (the name percent-encoded where it holds a ``/``);
* ``/api/entrypoints`` and ``/api/entrypoints/{name}``, ``/api/overview`` (totals,
  warnings and errors per kind, the providers), ``/api/rawdata`` (every table at
  once), ``/api/version``;
* edge's own ``/api/requests``: the requests counted so far by ``metrics.prometheus``
  (the ``/metrics`` view: the workers' sum with ``workers: N``) per entry point, router
  and service (each where its labels are on: ``addRoutersLabels``...), in all and per
  status class, the open connections per entry point, and the time read, so that two
  reads give rates and error ratios; ``{"metrics": false}`` without metrics (Traefik's
  API has no counters);
* with ``api.dashboard`` (Traefik's default), the dashboard (``edge/dashboard/``: static
  files read once from the package, served with a Content-Security-Policy allowing
  this origin only) at ``dashboard/``, which the base path itself redirects to.

Everything is under ``api.basePath`` (``/``): with ``/edge``, ``/edge/api/version`` and
``/edge/dashboard/``. The dashboard's redirects are relative, so a router that mounts
the API under a prefix it strips keeps it.

An entry point is its configuration as written plus its timeouts as they are in force,
defaults included (``transport.respondingTimeouts``, ``transport.lifeCycle``,
``udp.timeout``; a zero is left out, as Traefik's ``omitempty`` leaves it), durations in
edge's text (``"1m"`` for 60 s; Go reads it, as it reads Traefik's ``"60000000000ns"``).
The entry points opened at run time (``runtimeEntryPoints``: one per port the routers
name as ``":<port>"``, the Gateway provider's ``openListeners``) are listed with the
static ones, adding edge's own ``runtime``: ``origin`` (what opened it: the listeners
its provider says it is for, ``opened for Gateway ns/name listener x``, else the
routers naming it, by provider), ``routers``, and ``state``: ``open``, or ``failed``
with the ``error`` binding its port gave (this process's: a worker answers for its
own, and names the routers, its providers being the supervisor's).
An element is its configuration as written (camelCase, defaults left out) with every
secret shown as ``xxxx`` (:mod:`edge.config.redact`: passwords, htpasswd users, keys;
Traefik's API shows them in clear), plus
``name`` and ``provider``, ``status`` (``enabled``, ``warning``, ``disabled``) and
``error`` (the reasons, when there are any); a router adds ``using`` (the entry points
it serves on), a service or middleware ``usedBy`` and ``type``, an HTTP or TCP load
balancer ``serverStatus`` (``DOWN`` for a server a health check took out, else ``UP``,
as Traefik says without health checks). Lists are sorted by name and paged as Traefik pages them:
``page`` and ``per_page`` (100 by default), the next page in ``X-Next-Page`` (1 on
the last page); ``search`` (a substring of the name, or of a router's rule, any
case), ``status``, and for routers ``serviceName`` and ``middlewareName`` filter them.
A bad page answers 400, an unknown element 404, each with ``{"message": ...}``.

The runtime read is the one the entry points serve (with the TLS verdicts the data
plane added), taken at each request: a worker answers for its own configuration.
"""

from __future__ import annotations

import datetime
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import msgspec

from edge.config.durations import enc_hook
from edge.config.dynamic import TLSOptions
from edge.config.merge import DEFAULT_TLS
from edge.config.redact import Redactor
from edge.config.runtime import DISABLED, WARNING, ElementInfo, RouterInfo, RuntimeConfig
from edge.config.static import API_SERVICE, EntryPoint, StaticConfig

if TYPE_CHECKING:
    from edge.entrypoints.metrics import Samples
    from edge.entrypoints.opened import OpenedEntryPoints

__all__ = ["API", "APIAnswer"]

APIAnswer = tuple[int, bytes, bytes, bytes]
"""(status, body, content type, extra header lines): an answer of the API."""

JSON = b"application/json"
PER_PAGE = 100

# /api/<section>/<kind>: the runtime table and the label of one element in messages.
TABLES: dict[tuple[bytes, bytes], tuple[str, str]] = {
    (b"http", b"routers"): ("http_routers", "router"),
    (b"http", b"services"): ("http_services", "service"),
    (b"http", b"middlewares"): ("http_middlewares", "middleware"),
    (b"tcp", b"routers"): ("tcp_routers", "router"),
    (b"tcp", b"services"): ("tcp_services", "service"),
    (b"tcp", b"middlewares"): ("tcp_middlewares", "middleware"),
    (b"udp", b"routers"): ("udp_routers", "router"),
    (b"udp", b"services"): ("udp_services", "service"),
}
# rawdata's key for each table (Traefik's RunTimeRepresentation)
RAW_KEYS = {
    "http_routers": "routers",
    "http_middlewares": "middlewares",
    "http_services": "services",
    "tcp_routers": "tcpRouters",
    "tcp_middlewares": "tcpMiddlewares",
    "tcp_services": "tcpServices",
    "udp_routers": "udpRouters",
    "udp_services": "udpServices",
}
PROVIDERS = {  # static providers section -> the name Traefik's overview lists
    "file": "File",
    "kubernetes_ingress": "KubernetesIngress",
    "kubernetes_crd": "KubernetesCRD",
    "kubernetes_gateway": "KubernetesGateway",
}


# /api/requests: its key -> the counter family it sums, the label naming the element, and
# the metrics.prometheus option that has it counted
REQUEST_FAMILIES = {
    "entryPoints": ("traefik_entrypoint_requests_total", "entrypoint", "add_entry_points_labels"),
    "routers": ("traefik_router_requests_total", "router", "add_routers_labels"),
    "services": ("traefik_service_requests_total", "service", "add_services_labels"),
}

# The dashboard: its files in the package's dashboard/ folder, with their content types.
DASHBOARD_FILES = {
    "index.html": b"text/html; charset=utf-8",
    "app.js": b"text/javascript; charset=utf-8",
    "style.css": b"text/css; charset=utf-8",
    "favicon.svg": b"image/svg+xml",
}
DASHBOARD_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DASHBOARD_HEADERS = (
    b"Content-Security-Policy: %s\r\nX-Content-Type-Options: nosniff\r\n"
    b"Referrer-Policy: no-referrer\r\nCache-Control: no-cache\r\n" % DASHBOARD_CSP
)


class BadRequest(Exception):
    pass


def _json(value: Any) -> bytes:
    return msgspec.json.encode(value, enc_hook=enc_hook)


def _answer(status: int, value: Any, lines: bytes = b"") -> APIAnswer:
    return status, _json(value) + b"\n", JSON, lines


def _message(status: int, message: str) -> APIAnswer:
    return _answer(status, {"message": message})


def represent(
    info: ElementInfo[Any],
    table: str,
    down: Callable[[str], Collection[str]] | None = None,
    shown: Any = None,
) -> dict[str, Any]:
    """One element as Traefik's API shows it (see the module doc); ``down(service)``:
    the URLs of the HTTP service's servers a health check took out; ``shown``: its
    configuration as builtins, secrets masked (:meth:`API.shown`), else (an element
    added to the runtime since) made here."""
    if shown is None:
        shown = Redactor().shown(info.config)
    out: dict[str, Any] = dict(shown) if isinstance(shown, dict) else {}
    if info.name == API_SERVICE:  # edge's own: nothing to show
        out = {}
    out.pop("unsupported", None)  # both shown as errors
    out.pop("problems", None)
    if info.errors:
        out["error"] = list(info.errors)
    out["status"] = info.status
    if isinstance(info, RouterInfo):
        if info.entry_points:
            out["using"] = sorted(info.entry_points)
    else:
        if info.used_by:
            out["usedBy"] = sorted(info.used_by)
        kind = next((key for key, value in out.items() if isinstance(value, dict)), None)
        if kind is not None:
            out["type"] = kind.lower()
        if table in ("http_services", "tcp_services"):
            servers = (out.get("loadBalancer") or {}).get("servers") or ()
            out_of_rotation = (
                down(info.name) if down is not None and table == "http_services" else ()
            )
            status = {
                s.get("url") or s.get("address"): "DOWN"
                if s.get("url") in out_of_rotation
                else "UP"
                for s in servers
                if isinstance(s, dict)
            }
            status.pop(None, None)
            if status:
                out["serverStatus"] = status
    out["name"] = info.name
    out["provider"] = info.provider
    return out


def _timeouts(config: EntryPoint) -> dict[str, dict[str, str]]:
    """An entry point's ``transport`` timeouts as they are in force, defaults included, in
    Traefik's shape: ``respondingTimeouts`` (readTimeout, writeTimeout, idleTimeout) and
    ``lifeCycle`` (requestAcceptGraceTimeout, graceTimeOut), a zero left out as Traefik's
    ``omitempty`` leaves it (writeTimeout 0: no write timeout). The configuration's
    encoding leaves out every value equal to its default, so readTimeout's 60s or
    graceTimeOut's 10s never showed, and ``respondingTimeouts`` was ``{}``."""
    responding, life = config.transport.responding_timeouts, config.transport.life_cycle
    sections = {
        "respondingTimeouts": {
            "readTimeout": responding.read_timeout,
            "writeTimeout": responding.write_timeout,
            "idleTimeout": responding.idle_timeout,
        },
        "lifeCycle": {
            "requestAcceptGraceTimeout": life.request_accept_grace_timeout,
            "graceTimeOut": life.grace_time_out,
        },
    }
    return {key: {k: str(v) for k, v in values.items() if v} for key, values in sections.items()}


def served_protocols(name: str, config: EntryPoint, runtime: RuntimeConfig | None) -> dict | None:
    """What HTTP entry point ``name`` serves (None for UDP): HTTP/1.0, HTTP/1.1 and h2c
    (prior knowledge) in the clear, and under ``tls`` the ALPN names offered per TLS
    options its enabled HTTPS routers use (``h2`` where the options list it)."""
    if config.protocol == "udp":
        return None
    tls: dict[str, list[str]] = {}
    if runtime is not None:
        for info in runtime.http_routers.values():
            router_tls = info.config.tls
            if router_tls is None or info.status == DISABLED or name not in info.entry_points:
                continue
            options = router_tls.options or DEFAULT_TLS
            found = runtime.tls.options.get(options)
            tls[options] = list((found or TLSOptions()).alpn_protocols)
    out: dict[str, Any] = {"http": ["HTTP/1.0", "HTTP/1.1", "h2c"]}
    if tls:
        out["tls"] = dict(sorted(tls.items()))
    return out


def dashboard_pages(base: bytes) -> dict[bytes, APIAnswer]:
    """The dashboard's answers by path under ``base`` (the base path without its last
    ``/``): its files, read from the package now, and the redirects to its page."""
    folder = resources.files("edge") / "dashboard"
    home = base + b"/dashboard/"
    pages: dict[bytes, APIAnswer] = {
        home + (b"" if name == "index.html" else name.encode()): (
            200,
            (folder / name).read_bytes(),
            content_type,
            DASHBOARD_HEADERS,
        )
        for name, content_type in DASHBOARD_FILES.items()
    }
    # Relative, so that a prefix a router stripped before the API stays in the address.
    pages[base + b"/"] = pages[base + b"/dashboard"] = (302, b"", b"", b"Location: dashboard/\r\n")
    if base:  # "/edge": its last segment leads the way
        last = base.rsplit(b"/", 1)[1]
        pages[base] = (302, b"", b"", b"Location: %s/dashboard/\r\n" % last)
    return pages


def _page(query: Mapping[str, list[str]], total: int) -> tuple[int, int, int]:
    """(start, end, next page) as Traefik pages a list of ``total``; BadRequest if invalid."""

    def number(key: str, default: int) -> int:
        raw = query.get(key, [""])[0]
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value <= 0:
            raise BadRequest(f"invalid request: {key}: {raw}")
        return value

    per_page = number("per_page", PER_PAGE)
    page = number("page", 1)
    start = (page - 1) * per_page
    if start and start >= total:
        raise BadRequest(f"invalid request: page: {page}, per_page: {per_page}")
    return start, min(start + per_page, total), page + 1 if page * per_page < total else 1


def _kept(rep: dict[str, Any], query: Mapping[str, list[str]]) -> bool:
    """Traefik's search criteria on one represented element."""
    status = query.get("status", [""])[0]
    if status and rep["status"].lower() != status.lower():
        return False
    search = query.get("search", [""])[0].lower()
    if search and not any(
        search in str(v).lower() for v in (rep["name"], rep.get("rule", "")) if v
    ):
        return False
    service = query.get("serviceName", [""])[0]
    if service:
        own = rep.get("service", "")
        if "@" in own:
            if own != service:
                return False
        elif own != service.split("@", 1)[0]:
            return False
    middleware = query.get("middlewareName", [""])[0]
    return not middleware or middleware in rep.get("middlewares", ())


def _listed(items: Iterable[dict[str, Any]], query: Mapping[str, list[str]]) -> APIAnswer:
    kept = sorted((rep for rep in items if _kept(rep, query)), key=lambda rep: rep["name"])
    start, end, following = _page(query, len(kept))
    return _answer(200, kept[start:end], b"X-Next-Page: %d\r\n" % following)


class API:
    """Answers ``/api/...`` from the runtime ``runtime()`` returns (see the module doc)."""

    def __init__(
        self,
        static: StaticConfig,
        runtime: Callable[[], RuntimeConfig | None],
        version: str,
        *,
        down: Callable[[str], Collection[str]] | None = None,
        samples: Callable[[], Samples | None] | None = None,
        opened: Callable[[], OpenedEntryPoints | None] | None = None,
    ) -> None:
        """``down(service)``: the URLs of an HTTP service's servers out of the rotation
        (the data plane's health checks), shown ``DOWN`` in ``serverStatus``;
        ``samples()``: what ``/metrics`` shows now, None without metrics
        (``/api/requests``); ``opened()``: the entry points opened at run time, None
        without ``runtimeEntryPoints``."""
        self.static = static
        self.runtime = runtime
        self.version = version
        self.down = down
        self.samples = samples
        self.opened = opened
        self.started = datetime.datetime.now(datetime.UTC).isoformat()
        api = static.api
        self.base = api.base_path.rstrip("/").encode() if api is not None else b""
        self.pages = dashboard_pages(self.base) if api is not None and api.dashboard else {}
        self.redactor = Redactor()
        self._shown: tuple[weakref.ref[RuntimeConfig], dict[str, dict[str, Any]]] | None = None

    def shown(self, runtime: RuntimeConfig) -> dict[str, dict[str, Any]]:
        """Each element's configuration as the API shows it, by table and name: builtins
        with every secret masked (:mod:`edge.config.redact`; Traefik's API shows them),
        made once per runtime, at the first answer that needs them."""
        held = self._shown
        if held is None or held[0]() is not runtime:
            tables = {
                attribute: {
                    name: self.redactor.shown(info.config)
                    for name, info in getattr(runtime, attribute).items()
                }
                for attribute in RAW_KEYS
            }
            held = self._shown = (weakref.ref(runtime), tables)
        return held[1]

    def answer(self, path: bytes, query: bytes) -> APIAnswer | None:
        """The answer to GET ``path``?``query``; None where ``path`` is not the API's."""
        page = self.pages.get(path)
        if page is not None:
            return page
        if self.base:
            if not path.startswith(self.base):
                return None
            path = path[len(self.base) :]
        if path != b"/api" and not path.startswith(b"/api/"):
            return None
        parts = path.split(b"/")[2:]  # "", "api", ...
        try:
            params = parse_qs(query.decode("latin-1"), keep_blank_values=True)
            return self._route(parts, params)
        except BadRequest as exc:
            return _message(400, str(exc))

    def _route(self, parts: list[bytes], query: Mapping[str, list[str]]) -> APIAnswer:
        runtime = self.runtime()
        if parts == [b"version"]:
            version = {"Version": self.version, "Codename": "edge", "startDate": self.started}
            api = self.static.api
            if api is not None and api.dashboard_name:
                version["dashboardName"] = api.dashboard_name
            return _answer(200, version)
        if parts and parts[0] == b"entrypoints" and len(parts) <= 2:
            return self._entrypoints(parts[1:], query)
        if parts == [b"requests"]:
            return _answer(200, self._requests())
        if runtime is None:
            return _message(503, "no configuration applied yet")
        if parts == [b"rawdata"]:
            return _answer(200, self._rawdata(runtime))
        if parts == [b"overview"]:
            return _answer(200, self._overview(runtime))
        if len(parts) in (2, 3) and (parts[0], parts[1]) in TABLES:
            attribute, label = TABLES[(parts[0], parts[1])]
            table: dict[str, ElementInfo[Any]] = getattr(runtime, attribute)
            shown = self.shown(runtime)[attribute]
            if len(parts) == 2:
                return _listed(
                    (
                        represent(info, attribute, self.down, shown.get(n))
                        for n, info in table.items()
                    ),
                    query,
                )
            name = unquote(parts[2].decode("latin-1"))
            info = table.get(name)
            if info is None:
                return _message(404, f"{label} not found: {name}")
            return _answer(200, represent(info, attribute, self.down, shown.get(name)))
        return _message(404, "page not found")

    def _entrypoints(self, name: list[bytes], query: Mapping[str, list[str]]) -> APIAnswer:
        opened = self._opened()
        configs = {**self.static.entry_points, **{n: c for n, (c, _) in opened.items()}}

        def rep(ep_name: str) -> dict[str, Any]:
            config = configs[ep_name]
            out = self.redactor.shown(config)
            out = out if isinstance(out, dict) else {}
            out["transport"] = {**out.get("transport", {}), **_timeouts(config)}
            out["udp"] = {**out.get("udp", {}), "timeout": str(config.udp.timeout)}
            if ep_name in opened:
                out["runtime"] = opened[ep_name][1]
            protocols = served_protocols(ep_name, config, self.runtime())
            if protocols is not None:
                out["protocols"] = protocols
            return {**out, "name": ep_name}

        if name:
            wanted = unquote(name[0].decode("latin-1"))
            if wanted not in configs:
                return _message(404, f"entry point not found: {wanted}")
            return _answer(200, rep(wanted))
        reps = sorted((rep(n) for n in configs), key=lambda r: r["name"])
        start, end, following = _page(query, len(reps))
        return _answer(200, reps[start:end], b"X-Next-Page: %d\r\n" % following)

    def _opened(self) -> dict[str, tuple[EntryPoint, dict[str, Any]]]:
        """The entry points opened at run time for the routers of the runtime served
        now: each one's configuration (its address; edge's defaults) and ``runtime``."""
        opened = self.opened() if self.opened is not None else None
        runtime = self.runtime()
        if opened is None or runtime is None:
            return {}
        naming: dict[str, list[str]] = {}
        for table in (runtime.http_routers, runtime.tcp_routers, runtime.udp_routers):
            for router, info in table.items():
                for ep in info.config.entry_points or ():
                    if ep not in self.static.entry_points:
                        naming.setdefault(ep, []).append(router)
        found: dict[str, tuple[EntryPoint, dict[str, Any]]] = {}
        for ep, routers in naming.items():
            address = opened.address(ep)
            if address is None:
                continue
            providers = sorted({r.rpartition("@")[2] for r in routers if "@" in r})
            said = opened.origin(ep)
            if said:
                origin = f"opened for {', '.join(said)}"
            else:
                origin = f"opened at run time for {len(routers)} router(s)"
                if providers:
                    origin += f" of {', '.join(providers)}"
            error = opened.errors.get(ep)
            extra: dict[str, Any] = {
                "origin": origin,
                "routers": sorted(routers),
                "state": "failed" if error is not None else "open",
            }
            if error is not None:
                extra["error"] = error
            found[ep] = (EntryPoint(address=address), extra)
        return found

    def _rawdata(self, runtime: RuntimeConfig) -> dict[str, Any]:
        out: dict[str, Any] = {}
        shown = self.shown(runtime)
        for attribute, key in RAW_KEYS.items():
            table: dict[str, ElementInfo[Any]] = getattr(runtime, attribute)
            if table:
                out[key] = {
                    name: represent(info, attribute, self.down, shown[attribute].get(name))
                    for name, info in sorted(table.items())
                }
        return out

    def _requests(self) -> dict[str, Any]:
        """``/api/requests`` (see the module doc): per element, ``requests`` and a count
        per status class (``2xx``...), under the kinds of element counted;
        ``openConnections`` per entry point."""
        samples = self.samples() if self.samples is not None else None
        out: dict[str, Any] = {"time": time.time(), "metrics": samples is not None}
        if samples is None:
            return out
        metrics = self.static.metrics
        prometheus = metrics.prometheus if metrics is not None else None
        for key, (family, label, option) in REQUEST_FAMILIES.items():
            if prometheus is not None and not getattr(prometheus, option):
                continue  # not counted: no key, rather than nothing counted
            names = samples.names(family)
            code, name = names.index("code"), names.index(label)
            table: dict[str, dict[str, int]] = {}
            for labels, value in samples.values.get(family, {}).items():
                counts = table.setdefault(labels[name], {"requests": 0})
                status = labels[code][:1] + "xx"
                counts["requests"] += int(value)
                counts[status] = counts.get(status, 0) + int(value)
            out[key] = table
        connections: dict[str, int] = {}
        for (entry_point, _), value in samples.values.get("traefik_open_connections", {}).items():
            connections[entry_point] = connections.get(entry_point, 0) + int(value)
        out["openConnections"] = connections
        return out

    def _overview(self, runtime: RuntimeConfig) -> dict[str, Any]:
        def counts(table: dict[str, ElementInfo[Any]]) -> dict[str, int]:
            statuses = [info.status for info in table.values()]
            return {
                "total": len(statuses),
                "warnings": statuses.count(WARNING),
                "errors": statuses.count(DISABLED),
            }

        out: dict[str, Any] = {}
        for (section, kind), (attribute, _) in TABLES.items():
            out.setdefault(section.decode(), {})[kind.decode()] = counts(
                getattr(runtime, attribute)
            )
        providers = self.static.providers
        out["providers"] = [
            label
            for field, label in PROVIDERS.items()
            if getattr(providers, field, None) is not None
        ]
        out["features"] = {
            "tracing": "",
            "metrics": "",
            "accessLog": self.static.access_log is not None,
        }
        return out
