"""What changed between two merged configurations, for the endpoints-only path.

Endpoints change far more often than routes (a Deployment scales, a pod is
replaced). When two configurations differ only in the server lists of load
balancers (HTTP, TCP or UDP), those load balancers can be updated in place: no
router is rebuilt, no pool is dropped, the round-robin goes on.
:func:`changed_backends` says whether that is the case, and which services of each
protocol; :func:`changed_servers` is its HTTP-only form, which the runtime's
endpoints-only validation takes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from edge.config.dynamic import Configuration

__all__ = ["Backends", "changed_backends", "changed_servers"]

_SECTIONS = ("http", "tcp", "udp")


class Backends(NamedTuple):
    """The load balancers whose servers changed, by protocol (service names)."""

    http: list[str]
    tcp: list[str]
    udp: list[str]

    def __bool__(self) -> bool:
        return bool(self.http or self.tcp or self.udp)


def changed_backends(old: Configuration, new: Configuration) -> Backends | None:
    """The HTTP, TCP and UDP load balancers whose servers changed, when nothing else did.

    None: something else changed too (a router, a middleware, a transport, a
    service's other settings, the ``tls`` section), so routers must be rebuilt. Empty
    lists: nothing changed at all.
    """
    if old.tls != new.tls:
        return None
    found: list[list[str]] = []
    for section in _SECTIONS:
        a, b = getattr(old, section), getattr(new, section)
        if a is b:
            found.append([])
            continue
        changed = _changed(a, b)
        if changed is None:
            return None
        found.append(changed)
    return Backends(*found)


def changed_servers(old: Configuration, new: Configuration) -> list[str] | None:
    """Names of the HTTP load balancers whose servers changed, when nothing else did
    (TCP and UDP servers included: None when those changed)."""
    found = changed_backends(old, new)
    if found is None or found.tcp or found.udp:
        return None
    return found.http


def _changed(a: Any, b: Any) -> list[str] | None:
    """One protocol's section (``http``, ``tcp`` or ``udp``; None: absent): the names of
    its load balancers whose servers alone changed, None if anything else did."""
    if a is None or b is None:
        if a is None and b is None:
            return []
        present = a if b is None else b
        if present != type(present)():
            return None  # an empty section and no section serve the same
        return []
    for field in a.__struct_fields__:
        if field != "services" and getattr(a, field) != getattr(b, field):
            return None
    if a.services.keys() != b.services.keys():
        return None
    changed = []
    for name, before in a.services.items():
        after = b.services[name]
        if before is after or before == after:
            continue
        lb0, lb1 = before.load_balancer, after.load_balancer
        if (
            lb0 is None
            or lb1 is None
            or not _same_but(before, after, "load_balancer")
            or not _same_but(lb0, lb1, "servers")
        ):
            return None
        changed.append(name)
    return changed


def _same_but(a: Any, b: Any, field: str) -> bool:
    """Two Structs of one type equal in every field but ``field``."""
    return all(getattr(a, f) == getattr(b, f) for f in a.__struct_fields__ if f != field)
