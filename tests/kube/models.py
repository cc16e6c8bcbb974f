"""Small msgspec models that tests decode watch events into.

The reflector in ``edge.providers.kubernetes.client`` takes the type to decode
as a parameter (the real models live in ``edge.providers.kubernetes.objects``);
these are the least a test needs: metadata with name, namespace and
resourceVersion, plus the EndpointSlice fields edge reads, used to measure the
cost of decoding an EndpointSlice event.
"""

from __future__ import annotations

import msgspec


class _Base(msgspec.Struct, rename="camel", frozen=True):
    pass


class Meta(_Base):
    name: str
    namespace: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}


class Named(_Base):
    """Any object: its metadata only."""

    metadata: Meta


class Conditions(_Base):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class Endpoint(_Base):
    addresses: list[str]
    conditions: Conditions = Conditions()


class EndpointPort(_Base):
    name: str = ""
    port: int | None = None
    protocol: str = "TCP"


class EndpointSlice(_Base):
    metadata: Meta
    address_type: str
    endpoints: list[Endpoint] | None = None
    ports: list[EndpointPort] | None = None


class IngressStatusAddress(_Base):
    ip: str = ""
    hostname: str = ""


class IngressLoadBalancer(_Base):
    ingress: list[IngressStatusAddress] = []


class IngressStatus(_Base):
    load_balancer: IngressLoadBalancer = IngressLoadBalancer()


class Ingress(_Base):
    metadata: Meta
    status: IngressStatus = IngressStatus()
