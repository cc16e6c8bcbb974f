"""The ``kubernetesIngressNGINX`` source as edge runs it and ``edge check`` lists it: the
ConfigMaps its Ingresses name, on top of the Ingress source's machinery.

Owns :class:`IngressNGINXProvider` (what :class:`~edge.providers.kubernetes.provider.
KubernetesIngressNGINXProvider` does, plus every ConfigMap of the watched namespaces:
``custom-headers`` names any of them, so they are watched on the shared core and an
edit is served within the provider's throttle) and :func:`check_cluster` (the same
listing once, ``tcp-services`` and ``udp-services`` included, for ``edge check``).

Invariant: the conversion stays :func:`~edge.providers.kubernetes.ingress_nginx.convert`
and :func:`~edge.providers.kubernetes.ingress_nginx.convert_services`, pure; this module
only says what is listed and which changes need no conversion (a ConfigMap that no
Ingress and no ``*ServicesConfigMap`` key names).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from edge.config.static import KubernetesIngressNGINXConfig
from edge.providers.kubernetes import ingress_nginx, objects
from edge.providers.kubernetes.client import CONFIG_MAPS, Timing, WatchSpec, load_api_config
from edge.providers.kubernetes.gateway import EntryPointPort
from edge.providers.kubernetes.ingress import Conversion
from edge.providers.kubernetes.objects import Key
from edge.providers.kubernetes.provider import (
    KubernetesIngressNGINXProvider,
    _config_map_key,
    _nginx_as_ingress,
    _watches,
    list_once,
)

__all__ = ["NOT_HELM", "IngressNGINXProvider", "check_cluster", "config_maps_watch"]

log = logging.getLogger("edge.providers.kubernetes")

NOT_HELM = "owner!=helm"
"""The ConfigMaps not watched: Helm's release records (its ``configmap`` storage
driver's), large and never named by an Ingress; Traefik's provider leaves them out too."""


def config_maps_watch(config: KubernetesIngressNGINXConfig) -> WatchSpec:
    """Every ConfigMap (read whole) of the watched namespace, or of every namespace, and
    of the namespaces of ``tcpServicesConfigMap`` and ``udpServicesConfigMap``."""
    namespaces: tuple[str, ...] = ()  # every namespace
    if config.watch_namespace:
        extra = [
            key[0]
            for key in (
                _config_map_key(config.tcp_services_config_map, "tcpServicesConfigMap"),
                _config_map_key(config.udp_services_config_map, "udpServicesConfigMap"),
            )
            if key is not None
        ]
        namespaces = tuple(sorted({config.watch_namespace, *extra}))
    return WatchSpec(
        CONFIG_MAPS, objects.ServicesConfigMap, label_selector=NOT_HELM, namespaces=namespaces
    )


def _named_config_maps(ingresses: Mapping[Key, Any]) -> set[Key]:
    """The ConfigMaps the Ingresses' ``custom-headers`` annotations name."""
    named = set()
    key = ingress_nginx.PREFIX + "custom-headers"
    for (namespace, _), ing in ingresses.items():
        value = ing.metadata.annotations.get(key)
        if value:
            ns, _, name = value.strip().rpartition("/")
            named.add((ns or namespace, name))
    return named


class IngressNGINXProvider(KubernetesIngressNGINXProvider):
    """The ``providers.kubernetesIngressNGINX`` source edge runs (module doc)."""

    def __init__(self, config: KubernetesIngressNGINXConfig, **kwargs: Any) -> None:
        self._controller_problems: set[str] = set()
        super().__init__(config, **kwargs)

    def watches(self) -> list[WatchSpec]:
        kept = [w for w in super().watches() if w.resource.kind != CONFIG_MAPS.kind]
        return [*kept, config_maps_watch(self.nginx_config)]

    def unchanged(self, changed: dict[str, set[Key]], snapshot: Mapping[str, Any]) -> bool:
        """A change of ConfigMaps alone that no Ingress and neither services ConfigMap
        names needs no conversion (every ConfigMap of the namespaces is watched)."""
        maps = changed.get("ConfigMap")
        if maps is None:
            return super().unchanged(changed, snapshot)
        named = _named_config_maps(snapshot.get("Ingress", {}))
        named.update(k for k in (self.tcp_services, self.udp_services) if k is not None)
        if maps & named:
            return False
        rest = {kind: keys for kind, keys in changed.items() if kind != "ConfigMap"}
        return not rest or super().unchanged(rest, snapshot)

    def convert_state(self, state: objects.ClusterState) -> Conversion:
        conversion = super().convert_state(state)
        http = conversion.configuration.http
        current = {
            problem
            for name, router in (http.routers.items() if http is not None else ())
            if name not in conversion.owners
            for problem in router.problems
            if problem.startswith("defaultBackendService ")
        }
        for problem in sorted(current - self._controller_problems):
            log.error("%s: %s; it is not served", self.name, problem)
        for problem in sorted(self._controller_problems - current):
            log.info("%s: resolved: %s", self.name, problem)
        self._controller_problems = current
        return conversion


def check_cluster(
    config: KubernetesIngressNGINXConfig,
    entry_points: Sequence[EntryPointPort] = (),
    timeout: float = 10.0,
    timing: Timing | None = None,
) -> Conversion:
    """List the cluster once and convert it as the running source would (``edge
    check``): the Ingresses, the ConfigMaps they name and the services ConfigMaps,
    whose entries bind to ``entry_points``; blocking. Raises what
    :func:`~edge.providers.kubernetes.provider.list_once` raises."""
    as_ingress = _nginx_as_ingress(config)
    api = load_api_config(
        config.endpoint, config.token, config.cert_auth_file_path, config.kubeconfig
    )
    watches = [*_watches(as_ingress), config_maps_watch(config)]
    snapshot = list_once(api, watches, as_ingress.namespaces, timeout, timing)
    state = objects.ClusterState.from_snapshot(snapshot)
    conversion = ingress_nginx.convert(state, ingress_nginx.NGINXOptions.from_config(config))
    tcp = _config_map_key(config.tcp_services_config_map, "tcpServicesConfigMap")
    udp = _config_map_key(config.udp_services_config_map, "udpServicesConfigMap")
    if tcp is None and udp is None:
        return conversion
    services = KubernetesIngressNGINXProvider._services_data
    l4 = ingress_nginx.convert_services(
        state, services(state, tcp), services(state, udp), entry_points
    )
    return ingress_nginx.with_services(conversion, l4)
