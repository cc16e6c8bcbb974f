"""TLS Secrets -> certificates, shared by every conversion.

Owns :func:`tls_certificate`: a Secret of type ``kubernetes.io/tls`` whose ``tls.crt``
and ``tls.key`` are PEM becomes an inline-PEM ``tls.certificates`` entry. Anything
else is a :class:`SecretError` saying why, so the Ingress conversion
(:mod:`edge.providers.kubernetes.ingress`) and the CRD conversion
(:mod:`edge.providers.kubernetes.crd`) refuse the same Secrets for the same reasons.
A value that is not PEM is refused because edge would read it as a file path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from edge.config.dynamic import CertAndStores
from edge.providers.kubernetes.objects import TLS_SECRET_TYPE, Key, Secret

__all__ = ["SecretError", "tls_certificate"]


class SecretError(Exception):
    """A Secret that cannot be a certificate: ``kind`` (not found, or invalid) and why."""

    def __init__(self, kind: Literal["secret-not-found", "secret-invalid"], reason: str) -> None:
        super().__init__(reason)
        self.kind: Literal["secret-not-found", "secret-invalid"] = kind
        self.reason = reason


def tls_certificate(secrets: Mapping[Key, Secret], key: Key) -> CertAndStores:
    """The certificate held by the Secret ``key``; :class:`SecretError` if it holds none."""
    what = f"secret {key[0]}/{key[1]}"
    secret = secrets.get(key)
    if secret is None:
        raise SecretError("secret-not-found", f"{what} not found")
    if secret.type != TLS_SECRET_TYPE:
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
