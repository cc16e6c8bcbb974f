"""What the entrypoint collection needs of an entrypoint, and helpers they share."""

from __future__ import annotations

from typing import Protocol

from edge.config.static import EntryPoint as EntryPointConfig
from edge.router.set import RouterSet

SWEEP_MAX = 1.0
SWEEP_MIN = 0.05


class EntryPoint(Protocol):
    """A TCP or UDP entrypoint as :class:`~edge.entrypoints.EntryPoints` drives it."""

    name: str
    config: EntryPointConfig

    @property
    def port(self) -> int: ...

    async def start(self) -> None:
        """Bind; raises ``OSError`` when the address cannot be bound."""

    def switch(self, routers: RouterSet) -> None:
        """Serve ``routers`` from now on: one assignment."""

    def bound(self, ports: dict[str, int]) -> None:
        """Every entry point of the process is bound; ``ports``: name -> bound port."""

    def sweep(self, now: float) -> None:
        """Enforce deadlines that passed by ``now`` (loop time)."""

    def sweep_interval(self) -> float:
        """How often :meth:`sweep` should run, in seconds."""

    def stop_accepting(self) -> None: ...

    async def drain(self, grace: float) -> None:
        """Finish what is in flight within ``grace`` seconds, then close the rest."""


def format_address(addr: tuple) -> str:
    """A socket address as ``host:port`` or ``[v6]:port``."""
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
