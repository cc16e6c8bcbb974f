"""The Kubernetes objects edge reads, decoded from the API server's JSON with msgspec.

Owns the models of the few fields edge needs of Ingress (``networking.k8s.io/v1``),
IngressClass, Service, EndpointSlice (``discovery.k8s.io/v1``) and Secret, and of
Traefik's CRD kinds (``traefik.io/v1alpha1``: IngressRoute, IngressRouteTCP,
IngressRouteUDP, Middleware, MiddlewareTCP, TLSOption, TLSStore, TraefikService,
ServersTransport, ServersTransportTCP); their decoders (built once); the Pod and Node
models the Ingress status reads (decoded by the provider's status client, so not in
:data:`KINDS`); and :class:`ClusterState`, the snapshot of cached objects the
conversions (:mod:`edge.providers.kubernetes.ingress`, :mod:`.crd`) read.

Invariants:

* Decoding is lenient where Kubernetes is open-ended: unknown fields are ignored (objects
  carry far more than edge reads), every field has a default, so a BOOKMARK event's
  object (metadata only) decodes too. Types are strict: a field of the wrong JSON type
  is a :class:`~edge.errors.ConfigError` naming the kind and the key path;
  :func:`decode_items` decodes a LIST item by item, so one such object is skipped
  (with a message naming it) and the others decode.
* A Secret keeps only ``tls.crt``, ``tls.key`` and the CA bundle keys ``tls.ca`` and
  ``ca.crt``, base64-decoded, and a ConfigMap only ``tls.ca`` and ``ca.crt``; no other
  secret data (service account tokens, passwords) is held in memory.
* Models are frozen: a snapshot handed to the conversion never changes under it. They
  are not tracked by the garbage collector (``gc=False``): they hold strings, numbers
  and other models, never a cycle, and a cluster's worth of tracked objects (5,000
  Ingresses, Services and EndpointSlices) doubled every full collection and the decode.
  Optional Kubernetes booleans (``ready``, ``serving``, ``terminating``) stay ``None``
  when absent, because the API gives absence its own meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar, dataclass_transform

import msgspec

from edge.errors import ConfigError

__all__ = [
    "CRD_KINDS",
    "INGRESS_CLASS_ANNOTATION",
    "IS_DEFAULT_CLASS_ANNOTATION",
    "KINDS",
    "OTHER_KINDS",
    "SERVICE_NAME_LABEL",
    "TLS_SECRET_TYPE",
    "CAData",
    "ClusterState",
    "ConfigMap",
    "EndpointSlice",
    "Ingress",
    "IngressClass",
    "IngressRoute",
    "IngressRouteTCP",
    "IngressRouteUDP",
    "Key",
    "Middleware",
    "MiddlewareTCP",
    "Node",
    "ObjectList",
    "Pod",
    "Secret",
    "ServersTransport",
    "ServersTransportTCP",
    "Service",
    "ServicePort",
    "ServicesConfigMap",
    "Status",
    "TLSOption",
    "TLSStore",
    "TraefikService",
    "WatchEvent",
    "decode",
    "decode_event",
    "decode_items",
    "decode_list",
]

INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
"""The legacy (pre ``spec.ingressClassName``) way an Ingress names its class."""

IS_DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
"""On an IngressClass, ``"true"``: Ingresses that name no class belong to it."""

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label that ties an EndpointSlice to its Service."""

TLS_SECRET_TYPE = "kubernetes.io/tls"
BASIC_AUTH_SECRET_TYPE = "kubernetes.io/basic-auth"

Key = tuple[str, str]
"""(namespace, name) of a namespaced object."""


