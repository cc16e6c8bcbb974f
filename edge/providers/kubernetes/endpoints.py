"""Services and their EndpointSlices -> server addresses, shared by every conversion.

Owns how a backend's Service port is found (:func:`service_port`), which EndpointSlice
port carries it (:func:`slice_port`), which endpoints count (:func:`ready_addresses`)
and how an address is written (:func:`host_port`). The Ingress conversion
(:mod:`edge.providers.kubernetes.ingress`) and the CRD conversion
(:mod:`edge.providers.kubernetes.crd`) both resolve Services through these, so a
Service port means the same servers whichever object names it.

Endpoint churn: :func:`endpoints_only` tells that two snapshots differ in their
EndpointSlices alone, and :func:`changed_services` which Services' slices changed, so
that a conversion rebuilds those Services' server lists and nothing else.

Invariants: pure functions of the decoded objects; an endpoint counts unless ``ready``
is false or ``terminating`` is true (``ready`` unset means ready, per the API); an
address that is not of its slice's ``addressType`` is dropped; IPv6 addresses are
bracketed; an ``addressType: FQDN`` slice names hosts (as an ExternalName Service
does) and counts only when the caller allows it.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping

import msgspec

from edge.providers.kubernetes.objects import ClusterState, EndpointSlice, Key, Node, ServicePort
from edge.providers.kubernetes.objects import Service as KubeService

__all__ = [
    "HOST_RE",
    "changed_services",
    "endpoints_only",
    "host_port",
    "node_port_addresses",
    "ready_addresses",
    "service_port",
    "slice_port",
    "slices_by_service",
]

_LABEL = r"[a-z0-9]+(?:-+[a-z0-9]+)*"  # alphanumerics, inner hyphens (no backtracking)
HOST_RE = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*")
"""A lower-cased DNS name, or ``*.`` and one."""


def slices_by_service(
    slices: Mapping[Key, EndpointSlice], only: set[Key] | None = None
) -> dict[Key, list[EndpointSlice]]:
    """The labelled slices of each Service (namespace, name), in key order; with
    ``only``, of those Services alone (endpoint churn: a few Services of thousands, so
    only their slices are sorted)."""
    if only is None:
        keys = sorted(slices)
    else:
        keys = sorted(k for k, eps in slices.items() if (k[0], eps.service_name) in only)
    grouped: dict[Key, list[EndpointSlice]] = {}
    for key in keys:
        eps = slices[key]
        owner = (key[0], eps.service_name)
        if eps.service_name and (only is None or owner in only):
            grouped.setdefault(owner, []).append(eps)
    return grouped


def service_port(
    svc: KubeService, number: int, name: str, protocol: str = "TCP"
) -> ServicePort | None:
    """The port of ``svc`` a backend names: by ``number`` when non-zero, else by
    ``name``; only ports of ``protocol`` (a port's protocol defaults to TCP) in range."""
    for candidate in svc.spec.ports:
        if (candidate.protocol or "TCP") != protocol or not 0 < candidate.port <= 65535:
            continue
        if (number and candidate.port == number) or (not number and candidate.name == name):
            return candidate
    return None


def slice_port(eps: EndpointSlice, name: str, protocol: str = "TCP") -> int | None:
    """The port of ``eps`` named like the Service port (``""`` for an unnamed one)."""
    for port in eps.ports:
        if (port.name or "") == name and (port.protocol or "TCP") == protocol:
            if port.port is not None and 0 < port.port <= 65535:
                return port.port
            return None
    return None


def host_port(address: str, port: int, family: str = "") -> str | None:
    """``address:port``, IPv6 bracketed; None when ``address`` is not an address of
    ``family`` (an EndpointSlice's ``addressType``: ``IPv4``, ``IPv6``, ``FQDN``; ``""``:
    any of them, for an externalName).

    ``inet_pton`` checks addresses in C: a Python ``ipaddress`` object per endpoint
    cost a third of a large conversion.
    """
    if family in ("IPv4", ""):
        try:
            socket.inet_pton(socket.AF_INET, address)
            return f"{address}:{port}"
        except OSError:
            pass
    if family in ("IPv6", ""):
        try:
            packed = socket.inet_pton(socket.AF_INET6, address)
            return f"[{socket.inet_ntop(socket.AF_INET6, packed)}]:{port}"
        except OSError:  # also a scoped address (fe80::1%eth0): no URL can carry it
            pass
    if family in ("FQDN", ""):
        name = address.lower().removesuffix(".")
        last = name.rpartition(".")[2]
        if (
            len(name) <= 253
            and address.isascii()
            and HOST_RE.fullmatch(name)
            and "*" not in name
            and not last.isdigit()
        ):
            return f"{name}:{port}"
    return None


def node_port_addresses(nodes: Mapping[Key, Node], node_port: int) -> list[str]:
    """``address:nodePort`` of every node's ``InternalIP`` addresses (as Traefik's
    ``nodePortLB`` picks them), in node order."""
    found: list[str] = []
    for key in sorted(nodes):
        for address in nodes[key].status.addresses:
            if address.type == "InternalIP":
                hp = host_port(address.address, node_port)
                if hp is not None and hp not in found:
                    found.append(hp)
    return found


def ready_addresses(
    slices: Iterable[EndpointSlice],
    port_name: str,
    *,
    protocol: str = "TCP",
    allow_fqdn: bool = False,
) -> tuple[set[str], list[str]]:
    """``host:port`` of every ready endpoint of ``slices`` on the Service port named
    ``port_name`` (its slices' port of that name and ``protocol``), and the names of the
    FQDN slices left out because ``allow_fqdn`` is off."""
    addresses: set[str] = set()
    hosts: list[str] = []
    for eps in slices:
        target = slice_port(eps, port_name, protocol)
        if target is None:
            continue
        if eps.address_type == "FQDN" and not allow_fqdn:
            hosts.append(eps.metadata.name)  # names any host, as an ExternalName does
            continue
        for endpoint in eps.endpoints:
            cond = endpoint.conditions
            if cond.ready is False or cond.terminating is True:
                continue
            for address in endpoint.addresses:
                found = host_port(address, target, eps.address_type)
                if found is not None:
                    addresses.add(found)
    return addresses, hosts


# --- endpoint churn ----------------------------------------------------------------------

_NOT_SLICES = tuple(
    f.name for f in msgspec.structs.fields(ClusterState) if f.name != "endpoint_slices"
)


def _same(old: object, new: object) -> bool:
    return old is new or old == new


def endpoints_only(old: ClusterState, new: ClusterState) -> bool:
    """True when the two snapshots differ, and only in their EndpointSlices. Every
    other table of :class:`ClusterState` is compared (by identity first: a snapshot's
    unchanged tables are the same dicts), so a kind added to it later counts too."""
    return not _same(old.endpoint_slices, new.endpoint_slices) and all(
        _same(getattr(old, name), getattr(new, name)) for name in _NOT_SLICES
    )


def changed_services(
    old: Mapping[Key, EndpointSlice], new: Mapping[Key, EndpointSlice]
) -> set[Key]:
    """The Services (namespace, name) owning a slice added, removed or changed between
    ``old`` and ``new`` (a slice relabelled counts for both owners). A slice object the
    two tables share is unchanged: a snapshot passes untouched objects on."""
    affected: set[Key] = set()
    for table, other in ((old, new), (new, old)):
        for key, eps in table.items():
            if other.get(key) is not eps and eps.service_name:
                affected.add((key[0], eps.service_name))
    return affected
