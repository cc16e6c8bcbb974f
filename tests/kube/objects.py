"""Builders of Kubernetes objects (plain dicts, the API's JSON) for tests.

Each returns a valid object of its kind, as the API server would accept it, so
the official client's models can deserialize it too. Only the fields tests vary
are parameters.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

Obj = dict[str, Any]


def meta(
    name: str,
    namespace: str | None = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    m: Obj = {"name": name}
    if namespace is not None:
        m["namespace"] = namespace
    if labels:
        m["labels"] = dict(labels)
    if annotations:
        m["annotations"] = dict(annotations)
    return m


def ingress(
    name: str,
    namespace: str = "default",
    *,
    host: str = "example.com",
    service: str = "whoami",
    port: int = 80,
    labels: dict[str, str] | None = None,
    ingress_class: str | None = None,
) -> Obj:
    spec: Obj = {
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": service, "port": {"number": port}}},
                        }
                    ]
                },
            }
        ],
    }
    if ingress_class is not None:
        spec["ingressClassName"] = ingress_class
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta(name, namespace, labels),
        "spec": spec,
    }


def ingress_class(
    name: str, controller: str = "edge.dev/ingress-controller", default: bool = False
) -> Obj:
    annotations = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": meta(name, None, annotations=annotations),
        "spec": {"controller": controller},
    }


def service(
    name: str,
    namespace: str = "default",
    *,
    port: int = 80,
    target_port: int = 8080,
    labels: dict[str, str] | None = None,
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(name, namespace, labels),
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": target_port, "protocol": "TCP"}],
        },
    }


def endpoint_slice(
    name: str,
    namespace: str = "default",
    *,
    service_name: str = "whoami",
    addresses: list[str] | tuple[str, ...] = ("10.0.0.1",),
    port: int = 8080,
    ready: bool = True,
    terminating: bool = False,
) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta(
            name,
            namespace,
            {
                "kubernetes.io/service-name": service_name,
                "endpointslice.kubernetes.io/managed-by": "test",
            },
        ),
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [a],
                "conditions": {
                    "ready": ready,
                    "serving": ready or terminating,
                    "terminating": terminating,
                },
                "nodeName": "node-1",
                "targetRef": {"kind": "Pod", "name": f"{service_name}-{i}", "namespace": namespace},
            }
            for i, a in enumerate(addresses)
        ],
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }


def secret(name: str, namespace: str = "default", *, cert: str = "CERT", key: str = "KEY") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(name, namespace),
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": cert, "tls.key": key},
    }


def configuration(url: str, token: str | None = None) -> client.Configuration:
    """An official client configuration for the emulator at ``url``."""
    cfg = client.Configuration(host=url)
    if token is not None:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg
