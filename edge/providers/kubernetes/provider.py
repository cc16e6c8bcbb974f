"""edge's Kubernetes providers: one shared core, and the sources built on it.

:class:`KubernetesProvider` is the core every Kubernetes source shares; a source says
which kinds it watches, its pure conversion, its endpoints-only update if it has one,
its provider name (which qualifies its elements) and any extra threads.
:class:`KubernetesIngressProvider` (``providers.kubernetesIngress``, ``@kubernetes``) is
one source; :class:`KubernetesCRDProvider` (``providers.kubernetesCRD``,
``@kubernetescrd``: Traefik's ``traefik.io/v1alpha1`` kinds) another. Both may run at
once in one edge, on one :class:`~edge.providers.kubernetes.client.KubeCore` when they
read the same cluster with the same credentials (:func:`cluster_key`; the app makes the
cores, :class:`SharedCores`): one client, one reflector per kind and namespace whoever
reads it, one cache, so Services, EndpointSlices and Secrets (of every type, as Traefik
reads them: :data:`SECRETS_WATCH`) are listed, watched and decoded once. Each source keeps its own converter thread, throttle, problems and publishing,
and is woken only by changes to its own kinds in its own namespaces.

Where the two configurations differ in ``namespaces``, a shared kind is watched once
per namespace of the union (once in all namespaces if either reads all), and each
source's reads and wake-ups are filtered to its own namespaces: what it converts is
exactly what it would list alone, and nothing is listed twice. Separate reflectors
per source would list the common namespaces twice; one reflector over all namespaces
for a source restricted to a few would read namespaces neither asked for. The same
credentials serve both sources, so the union asks the API server for nothing either
could not read. A ``labelSelector`` applies to its source's own kinds (Ingresses,
the traefik.io kinds), which are never shared.

Below, "the conversion" is the source's; the Ingress status writer is the Ingress
source's own.

Owns the provider's threads and what flows between them:

- its :class:`~edge.providers.kubernetes.client.Subscription` to the core's reflectors
  (one thread per watched kind and namespace, shared), whose change callback only marks
  the cache dirty;
- the *converter* thread: waits for the first full sync, then converts the cached
  snapshot with the source's pure conversion
  (:func:`~edge.providers.kubernetes.ingress.convert`,
  :func:`~edge.providers.kubernetes.crd.convert`), at most once per throttle window
  (changes arriving meanwhile are coalesced into the next run); when only EndpointSlices
  changed since the last round it derives the result from the last one instead (the
  source's ``update_endpoints``: a cost that grows with the slices changed, not the
  cluster); it logs each problem once (when it appears; its disappearance at INFO), and
  hands a configuration that differs from the last one to the event loop with
  ``loop.call_soon_threadsafe``;
- the *status* thread: writes ``status.loadBalancer.ingress`` of the Ingresses edge
  serves when the address set differs from what the Ingress holds, retrying failures
  with backoff; an Ingress that failed is tried after the others (one the API server
  refuses never holds them back) and a few failures in a row end a pass;
- Events: each whole conversion's problems go, from the converter thread, to the
  cluster's one Event recorder (``core.events``, made by the first source on the core;
  :mod:`~edge.providers.kubernetes.events`), which only queues them and posts them from
  its own thread; a source says which object each problem is about
  (:meth:`KubernetesProvider.subject`).

Invariants:

- Nothing here runs on the event loop but :meth:`KubernetesIngressProvider._deliver`
  (one ``publish`` call). Listing, watching, converting, comparing and status writes
  happen in the threads above.
- Nothing is published before every reflector the source reads has completed its first
  LIST (another source's kinds never hold it back); until then edge is not ready (the
  watcher expects this provider) and the log says every ``wait_log_interval`` seconds
  what is missing and why (the API server unreachable, a 403, ...). Reflectors keep
  retrying with backoff, forever.
- Once a configuration was published, losing the API server changes nothing: the cache
  keeps the last objects seen, no new configuration is made from a failure, the last
  good one keeps serving, and the reflectors resume (re-LIST on 410) when it is back.
- An EndpointSlice change yields a configuration that differs from the previous one in
  server lists only (the conversion guarantees it, see its module doc), which the
  Dataplane applies in place (HTTP, TCP and UDP load balancers alike).
  An Ingress change that touches only its ``status`` (our own writes coming back) is not
  converted at all, nor is a Secret, ConfigMap or Node changed in its metadata alone
  (:data:`CONTENT_KINDS`: Helm's and leader election's writes, Node heartbeats).
- A status write happens only when the wanted addresses differ from the Ingress' own
  ``status.loadBalancer.ingress`` (as a set), and the same write is not repeated while
  the Ingress still shows the version it was written against.

Where the addresses come from (``providers.kubernetesIngress.ingressEndpoint``):

- ``ip`` and/or ``hostname``: as given;
- ``publishedService: ns/name``: that Service, watched on its own (whatever
  ``namespaces`` says): a LoadBalancer's ``status.loadBalancer.ingress``, an
  ExternalName's name, else its ``externalIPs``, else its ``clusterIP`` (Traefik's
  reading);
- no ``ingressEndpoint``, in a pod (``POD_NAME`` and ``POD_NAMESPACE`` set through the
  Downward API, as ``k8s/daemonset.yaml`` does): when that pod runs with
  ``hostNetwork``, the addresses of the nodes running a pod of the same controller
  (its DaemonSet: same ``ownerReferences`` controller uid) in that namespace, not being
  deleted, phase Running (this pod counts at once); per node its ExternalIP addresses,
  else its InternalIP ones. Pods in ``POD_NAMESPACE`` are watched for it (by the
  status client), and Nodes (through the core: one reflector with the CRD source's
  ``nodePortLB``; subscribed whenever no ``ingressEndpoint`` is set, since whether edge
  runs in a pod is known only at start).
- otherwise no status is written (logged once at start).
With no address known yet (a LoadBalancer still pending) nothing is written, and an
Ingress edge stops serving keeps the status last written (as with Traefik).

Errors: :class:`~edge.providers.kubernetes.client.CredentialsError` at construction when
no API server can be found (a configuration error, edge does not start);
:class:`ClusterUnavailable` from :func:`check_cluster` when the cluster cannot be read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from edge.config.dynamic import Configuration
from edge.config.static import (
    IngressEndpoint,
    KubernetesCRDConfig,
    KubernetesGatewayConfig,
    KubernetesIngressConfig,
    KubernetesIngressNGINXConfig,
)
from edge.errors import ConfigError
from edge.providers.base import Message, Publish
from edge.providers.kubernetes import ingress_nginx, objects
from edge.providers.kubernetes.client import (
    CONFIG_MAPS,
    CRD_RESOURCES,
    ENDPOINT_SLICES,
    INGRESS_CLASSES,
    INGRESSES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
    Backoff,
    Change,
    KubeClient,
    KubeCore,
    KubernetesError,
    Subscription,
    Timing,
    WatchSpec,
    gc_paused,
    load_api_config,
)
from edge.providers.kubernetes.crd import PROVIDER as CRD_PROVIDER
from edge.providers.kubernetes.crd import Conversion as CRDConversion
from edge.providers.kubernetes.crd import CRDOptions
from edge.providers.kubernetes.crd import convert as convert_crd
from edge.providers.kubernetes.crd import update_endpoints as update_crd_endpoints
from edge.providers.kubernetes.events import (
    REFUSED,
    EventRecorder,
    Tracker,
    generation_in,
    reason_code,
    refusals_of,
)
from edge.providers.kubernetes.gateway import EntryPointPort
from edge.providers.kubernetes.ingress import (
    Conversion,
    IngressOptions,
    convert,
    update_endpoints,
)
from edge.providers.kubernetes.ingress import Problem as IngressProblem
from edge.providers.kubernetes.objects import Node, Pod

__all__ = [
    "POD_NAMESPACE_ENV",
    "POD_NAME_ENV",
    "Address",
    "ClusterUnavailable",
    "KubernetesCRDProvider",
    "KubernetesIngressNGINXProvider",
    "KubernetesIngressProvider",
    "KubernetesProvider",
    "check_cluster",
    "check_crd_cluster",
    "check_nginx_cluster",
    "node_addresses",
    "service_addresses",
]

log = logging.getLogger(__name__)
T = TypeVar("T")  # what a status round writes (_status_rounds)

POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
NODE_NAME_ENV = "NODE_NAME"
WAIT_LOG_INTERVAL = 10.0  # seconds between "still waiting for the first sync" lines
STATUS_BACKOFF = (1.0, 60.0)  # base and cap of the status writer's retries, seconds
STATUS_FAILURE_RUN = 3  # status writes failing in a row that end a pass

Key = tuple[str, str]
Address = tuple[str, str]
"""``("ip", "10.0.0.1")`` or ``("hostname", "lb.example.com")``."""


class ClusterUnavailable(KubernetesError):
    """The cluster could not be read completely in time; names what is missing and why."""


# --- addresses (pure) -------------------------------------------------------------------


def _address(ip: str, hostname: str) -> list[Address]:
    out: list[Address] = []
    if ip:
        out.append(("ip", ip))
    if hostname:
        out.append(("hostname", hostname))
    return out


def service_addresses(svc: objects.Service) -> list[Address]:
    """What a published Service offers, Traefik's way (sorted, unique; may be empty)."""
    spec = svc.spec
    found: list[Address] = []
    if spec.type == "ExternalName":
        found = _address("", spec.external_name)
    elif spec.type == "LoadBalancer":
        for lb in svc.status.load_balancer.ingress:
            found.extend(_address(lb.ip, lb.hostname))
    if not found and spec.type != "ExternalName":
        found = [("ip", ip) for ip in spec.external_ips if ip]
        if not found and spec.type != "LoadBalancer" and spec.cluster_ip not in ("", "None"):
            found = [("ip", spec.cluster_ip)]
    return sorted(set(found))


