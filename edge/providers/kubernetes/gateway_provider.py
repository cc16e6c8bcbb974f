"""The ``providers.kubernetesGateway`` source: the Gateway API on the shared Kubernetes core.

Owns :class:`KubernetesGatewayProvider`, a source of
:class:`~edge.providers.kubernetes.provider.KubernetesProvider` (one subscription to
the cluster's :class:`~edge.providers.kubernetes.client.KubeCore`, shared with the
Ingress and CRD sources: Services, EndpointSlices and Secrets are listed and watched
once), whose conversion is :func:`edge.providers.kubernetes.gateway.convert` and whose
elements are ``…@kubernetesgateway``; and its *status* thread, which writes the
statuses each conversion wants (:mod:`edge.providers.kubernetes.gateway_status`)
through the status subresource with a JSON merge patch.

Who writes, with several edge pods (the DaemonSet): every pod, and only when the
object does not already hold what it would write. Every pod converts the same
objects with the same configuration into the same statuses, so once one pod's write
comes back through the watch the others compare equal and write nothing; a
transition time written by one is kept by all (a condition keeps it while its status
holds). A Lease would add a moving part (and a grant) for no difference in what the
objects end up holding; Traefik also writes from every instance.

Gateway addresses: the addresses of the nodes running this pod's DaemonSet (a
hostNetwork DaemonSet has no Service address), read as the Ingress status reads them
(:func:`~edge.providers.kubernetes.provider.node_addresses`; ``POD_NAME`` and
``POD_NAMESPACE`` from the Downward API, Pods in that namespace, Nodes through the
core). Outside a pod, or while no address is known, ``status.addresses`` is left as
it is. Traefik's ``statusAddress`` (an ``ip``, a ``hostname`` or a Service's addresses)
replaces them.

Invariants: a status write happens only when the object's status differs from the
wanted one; the same write is not repeated while the object still shows the
resourceVersion it was written against; a change that touches only the ``status`` of
Gateway API objects (the writes coming back) converts nothing; failures are retried
with backoff, and an object that fails is tried after the others.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from edge.config.static import KubernetesGatewayConfig
from edge.providers.kubernetes import objects
from edge.providers.kubernetes.client import (
    ENDPOINT_SLICES,
    NODES,
    PODS,
    SERVICES,
    Change,
    KubeClient,
    KubeCore,
    Resource,
    Subscription,
    Timing,
    WatchSpec,
    load_api_config,
)
from edge.providers.kubernetes.gateway import (
    CONTROLLER_NAME,
    GROUP,
    PROVIDER,
    Conversion,
    CustomResourceDefinition,
    EntryPointPort,
    GatewayOptions,
    GatewayState,
    GRPCRoute,
    WantedStatus,
    convert,
    update_endpoints,
)
from edge.providers.kubernetes.gateway_status import status_patch
from edge.providers.kubernetes.provider import (
    POD_NAME_ENV,
    POD_NAMESPACE_ENV,
    SECRETS_WATCH,
    Address,
    Key,
    KubernetesProvider,
    cluster_key,
    list_once,
    node_addresses,
    own_core,
    service_addresses,
)

__all__ = ["GATEWAY_RESOURCES", "KubernetesGatewayProvider", "check_gateway_cluster"]

log = logging.getLogger(__name__)

GATEWAY_RESOURCES: Mapping[str, Resource] = {
    "GatewayClass": Resource("GatewayClass", GROUP, "v1", "gatewayclasses", False),
    "Gateway": Resource("Gateway", GROUP, "v1", "gateways"),
    "HTTPRoute": Resource("HTTPRoute", GROUP, "v1", "httproutes"),
    "GRPCRoute": Resource("GRPCRoute", GROUP, "v1", "grpcroutes"),
    "ReferenceGrant": Resource("ReferenceGrant", GROUP, "v1beta1", "referencegrants"),
    "TLSRoute": Resource("TLSRoute", GROUP, "v1", "tlsroutes"),
    "TCPRoute": Resource("TCPRoute", GROUP, "v1", "tcproutes"),
    "UDPRoute": Resource("UDPRoute", GROUP, "v1", "udproutes"),
}
"""The Gateway API kinds read, at the versions of the standard channel of v1.6
(GRPCRoute is read always, as Traefik reads it: its ``v1`` came with v1.1)."""

_MODELS: Mapping[str, Any] = {**objects.GATEWAY_KINDS, "GRPCRoute": GRPCRoute}

L4_KINDS = frozenset({"TLSRoute", "TCPRoute", "UDPRoute"})
"""Read only with ``experimentalChannel`` (as Traefik reads TCPRoute and TLSRoute):
their ``v1`` CRDs came with Gateway API v1.6, and a kind whose CRD is missing is never
listed, which would keep edge from ever being ready."""

NAMESPACES = Resource("Namespace", "", "v1", "namespaces", False)
CRDS = Resource(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False
)
"""Read for the GatewayClass's SupportedVersion (their ``bundle-version``); only the
name, annotations and group of each are kept (the decoder skips the schemas)."""
_STATUS_KINDS = frozenset({"GatewayClass", "Gateway", "HTTPRoute", "GRPCRoute", *L4_KINDS})


def _without_status(obj: Any) -> Any:
    if obj is None:
        return None
    meta = msgspec.structs.replace(obj.metadata, resource_version="")
    return msgspec.structs.replace(obj, metadata=meta, status={})


def gateway_watches(config: KubernetesGatewayConfig) -> list[WatchSpec]:
    """What the Gateway source lists and watches: the Gateway API kinds (TLSRoute,
    TCPRoute and UDPRoute with ``experimentalChannel``), Namespaces, the CRDs (their
    bundle versions), Services, EndpointSlices and TLS Secrets."""
    selector = config.label_selector
    return [
        *(
            WatchSpec(r, _MODELS[kind], label_selector=selector)
            for kind, r in GATEWAY_RESOURCES.items()
            if kind not in L4_KINDS or config.experimental_channel
        ),
        WatchSpec(NAMESPACES, objects.Namespace),
        WatchSpec(CRDS, CustomResourceDefinition),
        WatchSpec(SERVICES, objects.Service),
        WatchSpec(ENDPOINT_SLICES, objects.EndpointSlice),
        SECRETS_WATCH,
    ]


def check_gateway_cluster(
    config: KubernetesGatewayConfig,
    entry_points: Sequence[EntryPointPort],
    timeout: float = 10.0,
    timing: Timing | None = None,
) -> Conversion:
    """List the cluster once and convert it, for ``edge check`` (blocking); raises as
    :func:`~edge.providers.kubernetes.provider.check_cluster`. Writes no status."""
    api = load_api_config(*cluster_key(config))
    snapshot = list_once(api, gateway_watches(config), config.namespaces, timeout, timing)
    options = GatewayOptions(
        namespaces=tuple(config.namespaces),
        entry_points=tuple(entry_points),
        experimental_channel=config.experimental_channel,
        open_listeners=config.open_listeners,
    )
    return convert(GatewayState.from_snapshot(snapshot), options)


class Opened(Protocol):
    """What the Gateway source uses of :class:`edge.entrypoints.opened.OpenedEntryPoints`
    (providers import no data plane): the ports that could not be opened, a way to hear
    of changes, and a way to say which listeners each entry point is opened for."""

    errors: Mapping[str, str]

    def follow(self, callback: Callable[[], None]) -> None: ...

    def name_origins(self, source: str, origins: Mapping[str, Sequence[str]]) -> None: ...


class KubernetesGatewayProvider(KubernetesProvider):
    """The Gateway API source (see the module doc). ``entry_points``: edge's entry
    points, which listeners bind to by port."""

    def __init__(
        self,
        config: KubernetesGatewayConfig,
        *,
        entry_points: Sequence[EntryPointPort] = (),
        name: str = PROVIDER,
        default_throttle: float = 2.0,
        timing: Timing | None = None,
        core: KubeCore | None = None,
        controller_name: str = CONTROLLER_NAME,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.options = GatewayOptions(
            controller_name=controller_name,
            namespaces=tuple(config.namespaces),
            entry_points=tuple(entry_points),
            experimental_channel=config.experimental_channel,
            open_listeners=config.open_listeners,
        )
        super().__init__(
            name=name,
            core=core if core is not None else own_core(config),
            namespaces=config.namespaces,
            throttle=config.throttle_duration,
            default_throttle=default_throttle,
            timing=timing,
        )
        self.status_writes = 0
        self._wanted: list[WantedStatus] = []
        self._seen: Mapping[str, Mapping[Key, Any]] = {}
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.pod_client: KubeClient | None = None
        self.opened: Opened | None = None  # the data plane's run-time entry points
        # The Nodes edge's pods run on, whose addresses the Gateways get (as the
        # Ingress status reads them): a subscription made now, before the core starts,
        # whether edge runs in a pod is known only at start.
        self.node_view: Subscription = self.core.subscribe(
            f"{name}-addresses", [WatchSpec(NODES, objects.Node)], on_change=self._on_address_source
        )

    # --- the source -------------------------------------------------------------------

    def watches(self) -> list[WatchSpec]:
        return gateway_watches(self.config)

    def convert_state(self, state: objects.ClusterState) -> Conversion:
        """The Gateway kinds are not in :class:`ClusterState` (whose tables the other
        sources share): the conversion reads this source's view afresh. Taken a moment
        after ``state``, it may be newer; a change in between has marked the source
        dirty, so another round follows with both at once."""
        gateways = GatewayState.from_snapshot(self.view.snapshot())
        if self.opened is not None:
            gateways = msgspec.structs.replace(gateways, unopened=dict(self.opened.errors))
        return convert(gateways, self.options)

    def follow_opened(self, opened: Opened) -> None:
        """Follow the entry points opened at run time (``openListeners``, in the process
        of the data plane opening them): one that could not be opened makes its
        listener ``PortUnavailable``, and each change converts again."""
        self.opened = opened
        opened.follow(self._on_opened)

    def _on_opened(self) -> None:
        # reload(): a conversion even when the round finds only status writes come
        # back, which unchanged() would skip.
        self.reload()

    def update_endpoints(
        self, previous: Any, old: objects.ClusterState, new: objects.ClusterState
    ) -> Conversion | None:
        """Only EndpointSlices changed (the base class calls this then): the load
        balancers of their Services are rebuilt, nothing else."""
        return update_endpoints(previous, old.endpoint_slices, new.endpoint_slices, new.services)

    def unchanged(self, changed: dict[str, set[Key]], snapshot: Mapping[str, Any]) -> bool:
        """Only Gateway API objects changed, and only in status and resourceVersion: the
        status writes coming back; the conversion cannot have changed (a change of the
        entry points opened at run time calls reload(), which never takes this shortcut)."""
        if set(changed) <= _STATUS_KINDS and all(
            _without_status(self._seen.get(kind, {}).get(k))
            == _without_status(snapshot.get(kind, {}).get(k))
            for kind, keys in changed.items()
            for k in keys
        ):
            self._seen = snapshot
            self._wake_status()
            return True
        return False

    def converted(self, conversion: Any, snapshot: Mapping[str, Any], patched: bool) -> None:
        if self.opened is not None:  # what each run-time entry point is for (the API)
            self.opened.name_origins(self.name, conversion.opened)
        self._seen = snapshot
        with self._status_cond:
            self._wanted = list(conversion.statuses)
        self._wake_status()

    def subject(self, problem: Any) -> tuple[str, Key, str, str] | None:
        """As every source's, with the reason of the condition that says the problem
        (``BackendNotFound``, ``NotAllowedByListeners``, ``PortUnavailable``...) as the
        Event's reason."""
        found = super().subject(problem)
        code = getattr(problem, "code", "")
        if found is None or not code:
            return found
        return found[0], found[1], code, found[3]

    def describe(self, conversion: Any, snapshot: Mapping[str, Any]) -> str:
        return (
            f"{len(snapshot.get('Gateway', {}))} Gateways, "
            f"{len(snapshot.get('HTTPRoute', {}))} HTTPRoutes, "
            f"{len(snapshot.get('GRPCRoute', {}))} GRPCRoutes, "
            + super().describe(conversion, snapshot)
        )

    def start_extra(self, timing: Timing) -> list[threading.Thread]:
        pod, namespace = self.environ.get(POD_NAME_ENV, ""), self.environ.get(POD_NAMESPACE_ENV, "")
        if pod and namespace:
            self.pod_client = KubeClient(
                self.core.configuration,
                [WatchSpec(PODS, objects.Pod)],
                namespaces=[namespace],
                on_change=self._on_address_source,
                timing=timing,
            )
        else:
            log.info(
                "%s: Gateway addresses are not written: not in a pod (%s/%s unset)",
                self.name,
                POD_NAMESPACE_ENV,
                POD_NAME_ENV,
            )
        return [threading.Thread(target=self._status_loop, name=f"{self.name}-status", daemon=True)]

    def extra_clients(self) -> list[KubeClient]:
        return [self.pod_client] if self.pod_client is not None else []

    def extra_views(self) -> list[Subscription]:
        return [self.node_view]

    def _on_address_source(self, change: Change) -> None:
        self._wake_status()

    def addresses(self) -> list[Address]:
        """``statusAddress`` when set: its ``ip`` and ``hostname``, else its Service's
        addresses (:func:`~edge.providers.kubernetes.provider.service_addresses`; none
        while that Service is not seen). Without it, the addresses of the nodes
        running edge's pods (those of this pod's DaemonSet, on hostNetwork:
        :func:`~edge.providers.kubernetes.provider.node_addresses`), none outside a pod
        or while none is known."""
        fixed = self.config.status_address
        if fixed is not None:
            if fixed.ip or fixed.hostname:
                return [(k, v) for k, v in (("ip", fixed.ip), ("hostname", fixed.hostname)) if v]
            assert fixed.service is not None  # checked when the configuration was read
            svc = self.view.get("Service", fixed.service.namespace, fixed.service.name)
            return service_addresses(svc) if svc is not None else []
        if self.pod_client is None:
            return []
        found, _ = node_addresses(
            self.pod_client.objects("Pod"),
            self.node_view.objects("Node") if self.node_view.synced else {},
            self.environ.get(POD_NAMESPACE_ENV, ""),
            self.environ.get(POD_NAME_ENV, ""),
        )
        return found

    def wake_extra(self) -> None:
        with self._status_cond:
            self._status_cond.notify_all()

    # --- status ---------------------------------------------------------------------------

    def _status_loop(self) -> None:
        written: dict[tuple[str, Key], tuple[str, str]] = {}  # -> (patch JSON, rv)
        failing: set[tuple[str, Key]] = set()
        self._status_rounds(
            lambda: self._wanted,
            lambda wanted: self._write_statuses(wanted, written, failing),
            f"{self.name}: status",
        )

    def _write_statuses(
        self,
        wanted: list[WantedStatus],
        written: dict[tuple[str, Key], tuple[str, str]],
        failing: set[tuple[str, Key]],
    ) -> str:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        failed = []
        found = [
            {"type": "IPAddress" if kind == "ip" else "Hostname", "value": value}
            for kind, value in self.addresses()
        ]
        if found:  # none known: what a Gateway holds stays
            wanted = [
                w._replace(status={**w.status, "addresses": found}) if w.kind == "Gateway" else w
                for w in wanted
            ]
        for w in sorted(wanted, key=lambda w: (w.kind, w.key) in failing):
            if self._stopping:
                return ""
            obj = self.view.get(w.kind, *w.key)
            if obj is None:
                continue
            rv = obj.metadata.resource_version
            patch = status_patch(obj.status, w, self.options.controller_name, now)
            if patch is None:
                written.pop((w.kind, w.key), None)
                failing.discard((w.kind, w.key))
                continue
            body = msgspec.json.encode(patch).decode()
            if written.get((w.kind, w.key), ("", ""))[1] == rv:
                continue  # written against this version; its event has not come back yet
            if not self._patch(GATEWAY_RESOURCES[w.kind], w.key, {"status": patch}):
                failing.add((w.kind, w.key))
                failed.append(f"{w.kind} {w.key[0]}/{w.key[1]}".replace(" /", " "))
                continue
            failing.discard((w.kind, w.key))
            written[(w.kind, w.key)] = (body, rv)
            self.status_writes += 1
        return f"writing {', '.join(failed)} failed" if failed else ""

    def _patch(self, resource: Resource, key: Key, body: dict[str, Any]) -> bool:
        """Merge-patch ``body`` onto the status subresource of ``key``, through the
        client that reflects its kind; whether it took. Blocking (one request);
        failures are logged, not raised."""
        return self.view.client(resource.kind).patch_status(resource, key[0], key[1], body)
