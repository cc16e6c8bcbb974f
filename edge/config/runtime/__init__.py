"""Validation of a merged configuration into a runtime snapshot (Traefik's pkg/config/runtime).

The package's API is what this module re-exports; see :mod:`edge.config.runtime.build`.
"""

from edge.config.runtime.build import (
    DEFAULT_TRANSPORT,
    DISABLED,
    ENABLED,
    WARNING,
    ElementInfo,
    RouterInfo,
    RuntimeConfig,
    ServiceInfo,
    build_runtime,
    check_tls,
    client_tls_context,
)

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
]