def node_addresses(
    pods: Mapping[Key, Pod], nodes: Mapping[Key, Node], namespace: str, name: str
) -> tuple[list[Address], str]:
    """The addresses of the nodes running this pod's siblings (see the module doc), and
    when there are none, why (``""`` otherwise)."""
    me = pods.get((namespace, name))
    if me is None:
        return [], f"pod {namespace}/{name} not seen yet"
    if not me.spec.host_network:
        return [], (
            f"pod {namespace}/{name} does not use hostNetwork: set "
            "ingressEndpoint.publishedService to publish its Service's addresses"
        )
    owner = me.controller_uid
    node_names = {me.spec.node_name} if me.spec.node_name else set()
    if owner:
        for pod in pods.values():
            if (
                pod.metadata.namespace == namespace
                and pod.controller_uid == owner
                and pod.metadata.deletion_timestamp is None
                and pod.status.phase == "Running"
                and pod.spec.node_name
            ):
                node_names.add(pod.spec.node_name)
    found: set[Address] = set()
    missing = []
    for node_name in sorted(node_names):
        node = nodes.get(("", node_name))
        if node is None:
            missing.append(node_name)
            continue
        external = [a.address for a in node.status.addresses if a.type == "ExternalIP"]
        internal = [a.address for a in node.status.addresses if a.type == "InternalIP"]
        found.update(("ip", ip) for ip in (external or internal) if ip)
    if not found:
        why = f"nodes {', '.join(missing)} not seen yet" if missing else "no node address known"
        return [], why
    return sorted(found), ""


def _status_of(ing: objects.Ingress) -> set[Address]:
    out: set[Address] = set()
    for lb in ing.status.load_balancer.ingress:
        out.update(_address(lb.ip, lb.hostname))
    return out


def _same_servers(old: Configuration, new: Configuration) -> bool:
    """Two configurations equal but for server lists (HTTP, TCP and UDP load balancers):
    are those equal too?"""
    for section in ("http", "tcp", "udp"):
        part_a, part_b = getattr(old, section), getattr(new, section)
        a = part_a.services if part_a is not None else {}
        b = part_b.services if part_b is not None else {}
        if a.keys() != b.keys() or not all(a[k] is b[k] or a[k] == b[k] for k in a):
            return False
    return True


def _same_content(old: Any, new: Any) -> bool:
    """Two versions of an object equal in every field but ``metadata`` (None: absent)."""
    if old is None or new is None:
        return old is new
    return old is new or all(
        getattr(old, f) == getattr(new, f) for f in old.__struct_fields__ if f != "metadata"
    )


def _relevant(
    changed: dict[str, set[Key]],
    old: Mapping[str, Mapping[Key, Any]],
    new: Mapping[str, Mapping[Key, Any]],
) -> dict[str, set[Key]]:
    """``changed`` without the objects of :data:`CONTENT_KINDS` whose content is the same
    in ``old`` and ``new`` (snapshots): those changes reach no configuration."""
    out: dict[str, set[Key]] = {}
    for kind, keys in changed.items():
        if kind in CONTENT_KINDS:
            was, now = old.get(kind, {}), new.get(kind, {})
            keys = {k for k in keys if not _same_content(was.get(k), now.get(k))}
            if not keys:
                continue
        out[kind] = keys
    return out


def _without_status(ing: objects.Ingress | None) -> objects.Ingress | None:
    if ing is None:
        return None
    meta = msgspec.structs.replace(ing.metadata, resource_version="")
    return msgspec.structs.replace(ing, metadata=meta, status=objects.IngressStatus())


