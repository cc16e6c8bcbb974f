"""Dynamic configurations as the merge and validation tests write them: a document
decoded as a file provider's, a load balancer of URLs, entry points of each protocol."""

from __future__ import annotations

from typing import Any

from edge.config.dynamic import Configuration
from edge.config.loader import decode_dynamic

EPS = {"web": "tcp", "websecure": "tcp", "dns": "udp", "traefik": "tcp"}


def conf(obj: Any) -> Configuration:
    return decode_dynamic(obj)


def lb(*urls: str) -> dict[str, Any]:
    return {"loadBalancer": {"servers": [{"url": u} for u in urls]}}


def hosts_yaml(routers: dict[str, str], services: tuple[str, ...] = ()) -> str:
    lines = ["http:", "  routers:"]
    for name, host in routers.items():
        lines += [f"    {name}:", f"      rule: Host(`{host}`)", "      service: app"]
    if services:
        lines.append("  services:")
        for name in services:
            lines += [
                f"    {name}:",
                "      loadBalancer:",
                "        servers:",
                "        - url: http://127.0.0.1:1",
            ]
    return "\n".join(lines) + "\n"
