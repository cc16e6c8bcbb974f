"""Validation of a merged configuration into a runtime snapshot (Traefik's pkg/config/runtime).

Owns the cross-reference checks no single file can make: rules parse, routers point at
existing, working services, middlewares and entry points of the right protocol,
weighted services have no missing members and no cycles, serversTransports exist
and their TLS files can be used (:func:`client_tls_context`), TCP middlewares can
be built. Entry point models are applied first: an HTTP router on an entry point
with ``http.tls`` gets that ``tls`` when it has none (Traefik's ``applyModel``: a
router on several entry points becomes one router per model entry point, named
``<entrypoint>-<router>``).

Invariants of :func:`build_runtime`'s :class:`RuntimeConfig`:

* every element of the configuration appears exactly once, with a status:
  ``"enabled"``; ``"warning"`` (works, but something deserves a look, e.g. no servers:
  requests get 503); or ``"disabled"`` (must not be served), and ``errors`` saying why;
* an enabled or warning router has a compiled ``rule``, a resolved ``priority`` and a
  non-empty list of existing ``entry_points``, its service and middlewares exist and its
  service is not disabled; one broken element never disables an unrelated one;
* ``servers_transports`` always holds ``default@internal``; the snapshot is never
  mutated after it is built, except by :func:`check_tls` (certificates and TLS
  options, checked against a snapshot this layer cannot build), which runs once,
  before any router is built from it.

Messages in ``errors`` are bare (``service 'x@file' does not exist``);
:meth:`RuntimeConfig.errors` prefixes each with the element
(``router whoami@file: service 'x@file' does not exist``).

Modules: :mod:`~edge.config.runtime.model` (the snapshot: :class:`RuntimeConfig` and
its element infos), :mod:`~edge.config.runtime.build` (:func:`build_runtime`, one walk
per protocol: :mod:`~edge.config.runtime.http`, :mod:`~edge.config.runtime.tcp`,
:mod:`~edge.config.runtime.udp`, over the checks they share in
:mod:`~edge.config.runtime.checks`), :mod:`~edge.config.runtime.endpoints` (rounds
where only servers changed) and :mod:`~edge.config.runtime.tls` (:func:`check_tls`,
:func:`client_tls_context`). This package re-exports the public names.
"""

from edge.config.runtime.build import build_runtime
from edge.config.runtime.model import (
    DEFAULT_TRANSPORT,
    DISABLED,
    ENABLED,
    WARNING,
    ElementInfo,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
)
from edge.config.runtime.tls import check_tls, client_tls_context, relative_files

__all__ = [
    "DEFAULT_TRANSPORT",
    "DISABLED",
    "ENABLED",
    "WARNING",
    "ElementInfo",
    "RouterInfo",
    "RuntimeConfig",
    "ServiceInfo",
    "build_runtime",
    "check_tls",
    "client_tls_context",
    "relative_files",
]