# --- the shared core -------------------------------------------------------------------


SECRETS_WATCH = WatchSpec(SECRETS, objects.Secret)
"""Secrets of every type, as Traefik reads them (an Opaque Secret is a common home for
client certificates and CA bundles), one reflector for both sources. Every Secret's
JSON is transferred and decoded, but only the keys the model names are kept
(:class:`~edge.providers.kubernetes.objects.TLSData`): decoding 500 Helm release
Secrets of 50 KB (25 MB of JSON) takes 8 ms here and keeps 0.4 MB."""

CONTENT_KINDS = frozenset({"Secret", "ConfigMap", "Node"})
"""Kinds whose metadata no conversion reads beyond the key: a change to their metadata
alone (a new resourceVersion, a Helm or leader-election annotation, a Node's
heartbeat, which the Node model does not even keep) changes no configuration."""


KubernetesConfig = KubernetesIngressConfig | KubernetesCRDConfig | KubernetesGatewayConfig
ClusterKey = tuple[str, str, str, str]


def cluster_key(config: KubernetesConfig) -> ClusterKey:
    """What names a cluster and the credentials to read it with, as configured
    (``endpoint``, ``token``, ``certAuthFilePath``, ``kubeconfig``): sources whose keys
    are equal share one core."""
    return (config.endpoint, config.token, config.cert_auth_file_path, config.kubeconfig)


def own_core(config: KubernetesConfig) -> KubeCore:
    """A core for one source's configuration. Credentials are resolved now: a missing
    or broken one is a configuration error (:class:`CredentialsError`)."""
    return KubeCore(load_api_config(*cluster_key(config)))


def reporting_instance(environ: Mapping[str, str]) -> str:
    """Who posts this edge's Events (their ``reportingInstance``): its pod (``POD_NAME``
    from the Downward API), else its node (``NODE_NAME``), else the host's name."""
    return environ.get(POD_NAME_ENV) or environ.get(NODE_NAME_ENV) or socket.gethostname()


class SharedCores:
    """The Kubernetes cores of one edge, one per cluster key (:func:`cluster_key`): the
    app makes one and asks it for each Kubernetes source's core, so sources reading
    the same API server with the same credentials share its connection, reflectors and
    cache. Not a global: one per :func:`edge.app.build_providers` call."""

    def __init__(self) -> None:
        self._cores: dict[ClusterKey, KubeCore] = {}

    def core(self, config: KubernetesConfig) -> KubeCore:
        key = cluster_key(config)
        found = self._cores.get(key)
        if found is None:
            found = self._cores[key] = own_core(config)
        return found


class Converted(Protocol):
    """What a source's conversion returns: the configuration and its problems."""

    @property
    def configuration(self) -> Configuration: ...

    @property
    def problems(self) -> Sequence[Any]: ...


