"""The one module of edge that talks to the Kubernetes API server.

Owns the credentials (:func:`load_api_config`), one reflector per watched kind and
namespace (LIST, then WATCH, each in its own daemon thread), the cache of decoded
objects those reflectors keep (:class:`KubeClient`), the core that shares them between
every source reading one cluster (:class:`KubeCore`: a kind asked for alike is one
reflector per namespace of the union; each source's :class:`Subscription` reads and
hears of its own kinds and namespaces only), and the status writer of every source
(:meth:`KubeClient.patch_status`). Requests go through the official
``kubernetes`` client (``ApiClient.param_serialize`` / ``call_api``, raw bytes);
responses are decoded with msgspec into the types the caller names, never into
the client's model classes (``EndpointSlice`` events cost several times less).

Invariants:

- A reflector's first LIST reads the API server's watch cache (``resourceVersion=0``:
  one answer, no paging through etcd); a re-LIST reads the latest version, paged.
- A reflector's part of the cache is its last LIST plus every watch event after
  it, applied in order; its resourceVersion is that of the last thing applied
  (page, event or bookmark), so a re-watch misses nothing and repeats nothing.
  On 410 Gone it LISTs again and replaces its part, reporting the difference
  (deletes missed while away included).
- Nothing ends a reflector but :meth:`KubeClient.stop`: any failure reconnects
  with capped exponential backoff and jitter, reset once a watch delivers an event
  or a bookmark (an ERROR event is a failure, not a delivery). A watch silent for
  ``Timing.read_timeout`` (a dead connection) is abandoned and resumed; one that
  ends cleanly is resumed at once, unless it ended within :data:`SHORT_WATCH`
  having delivered nothing: that is a failure too. An object that does not decode
  into its type is logged, counted and left out of the cache; it never stops the
  watch.
- The change callback runs on the reflector's thread after the cache holds the
  change. Several reflectors may call it at once. Nothing here touches an event
  loop: the caller hands results over with ``loop.call_soon_threadsafe``.

Why a thread per (kind, namespace) rather than one multiplexing thread: the
official client reads each watch stream with blocking socket reads (urllib3), so
one thread can wait on one stream only; edge watches a handful of kinds, and a
thread per stream keeps each reflector a plain loop with its own backoff.

Errors: :class:`CredentialsError` (a :class:`edge.errors.ConfigError`) when no
API server can be found; :class:`KubernetesError` (an :class:`edge.errors.EdgeError`)
and its subclasses :class:`ApiStatusError` and :class:`Gone` for failed requests,
which reflectors handle themselves.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import gc
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar
from urllib.parse import quote

import msgspec
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from edge.errors import ConfigError, EdgeError

if TYPE_CHECKING:
    from edge.providers.kubernetes.events import EventRecorder

__all__ = [
    "CONFIG_MAPS",
    "CRD_RESOURCES",
    "ENDPOINT_SLICES",
    "INGRESSES",
    "INGRESS_CLASSES",
    "NODES",
    "PODS",
    "SECRETS",
    "SERVICES",
    "SERVICE_ACCOUNT_DIR",
    "SHORT_WATCH",
    "TRAEFIK_GROUP",
    "ApiStatusError",
    "Backoff",
    "Change",
    "CredentialsError",
    "Gone",
    "KubeClient",
    "KubeCore",
    "KubernetesError",
    "Resource",
    "Subscription",
    "Timing",
    "WatchSpec",
    "gc_paused",
    "load_api_config",
    "request",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_KUBECONFIG = "~/.kube/config"
SHORT_WATCH = 1.0
"""Seconds: a watch that ends cleanly sooner, having delivered nothing, is a failure."""

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds


# --- errors ------------------------------------------------------------------------


class CredentialsError(ConfigError):
    """No usable way to reach the API server; the message names what is missing."""


class KubernetesError(EdgeError):
    """A request to the API server failed."""


class ApiStatusError(KubernetesError):
    """The API server answered with an error status (HTTP, or an ERROR watch event)."""

    def __init__(self, what: str, code: int, reason: str = "", message: str = ""):
        self.code = code
        self.reason = reason
        super().__init__(f"{what}: {code} {reason}: {message}".rstrip(": "))


class Gone(ApiStatusError):
    """410: the resourceVersion asked for is older than the server's history."""


# --- credentials ---------------------------------------------------------------------


