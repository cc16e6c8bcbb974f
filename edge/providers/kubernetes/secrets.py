"""Secrets -> certificates and CA bundles, shared by every conversion.

Owns :func:`tls_certificate`: a Secret whose ``tls.crt`` and ``tls.key`` are PEM becomes
an inline-PEM ``tls.certificates`` entry (of type ``kubernetes.io/tls`` only, unless the
caller takes any type, as Traefik does for a serversTransport's client certificates);
:func:`ca_bundle`, the CA certificates a Secret holds for verifying peers; and
:func:`auth_users`, the htpasswd lines of an auth middleware's Secret;
:func:`credentials`, the ``username`` and ``password`` a Secret holds for a client
(a rateLimit's Redis). Anything
else is a :class:`SecretError` saying why, so the Ingress conversion
(:mod:`edge.providers.kubernetes.ingress`) and the CRD conversion
(:mod:`edge.providers.kubernetes.crd`) refuse the same Secrets for the same reasons.
A value that is not PEM is refused because edge would read it as a file path.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Literal

import msgspec

from edge.config.dynamic import CertAndStores
from edge.providers.kubernetes.objects import (
    BASIC_AUTH_SECRET_TYPE,
    TLS_SECRET_TYPE,
    ConfigMap,
    Key,
    Secret,
)

__all__ = [
    "CA_KEYS",
    "SecretError",
    "auth_users",
    "ca_bundle",
    "config_map_ca_bundle",
    "credentials",
    "tls_certificate",
]

CA_KEYS = ("tls.ca", "ca.crt")
"""The keys of a Secret (or ConfigMap) Traefik reads a CA bundle from, in its order."""


class SecretError(Exception):
    """A Secret that cannot be a certificate: ``kind`` (not found, or invalid) and why."""

    def __init__(self, kind: Literal["secret-not-found", "secret-invalid"], reason: str) -> None:
        super().__init__(reason)
        self.kind: Literal["secret-not-found", "secret-invalid"] = kind
        self.reason = reason


def _secret(secrets: Mapping[Key, Secret], key: Key) -> Secret:
    secret = secrets.get(key)
    if secret is None:
        raise SecretError("secret-not-found", f"secret {key[0]}/{key[1]} not found")
    return secret


def tls_certificate(
    secrets: Mapping[Key, Secret], key: Key, *, any_type: bool = False
) -> CertAndStores:
    """The certificate held by the Secret ``key``; :class:`SecretError` if it holds none.
    ``any_type``: a Secret of another type than ``kubernetes.io/tls`` holding both keys
    is read too."""
    what = f"secret {key[0]}/{key[1]}"
    secret = _secret(secrets, key)
    if secret.type != TLS_SECRET_TYPE and not any_type:
        raise SecretError(
            "secret-invalid", f"{what} is of type {secret.type!r}, not {TLS_SECRET_TYPE}"
        )
    pems = []
    for field, data in (("tls.crt", secret.data.tls_crt), ("tls.key", secret.data.tls_key)):
        if not data:
            raise SecretError("secret-invalid", f"{what} has no {field}")
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if "-----BEGIN" not in text:
            raise SecretError("secret-invalid", f"{what}: {field} is not PEM")
        pems.append(text)
    return CertAndStores(cert_file=pems[0], key_file=pems[1])


def ca_bundle(secrets: Mapping[Key, Secret], key: Key) -> str:
    """The PEM CA bundle the Secret ``key`` holds under ``tls.ca``, else ``ca.crt``
    (Traefik's order); :class:`SecretError` if it holds neither, or one that is not PEM.
    Traefik's fallback (a Secret holding one key only is read as the bundle, whatever
    its name) is not followed: edge's Secret model keeps no other key."""
    return _ca(f"secret {key[0]}/{key[1]}", _secret(secrets, key).data)


def config_map_ca_bundle(config_maps: Mapping[Key, ConfigMap], key: Key) -> str:
    """:func:`ca_bundle` of the ConfigMap ``key``."""
    found = config_maps.get(key)
    if found is None:
        raise SecretError("secret-not-found", f"configMap {key[0]}/{key[1]} not found")
    return _ca(f"configMap {key[0]}/{key[1]}", found.data)


def _ca(what: str, model: msgspec.Struct) -> str:
    """The bundle of a Secret's or ConfigMap's data, the keys by their Kubernetes names."""
    data = msgspec.to_builtins(model, builtin_types=(bytes,))
    for name in CA_KEYS:
        value = data.get(name)
        if value:
            if isinstance(value, bytes):
                try:
                    value = value.decode("ascii")
                except UnicodeDecodeError:
                    value = ""
            if "-----BEGIN CERTIFICATE-----" not in value:
                raise SecretError("secret-invalid", f"{what}: {name} is not PEM certificates")
            return str(value)
    raise SecretError("secret-invalid", f"{what} has no CA bundle under {' or '.join(CA_KEYS)}")


def auth_users(secrets: Mapping[Key, Secret], key: Key, *, basic: bool) -> list[str]:
    """The users the Secret ``key`` holds for a basicAuth (``basic``) or digestAuth
    middleware, as Traefik reads them: a ``kubernetes.io/basic-auth`` Secret's
    ``username`` and ``password`` as one ``name:{SHA}...`` line (basicAuth only), else
    the non-empty lines of the Secret's one key (edge reads it under ``users``: the
    model keeps no other). :class:`SecretError` saying what is missing."""
    what = f"secret {key[0]}/{key[1]}"
    secret = _secret(secrets, key)
    data = secret.data
    if basic and secret.type == BASIC_AUTH_SECRET_TYPE:
        if data.username is None or data.password is None:
            raise SecretError("secret-invalid", f"{what} must hold both username and password")
        try:
            name = data.username.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError("secret-invalid", f"{what}: username is not UTF-8") from None
        digest = base64.b64encode(hashlib.sha1(data.password).digest()).decode("ascii")
        return [f"{name}:{{SHA}}{digest}"]
    held = [k for k, v in msgspec.to_builtins(data, builtin_types=(bytes,)).items() if v]
    if "users" not in held:
        raise SecretError("secret-invalid", f"{what} has no key users (where edge reads them)")
    if held != ["users"]:
        raise SecretError(
            "secret-invalid", f"{what} must hold its users alone, it holds {', '.join(held)}"
        )
    assert data.users is not None
    try:
        lines = [line for line in data.users.decode("utf-8").splitlines() if line]
    except UnicodeDecodeError:
        raise SecretError("secret-invalid", f"{what}: users is not UTF-8") from None
    if not lines:
        raise SecretError("secret-invalid", f"{what} holds no users")
    return lines


def credentials(secrets: Mapping[Key, Secret], key: Key) -> tuple[str, str]:
    """The ``username`` and ``password`` the Secret ``key`` (of any type) holds, as
    Traefik reads a rateLimit's Redis credentials; :class:`SecretError` naming the key
    that is missing or not UTF-8."""
    what = f"secret {key[0]}/{key[1]}"
    data = _secret(secrets, key).data
    found = []
    for field, value in (("username", data.username), ("password", data.password)):
        if value is None:
            raise SecretError("secret-invalid", f"{what} has no {field}")
        try:
            found.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            raise SecretError("secret-invalid", f"{what}: {field} is not UTF-8") from None
    return found[0], found[1]