class KubernetesProvider:
    """The machinery every Kubernetes source shares (see the module doc): reflectors,
    the throttled converter thread with the endpoints-only fast path, problem reporting
    and delivery to the loop. A source (a subclass) says what differs: the kinds it
    watches (:meth:`watches`), its pure conversion (:meth:`convert_state`), its
    endpoints-only update if it has one (:meth:`update_endpoints`), which changes need
    no conversion (:meth:`unchanged`), what its round's log line says (:meth:`describe`),
    and any extra threads and clients (the Ingress status writer). ``name`` qualifies
    its elements (``@kubernetes``, ``@kubernetescrd``) and prefixes its log lines.

    ``core`` is the cluster's shared core: the source subscribes to it here, with the
    kinds :meth:`watches` names (so a subclass sets what that reads before calling this),
    and opens its subscription in :meth:`start`; every source on a core is made before
    the first starts. ``default_throttle`` is ``providersThrottleDuration``, used when
    the provider's own ``throttleDuration`` is unset; ``timing`` tunes the reflectors
    (the core's, so every source's on it). That and ``wait_log_interval`` may be changed
    until :meth:`start`.
    """

    def __init__(
        self,
        *,
        name: str,
        core: KubeCore,
        namespaces: Sequence[str],
        throttle: float | None,
        default_throttle: float = 2.0,
        timing: Timing | None = None,
    ) -> None:
        self.name = name
        self.core = core
        self.namespaces = list(namespaces)
        self.throttle: float | None = float(throttle) if throttle is not None else None
        self.default_throttle = float(default_throttle)
        if timing is not None:
            core.timing = timing
        self.wait_log_interval = WAIT_LOG_INTERVAL
        self.conversions = 0  # whole conversions run
        self.patches = 0  # endpoints-only changes applied to the last conversion
        self.published = 0  # configurations handed to the loop
        self.conversion: Any = None  # the last one
        self._loop: asyncio.AbstractEventLoop | None = None
        self._publish: Publish | None = None
        self._cond = threading.Condition()
        self._dirty = False
        self._forced = False  # reload() asked for a whole conversion this round
        self._changed: dict[str, set[Key]] = {}
        self._stopping = False
        self._started = False
        self._threads: list[threading.Thread] = []
        # The status writer's (a source that writes status: _status_rounds).
        self._status_cond = threading.Condition()
        self._status_dirty = False
        self._last: Configuration | None = None  # the last configuration handed over
        self._problems: set[Any] = set()
        self._state: objects.ClusterState | None = None  # that of the last conversion
        self._snapshot: Mapping[str, Mapping[Key, Any]] = {}  # the same, as listed
        self._need_full = True  # the next round converts everything
        # The cluster's Event recorder, every source's on this core: the first makes it.
        if core.events is None:
            core.events = EventRecorder(
                core,
                instance=reporting_instance(os.environ),
                host=os.environ.get(NODE_NAME_ENV, ""),
            )
        self.events: EventRecorder = core.events
        self._tracker = Tracker()  # this source's refusals, round to round
        # Last: the source's kinds (``watches``) may read what a subclass set before.
        self.view: Subscription = core.subscribe(
            name, self.watches(), namespaces=self.namespaces, on_change=self._on_change
        )
        self._api_versions = {w.resource.kind: w.resource.api_version for w in self.view.watches}

    # --- what a source says -----------------------------------------------------------

    def watches(self) -> list[WatchSpec]:
        """The kinds this source reads."""
        raise NotImplementedError

    def convert_state(self, state: objects.ClusterState) -> Converted:
        """The pure conversion of a whole snapshot."""
        raise NotImplementedError

    def update_endpoints(
        self, previous: Any, old: objects.ClusterState, new: objects.ClusterState
    ) -> Any:
        """``previous`` with only EndpointSlices changed from ``old`` to ``new``, or
        None when a whole conversion is needed (the default: no fast path)."""
        return None

    def unchanged(self, changed: dict[str, set[Key]], snapshot: Mapping[str, Any]) -> bool:
        """Whether ``changed`` cannot change the configuration (no conversion then)."""
        return False

    def converted(self, conversion: Any, snapshot: Mapping[str, Any], patched: bool) -> None:
        """Called after each round that converted or patched (converter thread)."""

    def subject(self, problem: Any) -> tuple[str, Key, str, str] | None:
        """Which object a problem is about, for its Event: (kind, key, reason, message),
        or None for none. This default reads the CRD and Gateway sources' problems
        (``kind``; ``object``: ``namespace/name``, or ``name`` when cluster-scoped;
        ``where``; ``reason``), whose reason is :data:`~edge.providers.kubernetes.events.REFUSED`;
        a problem of another shape has no Event."""
        kind, obj = getattr(problem, "kind", None), getattr(problem, "object", None)
        if not isinstance(kind, str) or not isinstance(obj, str):
            return None
        namespace, _, name = obj.rpartition("/")
        return kind, (namespace, name), REFUSED, f"{problem.where}: {problem.reason}"

    def describe(self, conversion: Any, snapshot: Mapping[str, Any]) -> str:
        """The counts of a round's log line."""
        conf = conversion.configuration
        parts = []
        for label, section in (("http", conf.http), ("tcp", conf.tcp), ("udp", conf.udp)):
            if section is not None:
                parts.append(f"{len(section.routers)} {label} routers")
        return ", ".join(parts or ["no routers"]) + f", {len(conversion.problems)} problems"

    def start_extra(self, timing: Timing) -> list[threading.Thread]:
        """Make the source's extra clients; return its extra threads (not started)."""
        return []

    def extra_clients(self) -> list[KubeClient]:
        return []

    def extra_views(self) -> list[Subscription]:
        """The source's other subscriptions to the core, opened and closed with it."""
        return []

    def wake_extra(self) -> None:
        """Wake the source's extra threads (to see ``_stopping``)."""

    # --- state ------------------------------------------------------------------------

    @property
    def window(self) -> float:
        """Seconds between two conversions."""
        return self.throttle if self.throttle is not None else self.default_throttle

    @property
    def timing(self) -> Timing | None:
        """The reflectors' timing: the core's, shared with every source on it."""
        return self.core.timing

    @timing.setter
    def timing(self, timing: Timing | None) -> None:
        self.core.timing = timing

    @property
    def synced(self) -> bool:
        return self.view.synced

    def waiting_for(self) -> dict[str, str]:
        """Before the first sync: each reflector this source reads without a complete
        LIST, and its last error."""
        return self.view.pending()

    # --- life cycle -----------------------------------------------------------------

    async def run(self, publish: Publish) -> None:
        """Start the threads; publish from them until cancelled, then stop them.

        The stop is shielded: cancelled again while it waits for the loop's executor
        or runs there (the loop's shutdown cancels every task left), the task ends but
        the stop still runs. Unshielded, a stop still queued behind busy workers was
        cancelled before it began: the source's subscription was never closed and the
        core's reflectors outlived edge."""
        loop = asyncio.get_running_loop()
        try:
            self.start(loop, publish)  # what it opened is closed, even if it raised
            await loop.create_future()  # until cancelled
        finally:
            await asyncio.shield(loop.run_in_executor(None, self.stop))

    def start(self, loop: asyncio.AbstractEventLoop, publish: Publish) -> None:
        """Start the reflectors, the converter and the source's threads (returns at once)."""
        if self._started:
            raise RuntimeError(f"kubernetes provider {self.name}: started twice")
        self._started = True
        self._loop, self._publish = loop, publish
        timing = self.timing or Timing()
        extra = self.start_extra(timing)
        self._threads = [
            threading.Thread(target=self._convert_loop, name=f"{self.name}-convert", daemon=True),
            *extra,
        ]
        log.info(
            "%s: watching %s at %s (throttle %.3g s)",
            self.name,
            ", ".join(self.namespaces) or "all namespaces",
            self.core.host,
            self.window,
        )
        self.view.open()
        for v in self.extra_views():
            v.open()
        for c in self.extra_clients():
            c.start()
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop every thread (blocking, bounded by about ``timeout``); idempotent.

        Every step is taken whatever an earlier one raised (the first error is raised
        at the end): a source whose extra step fails still closes its subscription, so
        the core's reflectors do not outlive it."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        errors: list[Exception] = []

        def attempt(step: Callable[..., object], *args: object) -> None:
            try:
                step(*args)
            except Exception as e:
                log.exception("%s: stopping: %s", self.name, e)
                errors.append(e)

        attempt(self.wake_extra)
        for v in self.extra_views():
            attempt(v.close, left())
        attempt(self.view.close, left())
        for c in self.extra_clients():
            attempt(c.stop, left())
        for t in self._threads:
            if t.is_alive():  # not started when start() raised
                attempt(t.join, left())
        if errors:
            raise errors[0]

    def reload(self) -> None:
        """Convert again now (SIGHUP), whatever else the round finds changed (never
        skipped as :meth:`unchanged`, never only patched); published only if the result
        changed."""
        with self._cond:
            self._dirty = True
            self._forced = True
            self._cond.notify_all()

    # --- reflector callbacks (reflector threads) -----------------------------------------

    def _on_change(self, change: Change) -> None:
        with self._cond:
            self._dirty = True
            self._changed.setdefault(change.kind, set()).update(change.keys)
            self._cond.notify_all()

    # --- the converter thread -----------------------------------------------------------

    def _convert_loop(self) -> None:
        view = self.view
        started = time.monotonic()
        next_log = started + self.wait_log_interval
        last_end = float("-inf")
        while True:
            with self._cond:
                while not self._stopping and not (self._dirty and view.synced):
                    now = time.monotonic()
                    synced = view.synced
                    if not synced and now >= next_log:
                        next_log = now + self.wait_log_interval
                        self._log_waiting(now - started)
                    self._cond.wait(max(0.01, next_log - now) if not synced else None)
                if self._stopping:
                    return
                # Throttle: coalesce every change made until the window has passed.
                while not self._stopping and time.monotonic() < last_end + self.window:
                    self._cond.wait(last_end + self.window - time.monotonic())
                if self._stopping:
                    return
                self._dirty = False
                changed, self._changed = self._changed, {}
                forced, self._forced = self._forced, False
            try:
                self._convert(view, changed, time.monotonic() - started, forced)
            except Exception:  # a bug: keep the last configuration, keep watching
                log.exception(
                    "%s: the conversion failed; keeping the last configuration", self.name
                )
            last_end = time.monotonic()

    def _log_waiting(self, elapsed: float) -> None:
        pending = self.waiting_for()
        detail = "; ".join(
            f"{name}: {err or 'no answer yet'}" for name, err in sorted(pending.items())
        )
        log.warning(
            "%s: no configuration yet after %.0f s, still waiting for the first LIST of "
            "%s (retrying)",
            self.name,
            elapsed,
            detail or "nothing",
        )

    def _convert(
        self, view: Subscription, changed: dict[str, set[Key]], elapsed: float, forced: bool
    ) -> None:
        snapshot = view.snapshot()
        previous = None if self._need_full or forced else self.conversion
        if previous is not None and changed:
            changed = _relevant(changed, self._snapshot, snapshot)
            if not changed or self.unchanged(changed, snapshot):
                # Nothing a conversion reads changed: the last one stands for this
                # state, which the next endpoints-only round compares against.
                self._snapshot = snapshot
                self._state = objects.ClusterState.from_snapshot(snapshot)
                return
        t0 = time.perf_counter()
        state = objects.ClusterState.from_snapshot(snapshot)
        self._need_full = True  # until this round has completed
        conversion = None
        if previous is not None and self._state is not None and set(changed) == {"EndpointSlice"}:
            conversion = self.update_endpoints(previous, self._state, state)
        patched = conversion is not None
        if conversion is not None:
            self.patches += 1
            how = "endpoints updated in place"
        else:
            with gc_paused():
                conversion = self.convert_state(state)
            self.conversions += 1
            self._report(conversion.problems)
            self._record(conversion.problems, snapshot)
            how = "converted"
        took = time.perf_counter() - t0
        self.conversion = conversion
        self._state = state
        self._snapshot = snapshot
        self._need_full = False
        self.converted(conversion, snapshot, patched)
        conf = conversion.configuration
        # Patched, it differs from the last only where servers do: compare those alone.
        if self._last is not None and (
            _same_servers(self._last, conf) if patched else conf == self._last
        ):
            log.debug("%s: round %d: unchanged (%s in %.3f s)", self.name, self.rounds, how, took)
            return
        first = self._last is None
        self._last = conf
        log.log(
            logging.INFO if first else logging.DEBUG,
            "%s: %s: %s; %s in %.3f s",
            self.name,
            f"first sync after {elapsed:.2f} s" if first else f"round {self.rounds}",
            self.describe(conversion, snapshot),
            how,
            took,
        )
        self._hand_over(Message(self.name, conf))

    @property
    def rounds(self) -> int:
        return self.conversions + self.patches

    def _report(self, problems: Iterable[Any]) -> None:
        """Log each problem once, when it appears; say when one is gone."""
        current = set(problems)
        for p in sorted(current - self._problems, key=str):
            log.error("%s: %s; that route is left out", self.name, p)
        for p in sorted(self._problems - current, key=str):
            log.info("%s: resolved: %s", self.name, p)
        self._problems = current

    def _record(self, problems: Iterable[Any], snapshot: Mapping[str, Mapping[Key, Any]]) -> None:
        """Hand this round's refusals to the cluster's Event recorder, which only queues
        them (:mod:`~edge.providers.kubernetes.events`); a failure here is logged and
        changes nothing else."""
        try:
            refusals = refusals_of(problems, self.subject, snapshot, self._api_versions)
            now = time.time()
            observed, withdrawn = self._tracker.round(refusals, generation_in(snapshot), now)
            self.events.submit(observed, withdrawn)
        except Exception:
            log.exception("%s: this round's Events are not recorded", self.name)

    def _hand_over(self, msg: Message) -> None:
        loop = self._loop
        assert loop is not None
        try:
            loop.call_soon_threadsafe(self._deliver, msg)
        except RuntimeError:  # the loop is closed: edge is stopping
            log.debug("%s: loop closed, configuration dropped", self.name)
            return
        self.published += 1

    def _deliver(self, msg: Message) -> None:
        """On the loop: the one thing this provider does there."""
        if self._publish is not None and not self._stopping:
            self._publish(msg)

    # --- status (the sources that write it) -------------------------------------------

    def _wake_status(self) -> None:
        with self._status_cond:
            self._status_dirty = True
            self._status_cond.notify_all()

    def _status_rounds(self, take: Callable[[], T], write: Callable[[T], str], what: str) -> None:
        """A status writer thread's body: each time the status is marked dirty
        (:meth:`_wake_status`), ``write`` what ``take`` gives (read under the lock),
        which returns what failed ("" if nothing); a failure is tried again after a
        backoff (:data:`STATUS_BACKOFF`), logged as ``what``. Ends when the provider
        stops."""
        backoff = Backoff(*STATUS_BACKOFF)
        retry_at: float | None = None
        while True:
            with self._status_cond:
                while not self._stopping and not self._status_dirty:
                    if retry_at is not None and time.monotonic() >= retry_at:
                        break
                    wait = None if retry_at is None else max(0.01, retry_at - time.monotonic())
                    self._status_cond.wait(wait)
                if self._stopping:
                    return
                self._status_dirty = False
                taken = take()
            retry_at = None
            failed = write(taken)
            if failed:
                delay = backoff.next()
                retry_at = time.monotonic() + delay
                log.warning("%s: %s; retrying in %.1f s", what, failed, delay)
            else:
                backoff.reset()