def load_api_config(
    endpoint: str = "",
    token: str = "",
    cert_auth_file_path: str = "",
    kubeconfig: str = "",
    *,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
) -> k8s.Configuration:
    """How to reach the API server, found the way every Kubernetes tool finds it.

    In order: an explicit ``kubeconfig`` path; the pod's service account
    (``KUBERNETES_SERVICE_HOST``/``_PORT`` set and a token in
    ``service_account_dir``); the ``KUBECONFIG`` environment variable (paths
    joined by ``os.pathsep``) or ``~/.kube/config``; else ``endpoint`` alone.
    ``endpoint``, ``token`` and ``cert_auth_file_path`` then override the server
    URL, the bearer token and the CA file of whatever was found. Raises
    :class:`CredentialsError` naming what is missing or wrong.
    """
    cfg = k8s.Configuration()
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise CredentialsError(f"endpoint {endpoint!r} is not an http:// or https:// URL")
    if cert_auth_file_path and not os.path.isfile(cert_auth_file_path):
        raise CredentialsError(f"certAuthFilePath {cert_auth_file_path}: no such file")
    token_file = os.path.join(service_account_dir, "token")
    in_cluster = bool(
        os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")
    )
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            raise CredentialsError(f"kubeconfig {kubeconfig}: no such file")
        _load_kubeconfig(kubeconfig, cfg)
    elif in_cluster and os.path.isfile(token_file):
        loader = k8s_config.incluster_config.InClusterConfigLoader(
            token_filename=token_file,
            cert_filename=os.path.join(service_account_dir, "ca.crt"),
        )
        try:
            loader.load_and_set(cfg)
        except ConfigException as e:
            raise CredentialsError(f"in-cluster service account {service_account_dir}: {e}") from e
    else:
        paths = os.environ.get("KUBECONFIG") or os.path.expanduser(DEFAULT_KUBECONFIG)
        found = [p for p in paths.split(os.pathsep) if p and os.path.isfile(p)]
        if found:
            _load_kubeconfig(os.pathsep.join(found), cfg)
        elif not endpoint:
            pod = (
                f"no service account token at {token_file}"
                if in_cluster
                else "not in a pod (KUBERNETES_SERVICE_HOST/PORT unset)"
            )
            raise CredentialsError(
                f"no Kubernetes API server to talk to: {pod}, no kubeconfig ({paths} not "
                "found), and no endpoint configured"
            )
    _override(cfg, endpoint.rstrip("/"), token, cert_auth_file_path)
    return cfg


def _load_kubeconfig(path: str, cfg: k8s.Configuration) -> None:
    try:
        k8s_config.load_kube_config(
            config_file=path, client_configuration=cfg, persist_config=False
        )
    except (ConfigException, OSError, ValueError, TypeError) as e:
        raise CredentialsError(f"kubeconfig {path}: {e}") from e


def _override(cfg: k8s.Configuration, endpoint: str, token: str, ca_file: str) -> None:
    """Apply explicit settings, and keep them applied across the loaders' token refresh
    hooks (which rewrite host, CA and token, and reinstall themselves, on every request)."""
    if not (endpoint or token or ca_file):
        return

    def apply(c: k8s.Configuration) -> None:
        if endpoint:
            c.host = endpoint
        if token:
            c.api_key = {"BearerToken": f"Bearer {token}"}
            c.api_key_prefix = {}
        if ca_file:
            c.ssl_ca_cert = ca_file

    apply(cfg)
    hook = cfg.refresh_api_key_hook
    if hook is None or token:  # a static token needs no refreshing
        cfg.refresh_api_key_hook = None
        return

    def refresh(c: k8s.Configuration) -> None:
        hook(c)
        apply(c)
        c.refresh_api_key_hook = refresh

    cfg.refresh_api_key_hook = refresh


