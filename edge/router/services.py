"""A configuration's services turned into balancers: the walk the HTTP and TCP builders share.

Owns :func:`build_service`: a service is built once per table and name (``built``
memoises it); a ``weighted`` service's members are built first, each member that
cannot be built is left out of the rotation, and a weighted cycle resolves to None
(validation reported it and disabled those services). A service validation
disabled, or one that does not exist, is None. What a ``loadBalancer`` becomes is the
caller's (HTTP backends with their transport, TCP servers with their dialer settings),
as is the weighted balancer's class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from edge.config.runtime import DISABLED, ServiceInfo

__all__ = ["build_service"]

S = TypeVar("S")


def build_service(
    name: str,
    built: dict[str, S | None],
    infos: Mapping[str, ServiceInfo[Any]],
    load_balancer: Callable[[str, Any], S | None],
    weighted: Callable[[str, list[tuple[S, int]]], S],
) -> S | None:
    """The balancer of service ``name`` (see the module doc), from ``built`` when made before.

    ``load_balancer(name, config.load_balancer)`` makes a loadBalancer service (None when
    it cannot); ``weighted(name, [(member, weight), ...])`` a weighted one.
    """
    if name in built:
        return built[name]
    built[name] = None  # a cycle resolves to None (validation reports it)
    info = infos.get(name)
    result: S | None = None
    if info is not None and info.status != DISABLED:
        config = info.config
        if config.load_balancer is not None:
            result = load_balancer(name, config.load_balancer)
        elif config.weighted is not None:
            children = []
            for member in config.weighted.services:
                child = build_service(member.name, built, infos, load_balancer, weighted)
                if child is not None:
                    children.append((child, member.weight))
            result = weighted(name, children)
    built[name] = result
    return result