# --- the kubernetesIngress source -------------------------------------------------------


def _watches(config: KubernetesIngressConfig) -> list[WatchSpec]:
    return [
        WatchSpec(INGRESSES, objects.Ingress, label_selector=config.label_selector),
        WatchSpec(INGRESS_CLASSES, objects.IngressClass),
        WatchSpec(SERVICES, objects.Service),
        WatchSpec(ENDPOINT_SLICES, objects.EndpointSlice),
        SECRETS_WATCH,
    ]


class KubernetesIngressProvider(KubernetesProvider):
    """The ``providers.kubernetesIngress`` source (see the module doc): Ingresses, the
    endpoints-only fast path, and the Ingress status writer.

    ``environ`` is where ``POD_NAME``/``POD_NAMESPACE`` are read (default
    ``os.environ``); it may be changed until :meth:`start`.
    """

    def __init__(
        self,
        config: KubernetesIngressConfig,
        *,
        name: str = "kubernetes",
        default_throttle: float = 2.0,
        environ: Mapping[str, str] | None = None,
        timing: Timing | None = None,
        core: KubeCore | None = None,
    ) -> None:
        self.config = config
        super().__init__(
            name=name,
            core=core if core is not None else own_core(config),
            namespaces=config.namespaces,
            throttle=config.throttle_duration,
            default_throttle=default_throttle,
            timing=timing,
        )
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.options = IngressOptions.from_config(config)
        self.status_client: KubeClient | None = None
        self.status_writes = 0  # successful status writes
        self.conversion: Conversion | None = None  # the last one
        self._selected: frozenset[Key] = frozenset()
        self._status_mode = ""  # "", "static", "service", "nodes"
        self._ingresses: Mapping[Key, objects.Ingress] = {}  # those of the last conversion
        # The Nodes the status writer reads (the nodes edge's own pods run on): a
        # subscription of the core, so a CRD source reading Nodes (nodePortLB) shares the
        # reflector. Made now (subscriptions come before the core starts), wherever the
        # addresses may come from nodes (no ingressEndpoint): whether they do is known at
        # start, from ``environ``.
        self.node_view: Subscription | None = None
        if config.ingress_endpoint is None:
            self.node_view = self.core.subscribe(
                f"{name}-status", [WatchSpec(NODES, Node)], on_change=self._on_status_source
            )

    # --- the source -------------------------------------------------------------------

    def watches(self) -> list[WatchSpec]:
        return _watches(self.config)

    def convert_state(self, state: objects.ClusterState) -> Conversion:
        return convert(state, self.options)

    def update_endpoints(
        self, previous: Any, old: objects.ClusterState, new: objects.ClusterState
    ) -> Conversion | None:
        return update_endpoints(previous, old, new, self.options)

    def unchanged(self, changed: dict[str, set[Key]], snapshot: Mapping[str, Any]) -> bool:
        """Only Ingresses changed, and only in status and resourceVersion: our own status
        writes (or anyone's) coming back; the configuration cannot have changed."""
        ingresses = snapshot.get("Ingress", {})
        if set(changed) == {"Ingress"} and all(
            _without_status(self._ingresses.get(k)) == _without_status(ingresses.get(k))
            for k in changed["Ingress"]
        ):
            self._ingresses = ingresses
            self._wake_status()
            return True
        return False

    def converted(self, conversion: Any, snapshot: Mapping[str, Any], patched: bool) -> None:
        self._ingresses = snapshot.get("Ingress", {})
        if not patched:
            with self._status_cond:
                self._selected = conversion.selected
            self._wake_status()

    def subject(self, problem: Any) -> tuple[str, Key, str, str] | None:
        """An Ingress's problem (:class:`~edge.providers.kubernetes.ingress.Problem`), its
        reason from its kind (``service-not-found``: ``ServiceNotFound``); another shape
        as the base reads it."""
        if not isinstance(problem, IngressProblem):
            return super().subject(problem)
        namespace, _, name = problem.ingress.partition("/")
        message = f"{problem.where}: {problem.reason}"
        return "Ingress", (namespace, name), reason_code(problem.kind), message

    def describe(self, conversion: Any, snapshot: Mapping[str, Any]) -> str:
        http = conversion.configuration.http
        return (
            f"{len(snapshot.get('Ingress', {}))} Ingresses ({len(conversion.selected)} served), "
            f"{len(http.routers) if http is not None else 0} routers, "
            f"{len(http.services) if http is not None else 0} services, "
            f"{len(conversion.problems)} problems"
        )

    def start_extra(self, timing: Timing) -> list[threading.Thread]:
        self.status_client = self._make_status_client(timing)
        if not self._status_mode:
            return []
        return [threading.Thread(target=self._status_loop, name=f"{self.name}-status", daemon=True)]

    def extra_clients(self) -> list[KubeClient]:
        return [self.status_client] if self.status_client is not None else []

    def extra_views(self) -> list[Subscription]:
        if self._status_mode == "nodes" and self.node_view is not None:
            return [self.node_view]
        return []

    def wake_extra(self) -> None:
        with self._status_cond:
            self._status_cond.notify_all()

    def _on_status_source(self, change: Change) -> None:
        self._wake_status()

    # --- Ingress status -------------------------------------------------------------------

    def _make_status_client(self, timing: Timing) -> KubeClient | None:
        endpoint = self.config.ingress_endpoint
        watches: list[WatchSpec]
        if endpoint is not None and not endpoint.published_service:
            self._status_mode = "static"
            return None
        if endpoint is not None:
            namespace, _, name = endpoint.published_service.partition("/")
            self._status_mode = "service"
            watches = [WatchSpec(SERVICES, objects.Service, field_selector=f"metadata.name={name}")]
            namespaces = [namespace]
        else:
            pod_name = self.environ.get(POD_NAME_ENV, "")
            pod_namespace = self.environ.get(POD_NAMESPACE_ENV, "")
            if not (pod_name and pod_namespace):
                log.info(
                    "kubernetes: Ingress status is not written: no ingressEndpoint configured "
                    "and not in a pod (%s/%s unset)",
                    POD_NAMESPACE_ENV,
                    POD_NAME_ENV,
                )
                return None
            self._status_mode = "nodes"
            watches = [WatchSpec(PODS, Pod)]  # and Nodes, through ``node_view``
            namespaces = [pod_namespace]
        return KubeClient(
            self.core.configuration,
            watches,
            namespaces=namespaces,
            on_change=self._on_status_source,
            timing=timing,
        )

    def addresses(self) -> tuple[list[Address], str]:
        """The addresses to publish now, and why there are none when so."""
        endpoint = self.config.ingress_endpoint
        if self._status_mode == "static" and endpoint is not None:
            return sorted(set(_address(endpoint.ip, endpoint.hostname))), ""
        sc = self.status_client
        if sc is None:
            return [], "no status source"
        if self._status_mode == "service" and endpoint is not None:
            namespace, _, name = endpoint.published_service.partition("/")
            svc = sc.get("Service", namespace, name)
            if svc is None:
                return [], f"published service {namespace}/{name} not found"
            found = service_addresses(svc)
            return (
                found,
                "" if found else f"published service {namespace}/{name} has no address yet",
            )
        nodes = self.node_view.objects("Node") if self.node_view is not None else {}
        return node_addresses(
            sc.objects("Pod"),
            nodes,
            self.environ.get(POD_NAMESPACE_ENV, ""),
            self.environ.get(POD_NAME_ENV, ""),
        )

    def _status_loop(self) -> None:
        written: dict[Key, tuple[tuple[Address, ...], str]] = {}  # key -> (addresses, rv)
        failing: set[Key] = set()  # Ingresses whose last write failed: tried last
        why_logged = ""

        def write(selected: frozenset[Key]) -> str:
            nonlocal why_logged
            wanted, why = self.addresses()
            if not wanted:
                if why != why_logged:
                    log.info("kubernetes: Ingress status not written: %s", why)
                    why_logged = why
                return ""
            why_logged = ""
            return self._write_statuses(sorted(selected), wanted, written, failing)

        self._status_rounds(lambda: self._selected, write, "kubernetes: Ingress status")

    def _write_statuses(
        self,
        keys: list[Key],
        wanted: list[Address],
        written: dict[Key, tuple[tuple[Address, ...], str]],
        failing: set[Key],
    ) -> str:
        """Write where needed; return what failed ("" if none).

        An Ingress that fails (refused by an admission policy, gone meanwhile) is noted
        in ``failing`` and tried after the others from then on, so it never keeps them
        waiting; :data:`STATUS_FAILURE_RUN` failures in a row end the pass (the API
        server is the trouble, not one Ingress)."""
        view = self.view
        writer = view.client("Ingress")
        want = set(wanted)
        entries = [{kind: value} for kind, value in wanted]
        failed: list[str] = []
        run = 0
        for key in sorted(keys, key=lambda k: k in failing):  # stable: sorted otherwise
            if self._stopping:
                return ""
            ing = view.get("Ingress", *key)
            if ing is None:
                failing.discard(key)
                continue
            rv = ing.metadata.resource_version
            if _status_of(ing) == want:
                written.pop(key, None)
                failing.discard(key)
                continue
            if written.get(key) == (tuple(wanted), rv):
                continue  # written against this version; its event has not come back yet
            if not writer.patch_ingress_status(key[0], key[1], entries):
                failing.add(key)
                failed.append(f"{key[0]}/{key[1]}")
                run += 1
                if run >= STATUS_FAILURE_RUN:
                    break
                continue
            run = 0
            failing.discard(key)
            written[key] = (tuple(wanted), rv)
            self.status_writes += 1
            log.debug("kubernetes: status of Ingress %s/%s: %s", key[0], key[1], wanted)
        return f"writing Ingress {', '.join(failed)} failed" if failed else ""