# --- what to watch --------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """A kind's REST collection: ``/apis/{group}/{version}[/namespaces/{ns}]/{plural}``."""

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` alone for the core group (``v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            return f"{base}/namespaces/{quote(namespace, safe='')}/{self.plural}"
        return f"{base}/{self.plural}"


INGRESSES = Resource("Ingress", "networking.k8s.io", "v1", "ingresses")
INGRESS_CLASSES = Resource("IngressClass", "networking.k8s.io", "v1", "ingressclasses", False)
SERVICES = Resource("Service", "", "v1", "services")
ENDPOINT_SLICES = Resource("EndpointSlice", "discovery.k8s.io", "v1", "endpointslices")
SECRETS = Resource("Secret", "", "v1", "secrets")
CONFIG_MAPS = Resource("ConfigMap", "", "v1", "configmaps")
NODES = Resource("Node", "", "v1", "nodes", False)
PODS = Resource("Pod", "", "v1", "pods")

TRAEFIK_GROUP = "traefik.io"
CRD_RESOURCES = tuple(
    Resource(kind, TRAEFIK_GROUP, "v1alpha1", f"{kind.lower()}s")
    for kind in (
        "IngressRoute",
        "IngressRouteTCP",
        "IngressRouteUDP",
        "Middleware",
        "MiddlewareTCP",
        "TLSOption",
        "TLSStore",
        "TraefikService",
        "ServersTransport",
        "ServersTransportTCP",
    )
)
"""Traefik's kinds (``traefik.io/v1alpha1``) the kubernetesCRD provider reads; each
plural is the kind in lower case with an ``s``, as Traefik's CRDs name them."""


@dataclass(frozen=True)
class WatchSpec:
    """One kind to keep in the cache, decoded into ``type``.

    ``type`` is anything ``msgspec.json.Decoder`` decodes into whose instances have
    ``.metadata.name``, ``.metadata.namespace`` (``""`` when absent) and
    ``.metadata.resource_version`` (the wire's ``resourceVersion``). The selectors
    go to the server as they are. ``namespaces``: where to watch this kind, when not
    where the client watches the others (``None``); ``()`` is every namespace.
    """

    resource: Resource
    type: Any
    label_selector: str = ""
    field_selector: str = ""
    namespaces: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Timing:
    """Timeouts and backoff, in seconds."""

    watch_timeout: float = 300.0  # server-side timeoutSeconds, times 1 to 2 (jitter)
    read_timeout: float = 90.0  # a watch silent this long is a dead connection
    connect_timeout: float = 10.0
    request_timeout: float = 60.0  # read timeout of a LIST page or a status write
    backoff_base: float = 0.2
    backoff_cap: float = 30.0
    page_size: int = 500


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The automatic cyclic GC waits while a LIST is decoded or a whole cluster converted:
    tens of thousands of objects are made and none is garbage, and full passes would
    walk the cache again and again (a 5,000-Ingress conversion takes about a third
    longer with them, a 5,000-object LIST about twice as long). As the watcher's
    Preparer does. Several threads may pause it at once: it is on again once none is in
    here (whoever found it on turns it back on)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class Change(NamedTuple):
    """What a callback is told: ``keys`` of ``kind`` changed (added, modified or
    deleted); ``synced`` once every reflector has completed its first LIST."""

    kind: str
    keys: frozenset[Key]
    synced: bool


class Backoff:
    """Capped exponential delays with jitter: ``base * 2**n`` up to ``cap``, each
    drawn from its upper half ([d/2, d]) so retries of many clients spread out."""

    def __init__(self, base: float, cap: float, rand: Callable[[], float] = random.random):
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rand = rand

    def next(self) -> float:
        delay = min(self.cap, self.base * 2 ** min(self.failures, 32))
        self.failures += 1
        return delay / 2 + self._rand() * delay / 2

    def reset(self) -> None:
        self.failures = 0


# --- wire formats -----------------------------------------------------------------------


class _Meta(msgspec.Struct, rename="camel"):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""


class _Named(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _ListPage(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] | None = None


class _TypedPage(msgspec.Struct, Generic[T]):
    """A LIST page decoded whole into the watched type (the common case: one C call)."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[T] | None = None


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


class _Status(msgspec.Struct):
    code: int = 0
    reason: str = ""
    message: str = ""


_NAMED = msgspec.json.Decoder(_Named)
_PAGE = msgspec.json.Decoder(_ListPage)
_EVENT = msgspec.json.Decoder(_Event)
_STATUS = msgspec.json.Decoder(_Status)


def request(
    api: k8s.ApiClient,
    timing: Timing,
    what: str,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
) -> bytes:
    """One write (or read) to the API server through ``api``: the answer's body.

    Blocking (one HTTP request, bounded by ``timing``): never call it on the event loop.
    Raises :class:`ApiStatusError` (``code``: the HTTP status) for an error answer,
    :class:`KubernetesError` when none came (refused, reset, timed out); ``what`` names
    the object in both."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        method, url, headers, data, _ = api.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        resp = api.call_api(
            method,
            url,
            headers,
            data,
            _request_timeout=(timing.connect_timeout, timing.request_timeout),
        )
        answer: bytes = resp.read()
    except Exception as e:
        raise KubernetesError(f"{what}: {e}") from e
    if not 200 <= resp.status < 300:
        raise _status_error(what, resp.status, answer)
    return answer


def _status_error(what: str, code: int, data: bytes) -> ApiStatusError:
    try:
        st = _STATUS.decode(data)
        reason, message = st.reason, st.message
    except msgspec.MsgspecError:
        reason, message = "", data[:200].decode("utf-8", "replace")
    cls = Gone if code == 410 else ApiStatusError
    return cls(what, code, reason, message)


# --- the client --------------------------------------------------------------------------


class KubeClient:
    """Reflectors for ``watches`` in ``namespaces`` (empty: all), and their cache.

    ``configuration`` comes from :func:`load_api_config`; it is copied, with the
    client's own retries turned off (reflectors retry with backoff). ``on_change``
    is called with a :class:`Change` from reflector threads. Call :meth:`start`
    once and :meth:`stop` at the end.
    """

    def __init__(
        self,
        configuration: k8s.Configuration,
        watches: Sequence[WatchSpec],
        *,
        namespaces: Sequence[str] = (),
        on_change: Callable[[Change], None] | None = None,
        timing: Timing | None = None,
    ):
        kinds = [w.resource.kind for w in watches]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"a kind is watched twice: {kinds}")
        self.configuration = copy.deepcopy(configuration)
        self.configuration.retries = 0
        self.timing = timing or Timing()
        self.on_change = on_change
        self.decode_errors = 0  # objects left out because they did not decode
        # For the metrics, under the lock: objects left out, by kind; watches begun
        # again, by (kind, why: "ended" cleanly, "expired" (410: LISTed again), "error").
        self.skipped: dict[str, int] = {}
        self.restarts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._stores: dict[str, dict[Key, Any]] = {kind: {} for kind in kinds}
        self._reflectors: list[_Reflector] = []
        for spec in watches:
            where = namespaces if spec.namespaces is None else spec.namespaces
            scopes = sorted(set(where)) if where and spec.resource.namespaced else [""]
            self._reflectors.extend(_Reflector(self, spec, ns) for ns in scopes)
        self._unsynced = set(self._reflectors)
        self._status_api = k8s.ApiClient(self.configuration)  # thread-safe (urllib3 pool)
        self._started = False

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            raise RuntimeError("KubeClient.start called twice")
        self._started = True
        if not self._reflectors:
            self._synced.set()
        for r in self._reflectors:
            r.thread.start()

    def stop(self, timeout: float = 2.0) -> bool:
        """End every reflector thread; True when all ended within ``timeout``.

        Open watches are cut by shutting their sockets down; a thread waiting for
        an answer that has not begun ends at its own request timeout.
        """
        self._stopping.set()
        for r in self._reflectors:
            r.interrupt()
        deadline = time.monotonic() + timeout
        for r in self._reflectors:
            if r.thread.is_alive():
                r.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [r.name for r in self._reflectors if r.thread.is_alive()]
        if alive:
            log.warning("kubernetes: still stopping after %.1f s: %s", timeout, ", ".join(alive))
        for r in self._reflectors:
            if not r.thread.is_alive():
                r.api.close()
        self._status_api.close()
        return not alive

    # --- the cache -----------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Every reflector has completed its first LIST."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def snapshot(self, kinds: Iterable[str] | None = None) -> dict[str, dict[Key, Any]]:
        """Every kind's objects (or those of ``kinds``), copied under the lock, so at one
        moment (the objects themselves are shared)."""
        with self._lock:
            if kinds is None:
                return {kind: dict(store) for kind, store in self._stores.items()}
            return {kind: dict(self._stores[kind]) for kind in kinds}

    def objects(self, kind: str) -> dict[Key, Any]:
        with self._lock:
            return dict(self._stores[kind])

    def get(self, kind: str, namespace: str, name: str) -> Any | None:
        with self._lock:
            return self._stores[kind].get((namespace, name))

    def resource_versions(self) -> dict[str, str]:
        """The resourceVersion each reflector resumes from, by reflector name."""
        return {r.name: r.rv for r in self._reflectors}

    def pending(
        self, kinds: Iterable[str] | None = None, namespaces: Iterable[str] = ()
    ) -> dict[str, str]:
        """Reflectors that have not completed their first LIST, with their last error;
        only those of ``kinds`` that serve one of ``namespaces`` (all when empty), if
        given."""
        wanted = None if kinds is None else set(kinds)
        where = set(namespaces)
        with self._lock:
            return {
                r.name: r.last_error
                for r in self._unsynced
                if (wanted is None or r.kind in wanted)
                and (not where or not r.namespace or r.namespace in where)
            }

    def _replace(self, r: _Reflector, items: dict[Key, Any]) -> None:
        """A LIST's result replaces the reflector's part of the cache."""
        with self._lock:
            store = self._stores[r.kind]
            mine = [k for k in store if not r.namespace or k[0] == r.namespace]
            changed = {k for k in mine if k not in items}
            for k in changed:
                del store[k]
            for k, obj in items.items():
                prev = store.get(k)
                if prev is None or _rv(prev) != _rv(obj):
                    changed.add(k)
                store[k] = obj
            first = r in self._unsynced
            self._unsynced.discard(r)
            synced = not self._unsynced
        if synced:
            self._synced.set()
        if changed or first:
            self._notify(Change(r.kind, frozenset(changed), synced))

    def _apply(self, r: _Reflector, updates: list[tuple[Key, Any]]) -> None:
        """Watch events, in order: an object, or None for a delete."""
        with self._lock:
            store = self._stores[r.kind]
            for key, obj in updates:
                if obj is None:
                    store.pop(key, None)
                else:
                    store[key] = obj
            synced = not self._unsynced
        self._notify(Change(r.kind, frozenset(k for k, _ in updates), synced))

    def _notify(self, change: Change) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(change)
        except Exception:
            log.exception("kubernetes: change callback failed for %s", change.kind)

    # --- Ingress status -----------------------------------------------------------------

    def patch_ingress_status(
        self, namespace: str, name: str, addresses: Iterable[Mapping[str, str]]
    ) -> bool:
        """Set ``status.loadBalancer.ingress`` of an Ingress to ``addresses`` (each
        ``{"ip": ...}`` or ``{"hostname": ...}``) through the status subresource.

        Blocking (one HTTP request): never call it on the event loop. Failures are
        logged, not raised; returns whether the write succeeded.
        """
        what = f"status of Ingress {namespace}/{name}"
        entries = []
        for a in addresses:
            ip, hostname = a.get("ip", ""), a.get("hostname", "")
            if bool(ip) == bool(hostname):
                log.error("kubernetes: %s: an address needs an ip or a hostname: %r", what, a)
                return False
            entries.append({"ip": ip} if ip else {"hostname": hostname})
        return self.patch_status(
            INGRESSES, namespace, name, {"status": {"loadBalancer": {"ingress": entries}}}
        )

    def patch_status(
        self, resource: Resource, namespace: str, name: str, body: Mapping[str, Any]
    ) -> bool:
        """Merge-patch ``body`` onto the status subresource of the ``resource`` object
        ``namespace/name`` (``namespace`` empty for a cluster-scoped kind).

        Blocking (one HTTP request): never call it on the event loop. Failures are
        logged, not raised; returns whether the write succeeded.
        """
        what = f"status of {resource.kind} {f'{namespace}/' if namespace else ''}{name}"
        path = f"{resource.path(namespace)}/{quote(name, safe='')}/status"
        try:
            request(
                self._status_api,
                self.timing,
                what,
                "PATCH",
                path,
                body,
                "application/merge-patch+json",
            )
        except KubernetesError as e:
            log.warning("kubernetes: %s", e)
            return False
        return True


# --- the shared core ---------------------------------------------------------------------

Scope = frozenset[str] | None
"""The namespaces a reflector serves or a source reads; None: every namespace."""


def _union(a: Scope, b: Scope) -> Scope:
    return None if a is None or b is None else a | b


def _place(groups: list[dict[str, tuple[WatchSpec, Scope]]], spec: WatchSpec, scope: Scope) -> int:
    """The group (client) that serves ``spec`` in ``scope``: the first that has the kind
    asked for alike (its scope grows to the union) or not at all; a new one else."""
    kind = spec.resource.kind
    alike = dataclasses.replace(spec, namespaces=None)
    for i, group in enumerate(groups):
        there = group.get(kind)
        if there is None:
            group[kind] = (alike, scope)
            return i
        if there[0] == alike:
            group[kind] = (alike, _union(there[1], scope))
            return i
    groups.append({kind: (alike, scope)})
    return len(groups) - 1


class Subscription:
    """One source's share of a :class:`KubeCore`: its kinds, in its namespaces.

    Made by :meth:`KubeCore.subscribe`. Reads (:meth:`snapshot`, :meth:`objects`,
    :meth:`get`) and ``on_change`` see this source's kinds only, and in them only
    objects of its namespaces, even where a reflector serves a wider scope for
    another source. :attr:`synced` and :meth:`pending` ask only about the reflectors
    this source reads, so another source's kind that cannot be listed (its CRDs not
    installed, a 403) never holds this one back. :meth:`open` when the source starts,
    :meth:`close` when it stops (from then on it hears nothing).
    """

    def __init__(
        self,
        core: KubeCore,
        name: str,
        watches: Sequence[WatchSpec],
        namespaces: Sequence[str],
        on_change: Callable[[Change], None] | None,
    ) -> None:
        kinds = [w.resource.kind for w in watches]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"{name}: a kind is watched twice: {kinds}")
        self.core = core
        self.name = name
        self.watches = tuple(watches)
        self.namespaces = tuple(namespaces)
        self.on_change = on_change
        # Set when the core starts: kind -> (the client serving it, this source's scope,
        # whether that client's reflectors serve a wider one, so reads are filtered).
        self._routes: dict[str, tuple[KubeClient, Scope, bool]] = {}
        self._told_synced = False
        self._open = False

    def scope(self, spec: WatchSpec) -> Scope:
        """The namespaces this source reads ``spec``'s kind in."""
        where = self.namespaces if spec.namespaces is None else spec.namespaces
        return frozenset(where) if where and spec.resource.namespaced else None

    # --- life cycle ----------------------------------------------------------------

    def open(self) -> None:
        """The source starts: the core's reflectors start with the first source. One
        that opens after its reflectors synced (for a source opened before it) is told
        so at once: no reflector would say it again."""
        self.core._open(self)
        if self.synced:
            self._tell_synced()

    def close(self, timeout: float = 2.0) -> None:
        """The source stops: it hears nothing more; the last one stops the reflectors
        (blocking, about ``timeout``). Idempotent."""
        self.core._close(self, timeout)

    # --- the source's view ---------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Every reflector this source reads has completed its first LIST."""
        return bool(self._routes) and not self.pending()

    def pending(self) -> dict[str, str]:
        """The reflectors this source reads without a first LIST, with their last error."""
        out: dict[str, str] = {}
        for kind, (client, scope, _) in self._routes.items():
            out.update(client.pending([kind], scope or ()))
        return out

    def snapshot(self) -> dict[str, dict[Key, Any]]:
        """This source's kinds and namespaces (one copy per client, each at one moment)."""
        by_client: dict[int, tuple[KubeClient, list[str]]] = {}
        for kind, (client, _, _) in self._routes.items():
            by_client.setdefault(id(client), (client, []))[1].append(kind)
        out: dict[str, dict[Key, Any]] = {}
        for client, kinds in by_client.values():
            out.update(client.snapshot(kinds))
        for kind, (_, scope, wider) in self._routes.items():
            if wider and scope is not None:
                out[kind] = {k: v for k, v in out[kind].items() if k[0] in scope}
        return out

    def objects(self, kind: str) -> dict[Key, Any]:
        client, scope, wider = self._routes[kind]
        found = client.objects(kind)
        if wider and scope is not None:
            return {k: v for k, v in found.items() if k[0] in scope}
        return found

    def get(self, kind: str, namespace: str, name: str) -> Any | None:
        client, scope, wider = self._routes[kind]
        if wider and scope is not None and namespace not in scope:
            return None
        return client.get(kind, namespace, name)

    def client(self, kind: str) -> KubeClient:
        """The client whose reflectors serve ``kind`` (its writes go through it)."""
        return self._routes[kind][0]

    def _hear(self, client: KubeClient, change: Change) -> None:
        """A change from one of the core's clients (reflector thread): passed on if it
        is of this source's kinds and namespaces, or it completes this source's sync."""
        route = self._routes.get(change.kind)
        if not self._open or self.on_change is None or route is None or route[0] is not client:
            return
        _, scope, wider = route
        keys = change.keys
        if wider and scope is not None:
            keys = frozenset(k for k in keys if k[0] in scope)
        synced = self._told_synced or self.synced
        first = synced and not self._told_synced
        if not keys and not first:
            return  # objects of other namespaces only, or a first LIST before the last
        self._told_synced = self._told_synced or synced
        self._tell(Change(change.kind, keys, synced))

    def _tell_synced(self) -> None:
        if not self._told_synced and self._routes:
            self._told_synced = True
            self._tell(Change(next(iter(self._routes)), frozenset(), True))

    def _tell(self, change: Change) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(change)
        except Exception:
            log.exception("kubernetes: %s: change callback failed for %s", self.name, change.kind)


class KubeCore:
    """One API server's reflectors, shared by every source of one edge that reads it.

    A source (the Ingress provider, the CRD provider) subscribes with the kinds it
    watches, its namespaces and its change callback (:meth:`subscribe`), all before
    the first of them starts; the first :meth:`Subscription.open` builds the clients
    and starts their reflectors, the last :meth:`Subscription.close` stops them.

    What is shared: a kind asked for alike (same type, same selectors) by several
    sources is one reflector per namespace, over the union of their namespaces (every
    namespace if one of them reads all), each source's reads and callbacks filtered
    to its own namespaces; so Services, EndpointSlices and Secrets are listed and
    watched once whoever reads them, and a 410 Gone re-LISTs once for everyone. A kind
    asked for with other selectors (a source's ``labelSelector`` applies to its own
    kinds only) cannot be shared: it goes to another client (its own reflectors).
    Nothing here decides which sources may share a core: whoever builds the sources
    gives one core to those reading the same API server with the same credentials,
    and has the last word on its life: :meth:`stop` ends every reflector whatever the
    sources did (one whose close was skipped, because its stop raised, was cancelled
    or never ran, would otherwise leave them retrying for ever).

    ``timing`` tunes every reflector; it may be changed until the first source starts.
    ``events``: the cluster's one Event recorder, every source's
    (:mod:`~edge.providers.kubernetes.events`), set by the first source made; it starts
    with the reflectors and stops with them.
    """

    def __init__(self, configuration: k8s.Configuration, *, timing: Timing | None = None):
        self.configuration = configuration
        self.timing = timing
        self.events: EventRecorder | None = None
        self.clients: list[KubeClient] = []
        self._subscriptions: list[Subscription] = []
        self._lock = threading.Lock()
        self._opened = 0
        self._phase = "new"  # new -> running -> stopped

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def subscribe(
        self,
        name: str,
        watches: Sequence[WatchSpec],
        *,
        namespaces: Sequence[str] = (),
        on_change: Callable[[Change], None] | None = None,
    ) -> Subscription:
        """A source's share (see the class doc): ``watches`` in ``namespaces`` (empty:
        all; a spec's own ``namespaces`` wins), ``on_change`` called from reflector
        threads. Only before the first source starts."""
        sub = Subscription(self, name, watches, namespaces, on_change)
        with self._lock:
            if self._phase != "new":
                raise RuntimeError(f"kubernetes: {name} subscribes after the core started")
            self._subscriptions.append(sub)
        return sub

    def _open(self, sub: Subscription) -> None:
        with self._lock:
            if sub._open:
                return
            if self._phase == "stopped":
                raise RuntimeError(f"kubernetes: {sub.name} opens a core already stopped")
            start = self._phase == "new"
            if start:
                self._build()
                self._phase = "running"
            sub._open = True
            self._opened += 1
        if start:
            for c in self.clients:
                c.start()
            if self.events is not None:
                self.events.start()

    def _close(self, sub: Subscription, timeout: float) -> None:
        with self._lock:
            if not sub._open:
                return
            sub._open = False
            self._opened -= 1
            if self._opened or self._phase != "running":
                return
            self._phase = "stopped"
        self._stop_clients(timeout)

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop every reflector now, whichever sources are still open (they hear nothing
        more, and a later :meth:`Subscription.open` raises): the owner's call at shutdown.
        Blocking, about ``timeout``; idempotent. True when no reflector thread is left."""
        with self._lock:
            self._phase = "stopped"
            for sub in self._subscriptions:
                sub._open = False
            self._opened = 0
        return self._stop_clients(timeout)

    def alive(self) -> list[str]:
        """The names of the reflector threads (and the Event recorder's) still running (none
        once stopped)."""
        found = [r.thread.name for c in self.clients for r in c._reflectors if r.thread.is_alive()]
        if self.events is not None and self.events.alive():
            found.append(self.events.name)
        return found

    def _stop_clients(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        stopped = True
        for c in self.clients:
            stopped = c.stop(max(0.1, deadline - time.monotonic())) and stopped
        if self.events is not None:  # what it has not written yet is dropped
            stopped = self.events.stop(max(0.1, deadline - time.monotonic())) and stopped
        return stopped

    def _build(self) -> None:
        """Group every subscription's kinds into clients (see the class doc)."""
        groups: list[dict[str, tuple[WatchSpec, Scope]]] = []
        placed: list[tuple[Subscription, WatchSpec, int]] = []
        for sub in self._subscriptions:
            for spec in sub.watches:
                placed.append((sub, spec, _place(groups, spec, sub.scope(spec))))
        timing = self.timing or Timing()
        for group in groups:
            specs = [
                dataclasses.replace(spec, namespaces=tuple(sorted(scope or ())))
                for spec, scope in group.values()
            ]
            client = KubeClient(self.configuration, specs, timing=timing)
            client.on_change = functools.partial(self._dispatch, client)
            self.clients.append(client)
        for sub, spec, i in placed:
            kind, scope = spec.resource.kind, sub.scope(spec)
            sub._routes[kind] = (self.clients[i], scope, groups[i][kind][1] != scope)
        readers = collections.Counter(spec.resource.kind for _, spec, _ in placed)
        shared = sorted(kind for kind, n in readers.items() if n > 1)
        log.info(
            "kubernetes: %s: %d reflectors for %s%s",
            self.host,
            sum(len(c._reflectors) for c in self.clients),
            ", ".join(s.name for s in self._subscriptions),
            f" (shared: {', '.join(shared)})" if shared else "",
        )

    def _dispatch(self, client: KubeClient, change: Change) -> None:
        for sub in self._subscriptions:
            sub._hear(client, change)


def _rv(obj: Any) -> str:
    return obj.metadata.resource_version


class _Reflector:
    """LIST then WATCH one kind in one namespace (or all), forever, in a thread."""

    def __init__(self, owner: KubeClient, spec: WatchSpec, namespace: str):
        self.owner = owner
        self.spec = spec
        self.kind = spec.resource.kind
        self.namespace = namespace
        self.name = f"{self.kind} in {f'namespace {namespace}' if namespace else 'all namespaces'}"
        self.path = spec.resource.path(namespace)
        self.api = k8s.ApiClient(owner.configuration)
        self.decoder = msgspec.json.Decoder(spec.type)
        self.page_decoder = msgspec.json.Decoder(_TypedPage[spec.type])  # type: ignore[name-defined]
        self.rv = ""
        self.last_error = ""
        self.thread = threading.Thread(
            target=self._run, name=f"kube-{self.kind}-{namespace or 'all'}", daemon=True
        )
        self._resp: Any = None  # the open watch, cut by interrupt()
        self._delivered = False

    def _selectors(self) -> list[tuple[str, str]]:
        q = []
        if self.spec.label_selector:
            q.append(("labelSelector", self.spec.label_selector))
        if self.spec.field_selector:
            q.append(("fieldSelector", self.spec.field_selector))
        return q

    def interrupt(self) -> None:
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _run(self) -> None:
        stopping = self.owner._stopping
        timing = self.owner.timing
        backoff = Backoff(timing.backoff_base, timing.backoff_cap)
        need_list = True
        while not stopping.is_set():
            fresh = need_list
            self._delivered = False
            try:
                if need_list:
                    self._list()
                    need_list = False
                began = time.monotonic()
                self._watch()
                if self._delivered or time.monotonic() - began >= SHORT_WATCH:
                    backoff.reset()  # a clean end (timeoutSeconds): watch again at once
                    self._restarted("ended")
                    continue
                # Ended cleanly at once with nothing delivered (a proxy's cut, a server
                # shedding watches): as client-go's "very short watch", a failure, or the
                # reflector would ask again and again with no pause.
                raise KubernetesError(
                    f"the watch ended after {time.monotonic() - began:.3f} s with nothing delivered"
                )
            except Gone as e:
                need_list = True
                self._restarted("expired")
                if not fresh:  # the usual case: history moved on while away; re-LIST now
                    log.info("kubernetes: %s: %s; listing again", self.name, e)
                    continue
                error: BaseException = e
            except Exception as e:
                error = e
            if stopping.is_set():
                break
            if not isinstance(error, Gone):
                self._restarted("error")
            if self._delivered:
                backoff.reset()
            delay = backoff.next()
            self.last_error = str(error) or type(error).__name__
            log.warning(
                "kubernetes: %s: %s; retrying in %.2f s (failure %d)",
                self.name,
                self.last_error,
                delay,
                backoff.failures,
            )
            stopping.wait(delay)

    def _restarted(self, why: str) -> None:
        with self.owner._lock:
            restarts = self.owner.restarts
            restarts[self.kind, why] = restarts.get((self.kind, why), 0) + 1

    def _get(self, query: list[tuple[str, str]], read_timeout: float) -> Any:
        """Send a GET; return the urllib3 response with its body unread (2xx only)."""
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            self.path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(
            method,
            url,
            headers,
            _request_timeout=(self.owner.timing.connect_timeout, read_timeout),
        ).response
        if not 200 <= resp.status < 300:
            try:
                data = resp.read()
            finally:
                resp.release_conn()
            raise _status_error(f"{self.name}: GET {self.path}", resp.status, data)
        return resp

    def _list(self) -> None:
        """LIST every object into the cache. The first LIST asks for ``resourceVersion=0``
        (any version, as client-go's reflectors do): the API server answers it from its
        watch cache, in one answer whatever ``limit`` says, instead of paging through
        etcd; the watch that follows brings anything newer. A re-LIST (after 410 Gone
        or a failure) asks for the latest version, page by page, so it never goes back
        in time."""
        timing = self.owner.timing
        items: dict[Key, Any] = {}
        cont, rv = "", ""
        for _ in range(1_000_000):  # bounded by the server's continue tokens
            query = [("limit", str(timing.page_size)), *self._selectors()]
            if cont:
                query.append(("continue", cont))
            elif not self.rv:
                query.append(("resourceVersion", "0"))
            resp = self._get(query, timing.request_timeout)
            try:
                data = resp.read()
            finally:
                resp.release_conn()
            with gc_paused():
                meta = self._page(data, items)
            rv, cont = meta.resource_version, meta.continue_
            if not cont:
                break
        first = self.rv == ""
        self.rv = rv
        self.owner._replace(self, items)
        if first:
            log.info("kubernetes: %s: listed %d at resourceVersion %s", self.name, len(items), rv)

    def _page(self, data: bytes, items: dict[Key, Any]) -> _ListMeta:
        """Decode a LIST page into ``items``; its metadata."""
        try:
            typed = self.page_decoder.decode(data)
        except msgspec.ValidationError:  # some object does not decode: each on its own
            page = _PAGE.decode(data)
            for raw in page.items or ():
                key, _, obj = self._decode(raw)
                if obj is not None:
                    items[key] = obj
            return page.metadata
        for obj in typed.items or ():
            items[(obj.metadata.namespace or "", obj.metadata.name)] = obj
        return typed.metadata

    def _watch(self) -> None:
        timing = self.owner.timing
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.rv),
            ("timeoutSeconds", str(int(timing.watch_timeout * (1 + random.random())))),
            *self._selectors(),
        ]
        resp = self._get(query, timing.read_timeout)
        self._resp = resp
        clean = False
        try:
            if self.owner._stopping.is_set():
                return
            pending = b""
            for chunk in resp.stream(None, decode_content=False):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                self._events(lines)
            clean = True
        finally:
            self._resp = None
            if not clean:
                resp.close()
            resp.release_conn()

    def _events(self, lines: list[bytes]) -> None:
        """Apply a batch of watch event lines; one callback for the batch."""
        updates: list[tuple[Key, Any]] = []
        rv = self.rv
        try:
            for line in lines:
                if not line.strip():
                    continue
                ev = _EVENT.decode(line)
                if ev.type == "BOOKMARK":
                    self._delivered = True
                    rv = _NAMED.decode(ev.object).metadata.resource_version or rv
                elif ev.type == "ERROR":  # not a delivery: the backoff goes on growing
                    st = _STATUS.decode(ev.object)
                    cls = Gone if st.code == 410 else ApiStatusError
                    raise cls(f"{self.name}: watch", st.code, st.reason, st.message)
                elif ev.type in ("ADDED", "MODIFIED", "DELETED"):
                    self._delivered = True
                    key, obj_rv, obj = self._decode(ev.object)
                    if key[1]:
                        updates.append((key, None if ev.type == "DELETED" else obj))
                    rv = obj_rv or rv
                else:
                    log.warning("kubernetes: %s: unknown watch event type %r", self.name, ev.type)
        finally:
            if updates:
                self.owner._apply(self, updates)
            self.rv = rv

    def _decode(self, raw: msgspec.Raw) -> tuple[Key, str, Any]:
        """``(key, resourceVersion, object)``; the object is None when it does not
        decode into the watched type (logged and counted)."""
        try:
            obj = self.decoder.decode(raw)
            meta = obj.metadata
            return (meta.namespace or "", meta.name), meta.resource_version, obj
        except msgspec.ValidationError as e:
            try:
                meta = _NAMED.decode(raw).metadata
            except msgspec.ValidationError:
                meta = _Meta()  # no usable name: nothing to key it by
            with self.owner._lock:
                self.owner.decode_errors += 1
                self.owner.skipped[self.kind] = self.owner.skipped.get(self.kind, 0) + 1
            log.warning(
                "kubernetes: %s: %s/%s left out, it does not decode: %s",
                self.name,
                meta.namespace,
                meta.name,
                e,
            )
            return (meta.namespace, meta.name), meta.resource_version, None