# Struct's own dataclass_transform defaults to not frozen: restated here (as
# edge.config.dynamic.Base does) so a type checker sees the subclasses as frozen too.
@dataclass_transform(frozen_default=True, field_specifiers=(msgspec.field,))
class _Model(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """Base of the Kubernetes models: camelCase keys, unknown fields ignored, immutable,
    untracked by the garbage collector."""


class ObjectMeta(_Model):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    resource_version: str = ""
    generation: int = 0
    # RFC 3339 in UTC, second precision: its text order is its time order
    # (the Gateway API ranks equal routes oldest first).
    creation_timestamp: str = ""
    uid: str = ""  # what an Event names its object by (kubectl describe selects on it)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


# --- Ingress ---------------------------------------------------------------------------


class ServiceBackendPort(_Model):
    name: str = ""
    number: int = 0


class IngressServiceBackend(_Model):
    name: str = ""
    port: ServiceBackendPort = ServiceBackendPort()


class TypedLocalObjectReference(_Model):
    kind: str = ""
    name: str = ""
    api_group: str | None = None


class IngressBackend(_Model):
    service: IngressServiceBackend | None = None
    resource: TypedLocalObjectReference | None = None


class HTTPIngressPath(_Model):
    backend: IngressBackend = IngressBackend()
    path: str = ""
    path_type: str = ""  # "Exact" | "Prefix" | "ImplementationSpecific"; "" when omitted


class HTTPIngressRuleValue(_Model):
    paths: list[HTTPIngressPath] = []


class IngressRule(_Model):
    host: str = ""
    http: HTTPIngressRuleValue | None = None


class IngressTLS(_Model):
    hosts: list[str] = []
    secret_name: str = ""


class IngressSpec(_Model):
    ingress_class_name: str | None = None
    default_backend: IngressBackend | None = None
    rules: list[IngressRule] = []
    tls: list[IngressTLS] = []


class IngressPortStatus(_Model):
    port: int = 0
    protocol: str = ""
    error: str | None = None


class IngressLoadBalancerIngress(_Model):
    ip: str = ""
    hostname: str = ""
    ports: list[IngressPortStatus] = []


class IngressLoadBalancerStatus(_Model):
    ingress: list[IngressLoadBalancerIngress] = []


class IngressStatus(_Model):
    load_balancer: IngressLoadBalancerStatus = IngressLoadBalancerStatus()


class Ingress(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: IngressSpec = IngressSpec()
    status: IngressStatus = IngressStatus()


# --- IngressClass ----------------------------------------------------------------------


class IngressClassSpec(_Model):
    controller: str = ""


class IngressClass(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: IngressClassSpec = IngressClassSpec()

    @property
    def is_default(self) -> bool:
        """Marked as the cluster's default class (the annotation's value is ``"true"``)."""
        return self.metadata.annotations.get(IS_DEFAULT_CLASS_ANNOTATION) == "true"


# --- Service ---------------------------------------------------------------------------


class ServicePort(_Model):
    port: int = 0
    name: str = ""
    protocol: str = "TCP"
    target_port: int | str | None = None
    node_port: int = 0  # NodePort and LoadBalancer Services
    app_protocol: str | None = None  # the port's application protocol (GEP-1911)


class LoadBalancerIngress(_Model):
    ip: str = ""
    hostname: str = ""


class LoadBalancerStatus(_Model):
    ingress: list[LoadBalancerIngress] = []


class ServiceStatus(_Model):
    load_balancer: LoadBalancerStatus = LoadBalancerStatus()


class ServiceSpec(_Model):
    type: str = "ClusterIP"
    ports: list[ServicePort] = []
    external_name: str = ""
    cluster_ip: str = msgspec.field(default="", name="clusterIP")
    external_ips: list[str] = msgspec.field(default_factory=list, name="externalIPs")


class Service(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: ServiceSpec = ServiceSpec()
    status: ServiceStatus = ServiceStatus()


# --- EndpointSlice ---------------------------------------------------------------------


class EndpointConditions(_Model):
    ready: bool | None = None  # None: ready (the API's documented reading)
    serving: bool | None = None
    terminating: bool | None = None  # None: not terminating


class Endpoint(_Model):
    addresses: list[str] = []
    conditions: EndpointConditions = EndpointConditions()


class EndpointPort(_Model):
    name: str | None = None
    port: int | None = None
    protocol: str | None = None  # None: TCP


class EndpointSlice(_Model):
    metadata: ObjectMeta = ObjectMeta()
    address_type: str = ""  # "IPv4" | "IPv6" | "FQDN"
    endpoints: list[Endpoint] = []
    ports: list[EndpointPort] = []

    @property
    def service_name(self) -> str:
        """The Service this slice belongs to (``""`` if unlabelled)."""
        return self.metadata.labels.get(SERVICE_NAME_LABEL, "")


# --- Secret ----------------------------------------------------------------------------


class TLSData(msgspec.Struct, frozen=True, gc=False):
    """The keys of a Secret's ``data`` edge reads: a certificate and its key, a CA
    bundle (Traefik's ``tls.ca``, else ``ca.crt``), and the users of an auth
    middleware (``username`` and ``password`` of a ``kubernetes.io/basic-auth``
    Secret, else htpasswd lines under ``users``, or under ``auth`` as ingress-nginx's
    ``auth-secret`` holds them); JSON base64 decodes to bytes. Other keys are not kept
    (a Helm release's would be most of the memory)."""

    tls_crt: bytes | None = msgspec.field(default=None, name="tls.crt")
    tls_key: bytes | None = msgspec.field(default=None, name="tls.key")
    tls_ca: bytes | None = msgspec.field(default=None, name="tls.ca")
    ca_crt: bytes | None = msgspec.field(default=None, name="ca.crt")
    username: bytes | None = None
    password: bytes | None = None
    users: bytes | None = None
    auth: bytes | None = None


class Secret(_Model):
    metadata: ObjectMeta = ObjectMeta()
    type: str = ""
    data: TLSData = TLSData()


# --- ConfigMap: CA bundles ---------------------------------------------------------------


class CAData(msgspec.Struct, frozen=True, gc=False):
    """The keys of a ConfigMap's ``data`` edge reads: a CA bundle, as Traefik does."""

    tls_ca: str | None = msgspec.field(default=None, name="tls.ca")
    ca_crt: str | None = msgspec.field(default=None, name="ca.crt")


class ConfigMap(_Model):
    metadata: ObjectMeta = ObjectMeta()
    data: CAData = CAData()


class ServicesConfigMap(_Model):
    """A ConfigMap read whole (``data``): ingress-nginx's ``tcp-services`` and
    ``udp-services``, which the ingress-nginx source watches by name alone, so no other
    ConfigMap's data is held this way."""

    metadata: ObjectMeta = ObjectMeta()
    data: dict[str, str] = {}


# --- lists, watch events, status ---------------------------------------------------------


class ListMeta(_Model):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


T = TypeVar("T")


class ObjectList(_Model, Generic[T]):
    """A LIST answer: the objects and the resourceVersion to WATCH from."""

    metadata: ListMeta = ListMeta()
    items: list[T] = []


class Status(_Model):
    """A ``kind: Status`` answer (an ERROR watch event's object; ``code`` 410: expired)."""

    code: int = 0
    reason: str = ""
    message: str = ""


class WatchEvent(_Model):
    """One line of a WATCH stream; ``object`` is decoded by :func:`decode_event`."""

    type: str = ""  # ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
    object: msgspec.Raw = msgspec.Raw(b"{}")


# --- Pods and Nodes: the few fields the Ingress status needs ----------------------------


class OwnerReference(_Model):
    uid: str = ""
    kind: str = ""
    name: str = ""
    controller: bool | None = None


class PodMeta(_Model):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""
    owner_references: list[OwnerReference] = []
    deletion_timestamp: str | None = None


class PodSpec(_Model):
    node_name: str = ""
    host_network: bool = False


class PodStatus(_Model):
    phase: str = ""


class Pod(_Model):
    metadata: PodMeta = PodMeta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()

    @property
    def controller_uid(self) -> str:
        for ref in self.metadata.owner_references:
            if ref.controller:
                return ref.uid
        return ""


class NodeAddress(_Model):
    type: str = ""
    address: str = ""


class NodeStatus(_Model):
    addresses: list[NodeAddress] = []


class Node(_Model):
    metadata: ObjectMeta = ObjectMeta()
    status: NodeStatus = NodeStatus()


# --- traefik.io/v1alpha1: Traefik's CRDs ------------------------------------------------
#
# The fields of Traefik's kinds (``pkg/provider/kubernetes/crd/traefikio/v1alpha1``), as
# lenient as the core kinds: unknown fields ignored, every field defaulted. Options edge
# does not implement are kept (as ``Any``) where the conversion must refuse them by name
# rather than serve without them. Specs that are edge's dynamic models under another
# name (Middleware, MiddlewareTCP, TLSOption, ServersTransport, ServersTransportTCP) are
# kept as plain data and converted, key by key, by the CRD conversion.


class CRDReference(_Model):
    """A reference to another object by name, in the referrer's namespace if unset."""

    name: str = ""
    namespace: str = ""


class TLSDomain(_Model):
    main: str = ""
    sans: list[str] = []


class RouteService(_Model):
    """One of an IngressRoute route's ``services`` (Traefik's ``LoadBalancerSpec``), or of
    a TraefikService's ``weighted.services``."""

    name: str = ""
    kind: str = ""  # "" | "Service" | "TraefikService"
    namespace: str = ""
    port: int | str = 0  # a Service port's number or name; 0: none
    weight: int | None = None
    scheme: str = ""
    servers_transport: str = ""
    pass_host_header: bool | None = None
    native_lb: bool | None = msgspec.field(default=None, name="nativeLB")
    node_port_lb: bool = msgspec.field(default=False, name="nodePortLB")
    strategy: str = ""
    middlewares: list[CRDReference] = []
    sticky: Any = None
    health_check: Any = None
    passive_health_check: Any = None
    response_forwarding: Any = None


class Route(_Model):
    match: str = ""
    kind: str = ""  # "" | "Rule"
    priority: int = 0
    syntax: str = ""
    services: list[RouteService] = []
    middlewares: list[CRDReference] = []
    observability: Any = None


class RouteTLS(_Model):
    """An IngressRoute's or IngressRouteTCP's ``tls`` (``passthrough``: TCP only)."""

    secret_name: str = ""
    passthrough: bool = False
    options: CRDReference | None = None
    store: CRDReference | None = None
    cert_resolver: str = ""
    domains: list[TLSDomain] = []


class IngressRouteSpec(_Model):
    ingress_class_name: str | None = None
    entry_points: list[str] = []
    routes: list[Route] = []
    tls: RouteTLS | None = None
    parent_refs: Any = None


class IngressRoute(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: IngressRouteSpec = IngressRouteSpec()


class ProxyProtocolSpec(_Model):
    version: int = 0  # 0: Traefik's default, 2


class RouteServiceTCP(_Model):
    name: str = ""
    namespace: str = ""
    port: int | str = 0
    weight: int | None = None
    termination_delay: int | None = None
    proxy_protocol: ProxyProtocolSpec | None = None
    servers_transport: str = ""
    tls: bool = False
    native_lb: bool | None = msgspec.field(default=None, name="nativeLB")
    node_port_lb: bool = msgspec.field(default=False, name="nodePortLB")


class RouteTCP(_Model):
    match: str = ""
    priority: int = 0
    syntax: str = ""
    services: list[RouteServiceTCP] = []
    middlewares: list[CRDReference] = []


class IngressRouteTCPSpec(_Model):
    ingress_class_name: str | None = None
    entry_points: list[str] = []
    routes: list[RouteTCP] = []
    tls: RouteTLS | None = None


class IngressRouteTCP(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: IngressRouteTCPSpec = IngressRouteTCPSpec()


class RouteServiceUDP(_Model):
    name: str = ""
    namespace: str = ""
    port: int | str = 0
    weight: int | None = None
    native_lb: bool | None = msgspec.field(default=None, name="nativeLB")
    node_port_lb: bool = msgspec.field(default=False, name="nodePortLB")


class RouteUDP(_Model):
    services: list[RouteServiceUDP] = []


class IngressRouteUDPSpec(_Model):
    ingress_class_name: str | None = None
    entry_points: list[str] = []
    routes: list[RouteUDP] = []


class IngressRouteUDP(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: IngressRouteUDPSpec = IngressRouteUDPSpec()


class Middleware(_Model):
    """``spec`` holds one middleware kind under its key (``stripPrefix``,
    ``headers``...), in edge's dynamic configuration's shape: any kind decodes here;
    the conversion refuses those edge does not implement, naming them."""

    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}


class MiddlewareTCP(_Model):
    """``spec``: ``inFlightConn`` or ``ipAllowList``, as :class:`Middleware`'s."""

    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}


class TLSOption(_Model):
    """``spec``: edge's TLS options (``minVersion``, ``cipherSuites``...), as plain data."""

    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}


class TLSStoreCertificate(_Model):
    secret_name: str = ""


class TLSStoreSpec(_Model):
    default_certificate: TLSStoreCertificate | None = None
    certificates: list[TLSStoreCertificate] = []
    default_generated_cert: Any = None


class TLSStore(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: TLSStoreSpec = TLSStoreSpec()


class WeightedSpec(_Model):
    services: list[RouteService] = []
    sticky: Any = None


class TraefikServiceSpec(_Model):
    weighted: WeightedSpec | None = None
    mirroring: Any = None
    failover: Any = None
    highest_random_weight: Any = None


class TraefikService(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: TraefikServiceSpec = TraefikServiceSpec()


class ServersTransport(_Model):
    """``spec``: edge's HTTP serversTransport keys, as plain data."""

    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}


class ServersTransportTCP(_Model):
    """``spec``: edge's TCP serversTransport keys, as plain data."""

    metadata: ObjectMeta = ObjectMeta()
    spec: dict[str, Any] = {}


KINDS: Mapping[str, type[_Model]] = {
    "Ingress": Ingress,
    "IngressClass": IngressClass,
    "Service": Service,
    "EndpointSlice": EndpointSlice,
    "Secret": Secret,
}
"""The kinds the Ingress provider reads, by their Kubernetes ``kind``."""

CRD_KINDS: Mapping[str, type[_Model]] = {
    "IngressRoute": IngressRoute,
    "IngressRouteTCP": IngressRouteTCP,
    "IngressRouteUDP": IngressRouteUDP,
    "Middleware": Middleware,
    "MiddlewareTCP": MiddlewareTCP,
    "TLSOption": TLSOption,
    "TLSStore": TLSStore,
    "TraefikService": TraefikService,
    "ServersTransport": ServersTransport,
    "ServersTransportTCP": ServersTransportTCP,
}
"""Traefik's kinds (``traefik.io/v1alpha1``), read by the CRD conversion with
Service, EndpointSlice and Secret."""

OTHER_KINDS: Mapping[str, type[_Model]] = {"ConfigMap": ConfigMap, "Node": Node}
"""Kinds the CRD conversion reads besides :data:`KINDS` and :data:`CRD_KINDS`: CA
bundles of ConfigMaps, and Nodes for ``nodePortLB``."""

_ALL_KINDS: Mapping[str, type[_Model]] = {**KINDS, **CRD_KINDS, **OTHER_KINDS}

_DECODERS: Mapping[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(model) for kind, model in _ALL_KINDS.items()
}
_LIST_DECODERS: Mapping[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(ObjectList[model])  # type: ignore[valid-type]
    for kind, model in _ALL_KINDS.items()
}
_RAW_LIST_DECODER = msgspec.json.Decoder(ObjectList[msgspec.Raw])
_EVENT_DECODER = msgspec.json.Decoder(WatchEvent)
_STATUS_DECODER = msgspec.json.Decoder(Status)


def _decoder(
    table: Mapping[str, msgspec.json.Decoder[Any]], kind: str
) -> msgspec.json.Decoder[Any]:
    try:
        return table[kind]
    except KeyError:
        known = ", ".join(_ALL_KINDS)
        raise ValueError(f"unknown kind {kind!r}; expected one of {known}") from None


def decode(kind: str, raw: bytes | msgspec.Raw) -> Any:
    """One object of ``kind`` from its JSON; :class:`ConfigError` naming the kind if bad."""
    decoder = _decoder(_DECODERS, kind)
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"cannot decode {kind}: {exc}") from None


def decode_list(kind: str, raw: bytes) -> ObjectList[Any]:
    """A LIST answer for ``kind``; :class:`ConfigError` if bad."""
    decoder = _decoder(_LIST_DECODERS, kind)
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"cannot decode {kind}List: {exc}") from None


def decode_items(kind: str, raw: bytes) -> tuple[ObjectList[Any], list[str]]:
    """A LIST answer for ``kind``, item by item: an object that fails to decode is left
    out, and what is wrong with it (naming it) is in the second list. Only a body that
    is not a list at all is a :class:`ConfigError`."""
    try:
        listed = _RAW_LIST_DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"cannot decode {kind}List: {exc}") from None
    decoder = _decoder(_DECODERS, kind)
    items: list[Any] = []
    problems: list[str] = []
    for i, item in enumerate(listed.items):
        try:
            items.append(decoder.decode(item))
        except msgspec.DecodeError as exc:
            problems.append(f"{kind} {_item_name(item, i)}: cannot decode, skipped: {exc}")
    return ObjectList(metadata=listed.metadata, items=items), problems


class _Named(msgspec.Struct):
    metadata: ObjectMeta = ObjectMeta()


_NAMED_DECODER = msgspec.json.Decoder(_Named)


def _item_name(raw: msgspec.Raw, index: int) -> str:
    """``namespace/name`` of a list item that failed to decode, or its index."""
    try:
        meta = _NAMED_DECODER.decode(raw).metadata
    except msgspec.DecodeError:
        return f"items[{index}]"
    return f"{meta.namespace}/{meta.name}" if meta.name else f"items[{index}]"


def decode_event(kind: str, raw: bytes) -> tuple[str, Any]:
    """One WATCH line -> ``(type, object)``; an ERROR event's object is a :class:`Status`."""
    try:
        event = _EVENT_DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"cannot decode a {kind} watch event: {exc}") from None
    if event.type == "ERROR":
        try:
            return event.type, _STATUS_DECODER.decode(event.object)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"cannot decode a {kind} watch error: {exc}") from None
    return event.type, decode(kind, event.object)