# --- the kubernetesIngressNGINX source ---------------------------------------------------


def _nginx_as_ingress(config: KubernetesIngressNGINXConfig) -> KubernetesIngressConfig:
    """What the Ingress source's machinery reads, from ingress-nginx's keys: the cluster
    and credentials, ``watchNamespace``, and the status's source (``publishService``,
    else ``publishStatusAddress``, else the nodes of edge's pods)."""
    endpoint = None
    if config.publish_service:
        endpoint = IngressEndpoint(published_service=config.publish_service)
    elif config.publish_status_address:
        address = config.publish_status_address[0]
        is_ip = bool(address) and (address.replace(".", "").isdigit() or ":" in address)
        endpoint = IngressEndpoint(ip=address) if is_ip else IngressEndpoint(hostname=address)
    return KubernetesIngressConfig(
        endpoint=config.endpoint,
        token=config.token,
        cert_auth_file_path=config.cert_auth_file_path,
        kubeconfig=config.kubeconfig,
        namespaces=[config.watch_namespace] if config.watch_namespace else [],
        throttle_duration=config.throttle_duration,
        ingress_endpoint=endpoint,
    )


def _config_map_key(value: str, what: str) -> Key | None:
    """``namespace/name`` of a ConfigMap the configuration names; None for ``""``."""
    if not value:
        return None
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ConfigError(f"kubernetesIngressNGINX: {what}: {value!r} is not namespace/name")
    return (namespace, name)


