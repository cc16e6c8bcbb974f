"""The Kubernetes objects edge reads, decoded from the API server's JSON with msgspec.

Owns the models of the few fields edge needs of Ingress (``networking.k8s.io/v1``),
IngressClass, Service, EndpointSlice (``discovery.k8s.io/v1``) and Secret, their
decoders (built once), the Pod and Node models the Ingress status reads (decoded by
the provider's status client, so not in :data:`KINDS`), and :class:`ClusterState`, the snapshot of cached objects the
conversion (:mod:`edge.providers.kubernetes.ingress`) reads.

Invariants:

* Decoding is lenient where Kubernetes is open-ended: unknown fields are ignored (objects
  carry far more than edge reads), every field has a default, so a BOOKMARK event's
  object (metadata only) decodes too. Types are strict: a field of the wrong JSON type
  is a :class:`~edge.errors.ConfigError` naming the kind and the key path.
* A Secret keeps only ``tls.crt`` and ``tls.key``, base64-decoded; no other secret data
  (service account tokens, passwords) is held in memory.
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
    "INGRESS_CLASS_ANNOTATION",
    "IS_DEFAULT_CLASS_ANNOTATION",
    "KINDS",
    "SERVICE_NAME_LABEL",
    "TLS_SECRET_TYPE",
    "ClusterState",
    "EndpointSlice",
    "Ingress",
    "IngressClass",
    "Key",
    "Node",
    "ObjectList",
    "Pod",
    "Secret",
    "Service",
    "ServicePort",
    "Status",
    "WatchEvent",
    "decode",
    "decode_event",
    "decode_list",
]

INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
"""The legacy (pre ``spec.ingressClassName``) way an Ingress names its class."""

IS_DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
"""On an IngressClass, ``"true"``: Ingresses that name no class belong to it."""

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label that ties an EndpointSlice to its Service."""

TLS_SECRET_TYPE = "kubernetes.io/tls"

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
    """The two keys of a TLS Secret's ``data``; JSON base64 decodes to bytes."""

    tls_crt: bytes | None = msgspec.field(default=None, name="tls.crt")
    tls_key: bytes | None = msgspec.field(default=None, name="tls.key")


class Secret(_Model):
    metadata: ObjectMeta = ObjectMeta()
    type: str = ""
    data: TLSData = TLSData()


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


KINDS: Mapping[str, type[_Model]] = {
    "Ingress": Ingress,
    "IngressClass": IngressClass,
    "Service": Service,
    "EndpointSlice": EndpointSlice,
    "Secret": Secret,
}
"""The kinds edge reads, by their Kubernetes ``kind``."""

_DECODERS: Mapping[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(model) for kind, model in KINDS.items()
}
_LIST_DECODERS: Mapping[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(ObjectList[model])  # type: ignore[valid-type]
    for kind, model in KINDS.items()
}
_EVENT_DECODER = msgspec.json.Decoder(WatchEvent)
_STATUS_DECODER = msgspec.json.Decoder(Status)


def _decoder(
    table: Mapping[str, msgspec.json.Decoder[Any]], kind: str
) -> msgspec.json.Decoder[Any]:
    try:
        return table[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}") from None


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

    @classmethod
    def from_snapshot(cls, tables: Mapping[str, Mapping[Key, Any]]) -> ClusterState:
        """A snapshot from kind -> objects by key (a kind missing is empty)."""
        return cls(
            ingresses=tables.get("Ingress", {}),
            ingress_classes=tables.get("IngressClass", {}),
            services=tables.get("Service", {}),
            endpoint_slices=tables.get("EndpointSlice", {}),
            secrets=tables.get("Secret", {}),
        )

    @classmethod
    def from_objects(cls, objects: list[Any]) -> ClusterState:
        """A snapshot holding ``objects`` (decoded models of any of :data:`KINDS`)."""
        kinds = {model: kind for kind, model in KINDS.items()}
        tables: dict[str, dict[Key, Any]] = {kind: {} for kind in KINDS}
        for obj in objects:
            tables[kinds[type(obj)]][obj.metadata.key] = obj
        return cls.from_snapshot(tables)
