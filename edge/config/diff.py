"""What changed between two merged configurations, for the endpoints-only path.

Endpoints change far more often than routes (a Deployment scales, a pod is
replaced). When two configurations differ only in the server lists of HTTP
load balancers, those load balancers can be updated in place: no router is
rebuilt, no pool is dropped, the round-robin goes on. :func:`changed_servers`
says whether that is the case, and which services.
"""

from __future__ import annotations

import msgspec

from edge.config.dynamic import Configuration, HTTPConfiguration


def changed_servers(old: Configuration, new: Configuration) -> list[str] | None:
    """Names of the HTTP load balancers whose servers changed, when nothing else did.

    None: something else changed too (a router, a middleware, a transport, a
    service's other settings, anything outside ``http``), so routers must be
    rebuilt. An empty list: nothing changed at all.
    """
    if old.tcp != new.tcp or old.udp != new.udp or old.tls != new.tls:
        return None
    a = old.http or _EMPTY
    b = new.http or _EMPTY
    if (
        a.routers != b.routers
        or a.middlewares != b.middlewares
        or a.servers_transports != b.servers_transports
    ):
        return None
    if a.services.keys() != b.services.keys():
        return None
    changed = []
    for name, before in a.services.items():
        after = b.services[name]
        if before == after:
            continue
        lb0, lb1 = before.load_balancer, after.load_balancer
        if (
            lb0 is None
            or lb1 is None
            or msgspec.structs.replace(lb0, servers=[]) != msgspec.structs.replace(lb1, servers=[])
        ):
            return None
        changed.append(name)
    return changed


_EMPTY = HTTPConfiguration()