class KubernetesIngressNGINXProvider(KubernetesIngressProvider):
    """The ``providers.kubernetesIngressNGINX`` source: Ingresses as ingress-nginx serves
    them (:mod:`~edge.providers.kubernetes.ingress_nginx`), on the Ingress source's
    machinery (reflectors on the shared core, endpoints-only path, status writer), its
    elements qualified ``@kubernetesingressnginx`` as Traefik qualifies them.

    ``tcp_services_config_map`` and ``udp_services_config_map`` (``namespace/name``,
    ingress-nginx's ``--tcp-services-configmap`` and ``--udp-services-configmap``) are
    watched, and only they (a fieldSelector on the name when they share one, else
    their namespaces): their entries become TCP and UDP routes on ``entry_points``
    (:func:`~edge.providers.kubernetes.ingress_nginx.convert_services`), whose problems
    are logged as the Ingresses' are."""

    def __init__(
        self,
        config: KubernetesIngressNGINXConfig,
        *,
        name: str = ingress_nginx.PROVIDER,
        default_throttle: float = 2.0,
        environ: Mapping[str, str] | None = None,
        timing: Timing | None = None,
        core: KubeCore | None = None,
        tcp_services_config_map: str = "",
        udp_services_config_map: str = "",
        entry_points: Sequence[EntryPointPort] = (),
    ) -> None:
        self.nginx_config = config
        self.nginx_options = ingress_nginx.NGINXOptions.from_config(config)
        self.tcp_services = _config_map_key(tcp_services_config_map, "tcpServicesConfigMap")
        self.udp_services = _config_map_key(udp_services_config_map, "udpServicesConfigMap")
        self.entry_points = tuple(entry_points)
        self._l4_problems: set[ingress_nginx.L4Problem] = set()
        super().__init__(
            _nginx_as_ingress(config),
            name=name,
            default_throttle=default_throttle,
            environ=environ,
            timing=timing,
            core=core,
        )

    def watches(self) -> list[WatchSpec]:
        watches = super().watches()
        keys = [k for k in (self.tcp_services, self.udp_services) if k is not None]
        if keys:
            names = {name for _, name in keys}
            watches.append(
                WatchSpec(
                    CONFIG_MAPS,
                    objects.ServicesConfigMap,
                    field_selector=f"metadata.name={names.pop()}" if len(names) == 1 else "",
                    namespaces=tuple(sorted({ns for ns, _ in keys})),
                )
            )
        return watches

    def convert_state(self, state: objects.ClusterState) -> Conversion:
        conversion = ingress_nginx.convert(state, self.nginx_options)
        if self.tcp_services is None and self.udp_services is None:
            return conversion
        l4 = ingress_nginx.convert_services(
            state,
            self._services_data(state, self.tcp_services),
            self._services_data(state, self.udp_services),
            self.entry_points,
        )
        current = set(l4.problems)
        for p in sorted(current - self._l4_problems, key=str):
            log.error("%s: %s; that route is left out", self.name, p)
        for p in sorted(self._l4_problems - current, key=str):
            log.info("%s: resolved: %s", self.name, p)
        self._l4_problems = current
        return ingress_nginx.with_services(conversion, l4)

    @staticmethod
    def _services_data(
        state: objects.ClusterState, key: Key | None
    ) -> tuple[str, Mapping[str, str]] | None:
        """(``namespace/name``, data) of a watched ConfigMap; empty while it is absent
        (ingress-nginx serves no entry then either)."""
        if key is None:
            return None
        found: Any = state.config_maps.get(key)  # this source decodes ServicesConfigMaps
        data = found.data if isinstance(found, objects.ServicesConfigMap) else {}
        return (f"{key[0]}/{key[1]}", data)

    def update_endpoints(
        self, previous: Any, old: objects.ClusterState, new: objects.ClusterState
    ) -> Conversion | None:
        # ssl-passthrough and the tcp-/udp-services ConfigMaps: TCP and UDP servers too
        if previous.configuration.tcp is not None or previous.configuration.udp is not None:
            return None
        options = ingress_nginx.ingress_options(self.nginx_options)
        return update_endpoints(previous, old, new, options)


