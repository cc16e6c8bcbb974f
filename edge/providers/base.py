"""What a provider is, and the message it publishes.

Owns the :class:`Provider` protocol and :class:`Message`. A provider publishes whole
configurations (never patches): each :class:`Message` replaces everything that provider
said before. Invariant: ``publish`` is only ever called on the event loop thread; a
provider working in another thread hands its result over with
``loop.call_soon_threadsafe`` (or :meth:`edge.watcher.Watcher.publish_threadsafe`).

:class:`Message` lives here rather than in :mod:`edge.watcher` so providers do not import
the watcher (the import direction of the module map); ``edge.watcher`` re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import msgspec

from edge.config.dynamic import Configuration

__all__ = ["Message", "Provider", "Publish"]


class Message(msgspec.Struct, frozen=True):
    """One provider's complete configuration."""

    provider: str
    configuration: Configuration


Publish = Callable[[Message], None]


@runtime_checkable
class Provider(Protocol):
    """A source of dynamic configuration (file, Kubernetes Ingress, Gateway API)."""

    name: str
    """The provider's name, which qualifies its elements: ``whoami@<name>``."""

    throttle: float | None
    """Seconds between two applied configurations of this provider; None: the global
    ``providersThrottleDuration``."""

    async def run(self, publish: Publish) -> None:
        """Publish the first configuration, then (if watching) every change until cancelled."""
        ...

    def reload(self) -> None:
        """Re-read the source now and publish if it changed (SIGHUP)."""
        ...