# --- the snapshot ----------------------------------------------------------------------


class ClusterState(msgspec.Struct, frozen=True):
    """The cached objects one conversion reads. Build a new one per change; never mutate.

    Every kind is keyed by (namespace, name), the namespace ``""`` for IngressClasses
    (cluster-scoped), as :meth:`edge.providers.kubernetes.client.KubeClient.snapshot`
    keys them. The conversion finds a Service's EndpointSlices by their
    ``kubernetes.io/service-name`` label.
    """

    ingresses: Mapping[Key, Ingress] = {}
    ingress_classes: Mapping[Key, IngressClass] = {}
    services: Mapping[Key, Service] = {}
    endpoint_slices: Mapping[Key, EndpointSlice] = {}
    secrets: Mapping[Key, Secret] = {}
    ingress_routes: Mapping[Key, IngressRoute] = {}
    ingress_route_tcps: Mapping[Key, IngressRouteTCP] = {}
    ingress_route_udps: Mapping[Key, IngressRouteUDP] = {}
    middlewares: Mapping[Key, Middleware] = {}
    middleware_tcps: Mapping[Key, MiddlewareTCP] = {}
    tls_options: Mapping[Key, TLSOption] = {}
    tls_stores: Mapping[Key, TLSStore] = {}
    traefik_services: Mapping[Key, TraefikService] = {}
    servers_transports: Mapping[Key, ServersTransport] = {}
    servers_transport_tcps: Mapping[Key, ServersTransportTCP] = {}
    config_maps: Mapping[Key, ConfigMap] = {}
    nodes: Mapping[Key, Node] = {}

    @classmethod
    def from_snapshot(cls, tables: Mapping[str, Mapping[Key, Any]]) -> ClusterState:
        """A snapshot from kind -> objects by key (a kind missing is empty)."""
        return cls(
            ingresses=tables.get("Ingress", {}),
            ingress_classes=tables.get("IngressClass", {}),
            services=tables.get("Service", {}),
            endpoint_slices=tables.get("EndpointSlice", {}),
            secrets=tables.get("Secret", {}),
            ingress_routes=tables.get("IngressRoute", {}),
            ingress_route_tcps=tables.get("IngressRouteTCP", {}),
            ingress_route_udps=tables.get("IngressRouteUDP", {}),
            middlewares=tables.get("Middleware", {}),
            middleware_tcps=tables.get("MiddlewareTCP", {}),
            tls_options=tables.get("TLSOption", {}),
            tls_stores=tables.get("TLSStore", {}),
            traefik_services=tables.get("TraefikService", {}),
            servers_transports=tables.get("ServersTransport", {}),
            servers_transport_tcps=tables.get("ServersTransportTCP", {}),
            config_maps=tables.get("ConfigMap", {}),
            nodes=tables.get("Node", {}),
        )

    @classmethod
    def from_objects(cls, objects: list[Any]) -> ClusterState:
        """A snapshot holding ``objects`` (decoded models of any of :data:`KINDS` and
        :data:`CRD_KINDS`)."""
        kinds = {model: kind for kind, model in _ALL_KINDS.items()}
        tables: dict[str, dict[Key, Any]] = {kind: {} for kind in _ALL_KINDS}
        for obj in objects:
            tables[kinds[type(obj)]][obj.metadata.key] = obj
        return cls.from_snapshot(tables)