# --- the kubernetesCRD source ----------------------------------------------------------


def _crd_watches(config: KubernetesCRDConfig) -> list[WatchSpec]:
    """What the CRD source lists and watches; Nodes (cluster-scoped, for ``nodePortLB``)
    unless ``disableClusterScopeResources``."""
    models = objects.CRD_KINDS
    nodes = [] if config.disable_cluster_scope_resources else [WatchSpec(NODES, objects.Node)]
    return [
        *(
            WatchSpec(r, models[r.kind], label_selector=config.label_selector)
            for r in CRD_RESOURCES
        ),
        WatchSpec(SERVICES, objects.Service),
        WatchSpec(ENDPOINT_SLICES, objects.EndpointSlice),
        SECRETS_WATCH,
        WatchSpec(CONFIG_MAPS, objects.ConfigMap),
        *nodes,
    ]


def _crd_options(config: KubernetesCRDConfig) -> CRDOptions:
    return CRDOptions(
        namespaces=tuple(config.namespaces),
        ingress_class=config.ingress_class,
        allow_cross_namespace=config.allow_cross_namespace,
        allow_external_name_services=config.allow_external_name_services,
        allow_empty_services=config.allow_empty_services,
        native_lb_by_default=config.native_lb_by_default,
        disable_cluster_scope_resources=config.disable_cluster_scope_resources,
    )


class KubernetesCRDProvider(KubernetesProvider):
    """The ``providers.kubernetesCRD`` source: Traefik's ``traefik.io/v1alpha1`` kinds
    (:data:`~edge.providers.kubernetes.client.CRD_RESOURCES`) with the Services,
    EndpointSlices, Secrets, ConfigMaps and Nodes they name, converted by the pure
    :func:`~edge.providers.kubernetes.crd.convert`; elements are ``…@kubernetescrd``.
    The ``labelSelector`` applies to the traefik.io kinds only (as in Traefik). A change
    of EndpointSlices alone takes the endpoints-only fast path
    (:func:`~edge.providers.kubernetes.crd.update_endpoints`: the HTTP, TCP and UDP load
    balancers of the Services whose slices changed are rebuilt, nothing else); there is
    no status writer (Traefik writes none for these kinds). Beside the Ingress provider
    it shares the core (``core``) and with it the Service, EndpointSlice and Secret
    reflectors.
    """

    def __init__(
        self,
        config: KubernetesCRDConfig,
        *,
        name: str = CRD_PROVIDER,
        default_throttle: float = 2.0,
        timing: Timing | None = None,
        core: KubeCore | None = None,
    ) -> None:
        self.config = config
        self.options = _crd_options(config)
        super().__init__(
            name=name,
            core=core if core is not None else own_core(config),
            namespaces=config.namespaces,
            throttle=config.throttle_duration,
            default_throttle=default_throttle,
            timing=timing,
        )

    def watches(self) -> list[WatchSpec]:
        return _crd_watches(self.config)

    def convert_state(self, state: objects.ClusterState) -> CRDConversion:
        return convert_crd(state, self.options)

    def update_endpoints(
        self, previous: Any, old: objects.ClusterState, new: objects.ClusterState
    ) -> CRDConversion | None:
        return update_crd_endpoints(previous, old, new, self.options)

    def describe(self, conversion: Any, snapshot: Mapping[str, Any]) -> str:
        routes = sum(
            len(snapshot.get(kind, {}))
            for kind in ("IngressRoute", "IngressRouteTCP", "IngressRouteUDP")
        )
        return f"{routes} IngressRoutes (all three kinds), " + super().describe(
            conversion, snapshot
        )


# --- edge check -------------------------------------------------------------------------


def list_once(
    api: Any,
    watches: list[WatchSpec],
    namespaces: Sequence[str],
    timeout: float,
    timing: Timing | None,
) -> dict[str, dict[Key, Any]]:
    """LIST every watched kind once: the objects by kind; :class:`ClusterUnavailable`
    naming what was not listed."""
    client = KubeClient(api, watches, namespaces=namespaces, timing=timing)
    client.start()
    try:
        if not client.wait_synced(timeout):
            pending = "; ".join(
                f"{k}: {v or 'no answer'}" for k, v in sorted(client.pending().items())
            )
            raise ClusterUnavailable(f"{api.host}: not listed within {timeout:g} s: {pending}")
        return client.snapshot()
    finally:
        client.stop()


def _list_once(
    api: Any,
    watches: list[WatchSpec],
    namespaces: Sequence[str],
    timeout: float,
    timing: Timing | None,
) -> objects.ClusterState:
    """:func:`list_once` as the Ingress, CRD and ingress-nginx conversions read it."""
    return objects.ClusterState.from_snapshot(list_once(api, watches, namespaces, timeout, timing))


def check_cluster(
    config: KubernetesIngressConfig, timeout: float = 10.0, timing: Timing | None = None
) -> Conversion:
    """List the cluster once and convert it (``edge check``); blocking.

    Raises :class:`ClusterUnavailable` naming every kind not listed within ``timeout``
    (with its last error), or ``CredentialsError`` when no API server can be found.
    """
    api = load_api_config(
        config.endpoint, config.token, config.cert_auth_file_path, config.kubeconfig
    )
    state = _list_once(api, _watches(config), config.namespaces, timeout, timing)
    return convert(state, IngressOptions.from_config(config))


def check_crd_cluster(
    config: KubernetesCRDConfig, timeout: float = 10.0, timing: Timing | None = None
) -> CRDConversion:
    """:func:`check_cluster` for the kubernetesCRD provider."""
    api = load_api_config(
        config.endpoint, config.token, config.cert_auth_file_path, config.kubeconfig
    )
    state = _list_once(api, _crd_watches(config), config.namespaces, timeout, timing)
    return convert_crd(state, _crd_options(config))


def check_nginx_cluster(
    config: KubernetesIngressNGINXConfig, timeout: float = 10.0, timing: Timing | None = None
) -> Conversion:
    """:func:`check_cluster` for the kubernetesIngressNGINX provider."""
    as_ingress = _nginx_as_ingress(config)
    api = load_api_config(
        config.endpoint, config.token, config.cert_auth_file_path, config.kubeconfig
    )
    state = _list_once(api, _watches(as_ingress), as_ingress.namespaces, timeout, timing)
    return ingress_nginx.convert(state, ingress_nginx.NGINXOptions.from_config(config))
