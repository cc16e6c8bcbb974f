"""Secrets read by the Kubernetes conversions (:mod:`edge.providers.kubernetes.secrets`)."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from edge.providers.kubernetes import objects
from edge.providers.kubernetes.secrets import SecretError, ca_bundle, tls_certificate
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


def test_a_ca_bundle_is_refused_naming_the_keys_edge_keeps(pair: Any) -> None:
    secrets = {("default", "ca"): secret("ca", "Opaque", {"ca.crt": pair.cert_pem})}
    with pytest.raises(SecretError) as info:
        ca_bundle(secrets, ("default", "ca"))
    assert info.value.reason == (
        "secret default/ca has no CA bundle under tls.ca or ca.crt "
        "(edge reads only tls.crt, tls.key of Secrets)"
    )
    with pytest.raises(SecretError, match="secret default/other not found"):
        ca_bundle(secrets, ("default", "other"))


class CAData(msgspec.Struct, frozen=True):
    """A Secret's data as a model keeping the CA keys would hold it."""

    tls_ca: bytes | None = msgspec.field(default=None, name="tls.ca")
    ca_crt: bytes | None = msgspec.field(default=None, name="ca.crt")


@pytest.mark.parametrize(
    ("data", "found"),
    [
        (CAData(ca_crt=b"-----BEGIN CERTIFICATE-----\nB\n"), "B"),
        (CAData(tls_ca=b"-----BEGIN CERTIFICATE-----\nA\n", ca_crt=b"x"), "A"),  # first
    ],
)
def test_a_ca_bundle_is_read_by_its_kubernetes_key_names(data: CAData, found: str) -> None:
    """The keys are found by the names the model gives them: a model that keeps
    ``tls.ca`` and ``ca.crt`` has them read, ``tls.ca`` first (Traefik's order)."""
    s = objects.Secret(metadata=objects.ObjectMeta(name="ca", namespace="default"), data=data)  # type: ignore[arg-type]
    bundle = ca_bundle({("default", "ca"): s}, ("default", "ca"))
    assert bundle == f"-----BEGIN CERTIFICATE-----\n{found}\n"
    bad = objects.Secret(data=CAData(ca_crt=b"/etc/ssl/ca.pem"))  # type: ignore[arg-type]
    with pytest.raises(SecretError, match=r"secret default/ca: ca\.crt is not PEM certificates"):
        ca_bundle({("default", "ca"): bad}, ("default", "ca"))
