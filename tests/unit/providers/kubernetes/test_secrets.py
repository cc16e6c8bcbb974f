"""Secrets read by the Kubernetes conversions (:mod:`edge.providers.kubernetes.secrets`)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import msgspec
import pytest

from edge.providers.kubernetes import objects
from edge.providers.kubernetes.secrets import (
    SecretError,
    auth_users,
    ca_bundle,
    config_map_ca_bundle,
    tls_certificate,
)
from tests.fixtures.tls.pki import PKI


def secret(name: str, type_: str, data: dict[str, str]) -> Any:
    doc = {"metadata": {"name": name, "namespace": "default"}, "type": type_,
           "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}  # fmt: skip
    return objects.decode("Secret", msgspec.json.encode(doc))


@pytest.fixture(scope="module")
def pair() -> Any:
    return PKI().issue("client.example.com")


def test_a_tls_secret_is_a_certificate_of_inline_pem(pair: Any) -> None:
    s = secret("tls", "kubernetes.io/tls", {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem})
    cert = tls_certificate({("default", "tls"): s}, ("default", "tls"))
    assert (cert.cert_file, cert.key_file) == (pair.cert_pem, pair.key_pem)


def test_another_type_is_read_only_when_any_type_is_taken(pair: Any) -> None:
    s = secret("op", "Opaque", {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem})
    secrets = {("default", "op"): s}
    with pytest.raises(SecretError, match=r"secret default/op is of type 'Opaque'"):
        tls_certificate(secrets, ("default", "op"))
    assert tls_certificate(secrets, ("default", "op"), any_type=True).key_file == pair.key_pem


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"tls.crt": "-----BEGIN CERTIFICATE-----\n"}, "has no tls.key"),
        ({"tls.crt": "/etc/edge/cert.pem", "tls.key": "k"}, "tls.crt is not PEM"),
    ],
)
def test_what_is_not_a_certificate_is_refused_naming_why(data: dict[str, str], reason: str) -> None:
    secrets = {("default", "s"): secret("s", "Opaque", data)}
    with pytest.raises(SecretError, match=reason) as info:
        tls_certificate(secrets, ("default", "s"), any_type=True)
    assert info.value.kind == "secret-invalid"
    with pytest.raises(SecretError, match="secret default/nope not found") as missing:
        tls_certificate(secrets, ("default", "nope"), any_type=True)
    assert missing.value.kind == "secret-not-found"


@pytest.mark.parametrize(
    ("data", "found"),
    [
        ({"ca.crt": "-----BEGIN CERTIFICATE-----\nB\n"}, "B"),
        ({"tls.ca": "-----BEGIN CERTIFICATE-----\nA\n", "ca.crt": "x"}, "A"),  # first
    ],
)
def test_a_ca_bundle_is_read_from_tls_ca_else_ca_crt(data: dict[str, str], found: str) -> None:
    secrets = {("default", "ca"): secret("ca", "Opaque", data)}
    assert ca_bundle(secrets, ("default", "ca")) == f"-----BEGIN CERTIFICATE-----\n{found}\n"
    cm = objects.decode("ConfigMap", msgspec.json.encode(
        {"metadata": {"name": "ca", "namespace": "default"}, "data": data}))  # fmt: skip
    assert config_map_ca_bundle({("default", "ca"): cm}, ("default", "ca")) == ca_bundle(
        secrets, ("default", "ca")
    )


def test_what_is_not_a_ca_bundle_is_refused_naming_why(pair: Any) -> None:
    secrets = {
        ("default", "tls"): secret("tls", "kubernetes.io/tls", {"tls.crt": pair.cert_pem}),
        ("default", "path"): secret("path", "Opaque", {"ca.crt": "/etc/ssl/ca.pem"}),
    }
    with pytest.raises(
        SecretError, match=r"secret default/tls has no CA bundle under tls\.ca or ca\.crt"
    ):
        ca_bundle(secrets, ("default", "tls"))
    with pytest.raises(SecretError, match=r"secret default/path: ca\.crt is not PEM certificates"):
        ca_bundle(secrets, ("default", "path"))
    with pytest.raises(SecretError, match="secret default/other not found"):
        ca_bundle(secrets, ("default", "other"))
    with pytest.raises(SecretError, match="configMap default/ca not found"):
        config_map_ca_bundle({}, ("default", "ca"))


def test_auth_users_read_as_traefik_reads_them() -> None:
    """A basic-auth Secret's username and password are one {SHA} line for basicAuth
    (for digestAuth, as any other Secret: its users lines); other Secrets give the
    non-empty lines under users, which must be their only key edge reads."""
    secrets = {
        s.metadata.key: s
        for s in (
            secret("ba", "kubernetes.io/basic-auth", {"username": "alice", "password": "s3cret"}),
            secret("lines", "Opaque", {"users": "bob:{SHA}x\n\ncarol:{SHA}y\n"}),
            secret("both", "Opaque", {"users": "bob:{SHA}x", "tls.crt": "PEM"}),
            secret("empty", "Opaque", {"users": "\n\n"}),
        )
    }
    sha = base64.b64encode(hashlib.sha1(b"s3cret").digest()).decode()
    assert auth_users(secrets, ("default", "ba"), basic=True) == [f"alice:{{SHA}}{sha}"]
    assert auth_users(secrets, ("default", "lines"), basic=True) == ["bob:{SHA}x", "carol:{SHA}y"]
    assert auth_users(secrets, ("default", "lines"), basic=False) == ["bob:{SHA}x", "carol:{SHA}y"]
    with pytest.raises(SecretError, match="has no key users"):
        auth_users(secrets, ("default", "ba"), basic=False)
    with pytest.raises(SecretError, match=r"must hold its users alone, it holds tls\.crt, users"):
        auth_users(secrets, ("default", "both"), basic=True)
    with pytest.raises(SecretError, match="holds no users"):
        auth_users(secrets, ("default", "empty"), basic=True)
    with pytest.raises(SecretError, match="secret default/gone not found"):
        auth_users(secrets, ("default", "gone"), basic=True)
