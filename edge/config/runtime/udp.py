"""The UDP section's walk: services, then routers. A UDP router has no rule: one serves an
entry point, the first by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from edge.config.dynamic import UDPConfiguration, UDPService
from edge.config.runtime.checks import (
    _check_entry_points,
    _check_service,
    _check_transport,
    _check_weighted,
)
from edge.config.runtime.model import (
    DEFAULT_TRANSPORT,
    DISABLED,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
)


def _build_udp(
    rt: RuntimeConfig,
    udp: UDPConfiguration,
    entry_points: Mapping[str, str],
    defaults: list[str] | None = None,
) -> None:
    """Validate ``udp`` into ``rt``'s UDP tables (routers attach to UDP entry points,
    those of ``defaults`` when they name none: every one unless told)."""
    if defaults is None:
        defaults = sorted(n for n, p in entry_points.items() if p == "udp")
    rt.udp_services = {n: ServiceInfo(n, s) for n, s in udp.services.items()}
    transports = {DEFAULT_TRANSPORT: None, **udp.servers_transports}
    for info in rt.udp_services.values():
        _check_udp_service(info, transports)
    _check_weighted(rt.udp_services)
    for name, router in udp.routers.items():
        r = RouterInfo(name, router)
        rt.udp_routers[name] = r
        _check_entry_points(r, router.entry_points, "udp", defaults, entry_points)
        _check_service(r, router.service, rt.udp_services)
    _check_serving(rt.udp_routers)


def _check_udp_service(info: ServiceInfo[UDPService], transports: Mapping[str, object]) -> None:
    """A service's own checks: its transport exists; no servers is a warning. A stand-in
    (``problems``, disabled with them) has nothing else to check."""
    lb = info.config.load_balancer
    if lb is not None and not info.config.problems:
        _check_transport(info, lb.servers_transport, transports)
        if not lb.servers:
            info.add_error("no servers: datagrams are dropped", critical=False)


def _check_serving(routers: Mapping[str, RouterInfo[Any]]) -> None:
    """One router serves an entry point, the first by name; the others get a warning."""
    serving: dict[str, str] = {}
    for name in sorted(routers):
        r = routers[name]
        if r.status == DISABLED:
            continue
        for ep in r.entry_points:
            first = serving.setdefault(ep, name)
            if first != name:
                r.add_error(
                    f"entryPoint {ep!r} is served by udp router {first!r} "
                    "(one UDP router per entry point: the first by name)",
                    critical=False,
                )