# --- Gateway API (gateway.networking.k8s.io) ----------------------------------------------
#
# The fields edge reads of GatewayClass, Gateway, HTTPRoute, TLSRoute, TCPRoute,
# UDPRoute (v1) and ReferenceGrant (v1beta1), and Namespace (its labels, for a listener's ``allowedRoutes`` selector).
# A ``status`` is kept as the API server sent it (JSON builtins): the Gateway provider
# compares it with what it would write, and keeps the parts other controllers own.


class GatewayClassSpec(_Model):
    controller_name: str = ""


class GatewayClass(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: GatewayClassSpec = GatewayClassSpec()
    status: dict[str, Any] = {}


class LabelSelectorRequirement(_Model):
    key: str = ""
    operator: str = ""  # In, NotIn, Exists, DoesNotExist
    values: list[str] = []


class LabelSelector(_Model):
    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


class RouteNamespaces(_Model):
    from_: str = msgspec.field(default="Same", name="from")  # All, Same, Selector
    selector: LabelSelector | None = None


class RouteGroupKind(_Model):
    kind: str = ""
    group: str | None = None  # None: gateway.networking.k8s.io


class AllowedRoutes(_Model):
    namespaces: RouteNamespaces = RouteNamespaces()
    kinds: list[RouteGroupKind] = []


class SecretObjectReference(_Model):
    name: str = ""
    group: str | None = None  # None and "": the core group
    kind: str | None = None  # None: Secret
    namespace: str | None = None  # None: the Gateway's


class GatewayTLSConfig(_Model):
    mode: str = "Terminate"  # Terminate, Passthrough
    certificate_refs: list[SecretObjectReference] = []


class Listener(_Model):
    name: str = ""
    port: int = 0
    protocol: str = ""  # HTTP, HTTPS, TLS, TCP, UDP
    hostname: str | None = None
    tls: GatewayTLSConfig | None = None
    allowed_routes: AllowedRoutes | None = None


class GatewaySpec(_Model):
    gateway_class_name: str = ""
    listeners: list[Listener] = []


class Gateway(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: GatewaySpec = GatewaySpec()
    status: dict[str, Any] = {}


class ParentReference(_Model):
    name: str = ""
    group: str | None = None  # None: gateway.networking.k8s.io
    kind: str | None = None  # None: Gateway
    namespace: str | None = None  # None: the route's
    section_name: str | None = None
    port: int | None = None


class HTTPPathMatch(_Model):
    type: str = "PathPrefix"  # Exact, PathPrefix, RegularExpression
    value: str = "/"


class HTTPHeaderMatch(_Model):
    name: str = ""
    value: str = ""
    type: str = "Exact"  # Exact, RegularExpression


class HTTPRouteMatch(_Model):
    path: HTTPPathMatch | None = None
    headers: list[HTTPHeaderMatch] = []
    query_params: list[HTTPHeaderMatch] = []
    method: str | None = None


class HTTPHeader(_Model):
    name: str = ""
    value: str = ""


class HTTPHeaderFilter(_Model):
    set: list[HTTPHeader] = []
    add: list[HTTPHeader] = []
    remove: list[str] = []


class HTTPPathModifier(_Model):
    type: str = ""  # ReplaceFullPath, ReplacePrefixMatch
    replace_full_path: str | None = None
    replace_prefix_match: str | None = None


class HTTPRequestRedirectFilter(_Model):
    scheme: str | None = None
    hostname: str | None = None
    path: HTTPPathModifier | None = None
    port: int | None = None
    status_code: int = 302


class HTTPURLRewriteFilter(_Model):
    hostname: str | None = None
    path: HTTPPathModifier | None = None


class Fraction(_Model):
    numerator: int = 0
    denominator: int = 100


class HTTPRequestMirrorFilter(_Model):
    backend_ref: BackendRef | None = None
    percent: int | None = None  # None with no fraction: every request
    fraction: Fraction | None = None


class HTTPRouteFilter(_Model):
    type: str = ""
    request_header_modifier: HTTPHeaderFilter | None = None
    response_header_modifier: HTTPHeaderFilter | None = None
    request_redirect: HTTPRequestRedirectFilter | None = None
    url_rewrite: HTTPURLRewriteFilter | None = msgspec.field(default=None, name="urlRewrite")
    request_mirror: HTTPRequestMirrorFilter | None = None
    extension_ref: dict[str, Any] | None = None
    cors: dict[str, Any] | None = None


class HTTPBackendRef(_Model):
    name: str = ""
    group: str | None = None  # None and "": the core group
    kind: str | None = None  # None: Service
    namespace: str | None = None  # None: the route's
    port: int | None = None
    weight: int = 1
    filters: list[HTTPRouteFilter] = []


class HTTPRouteTimeouts(_Model):
    request: str | None = None
    backend_request: str | None = None


class HTTPRouteRule(_Model):
    name: str | None = None
    matches: list[HTTPRouteMatch] = []
    filters: list[HTTPRouteFilter] = []
    backend_refs: list[HTTPBackendRef] = []
    timeouts: HTTPRouteTimeouts | None = None


class HTTPRouteSpec(_Model):
    parent_refs: list[ParentReference] = []
    hostnames: list[str] = []
    rules: list[HTTPRouteRule] = []


class HTTPRoute(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: HTTPRouteSpec = HTTPRouteSpec()
    status: dict[str, Any] = {}


class BackendRef(_Model):
    name: str = ""
    group: str | None = None  # None and "": the core group
    kind: str | None = None  # None: Service
    namespace: str | None = None  # None: the route's
    port: int | None = None
    weight: int = 1


class L4RouteRule(_Model):
    """A rule of a TLSRoute, TCPRoute or UDPRoute: backends only."""

    name: str | None = None
    backend_refs: list[BackendRef] = []


class L4RouteSpec(_Model):
    """The spec of a TLSRoute (which has ``hostnames``), TCPRoute or UDPRoute."""

    parent_refs: list[ParentReference] = []
    hostnames: list[str] = []
    rules: list[L4RouteRule] = []


class TLSRoute(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: L4RouteSpec = L4RouteSpec()
    status: dict[str, Any] = {}


class TCPRoute(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: L4RouteSpec = L4RouteSpec()
    status: dict[str, Any] = {}


class UDPRoute(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: L4RouteSpec = L4RouteSpec()
    status: dict[str, Any] = {}


class ReferenceGrantFrom(_Model):
    group: str = ""
    kind: str = ""
    namespace: str = ""


class ReferenceGrantTo(_Model):
    group: str = ""
    kind: str = ""
    name: str | None = None  # None: every object of that kind


class ReferenceGrantSpec(_Model):
    from_: list[ReferenceGrantFrom] = msgspec.field(default_factory=list, name="from")
    to: list[ReferenceGrantTo] = []


class ReferenceGrant(_Model):
    metadata: ObjectMeta = ObjectMeta()
    spec: ReferenceGrantSpec = ReferenceGrantSpec()


class Namespace(_Model):
    metadata: ObjectMeta = ObjectMeta()


GATEWAY_KINDS: Mapping[str, type[_Model]] = {
    "GatewayClass": GatewayClass,
    "Gateway": Gateway,
    "HTTPRoute": HTTPRoute,
    "TLSRoute": TLSRoute,
    "TCPRoute": TCPRoute,
    "UDPRoute": UDPRoute,
    "ReferenceGrant": ReferenceGrant,
    "Namespace": Namespace,
}
"""The kinds the Gateway provider reads besides Services, EndpointSlices and Secrets."""
