"""TLS in validation (edge.config.runtime.tls): relative certificate, key, CA and users
file paths, read from the working directory as Traefik reads them, and said so."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edge.config.dynamic import PeerCertSAN, ServersTransport
from edge.config.runtime import client_tls_context, relative_files
from edge.config.runtime.tls import own_tls, peer_sans_match, transport_tls_context
from edge.errors import ConfigError
from tests.unit.config.documents import conf

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_relative_files_lists_every_relative_path_and_nothing_else() -> None:
    c = conf(
        {
            "http": {
                "middlewares": {
                    "basic": {"basicAuth": {"usersFile": "users"}},
                    "digest": {"digestAuth": {"usersFile": "conf/digest"}},
                    "absolute": {"basicAuth": {"usersFile": "/etc/users"}},
                    "inline": {"basicAuth": {"users": ["u:{SHA}x"]}},
                    "other": {"addPrefix": {"prefix": "/p"}},
                },
                "serversTransports": {
                    "t": {
                        "rootCAs": ["ca.pem", "/etc/ca.pem", PEM],
                        "certificates": [{"certFile": "c.crt", "keyFile": "/k.key"}],
                    }
                },
            },
            "tcp": {"serversTransports": {"u": {"tls": {"rootCAs": ["sub/ca.pem"]}}}},
            "tls": {
                "certificates": [{"certFile": "a.crt", "keyFile": "a.key"}],
                "stores": {
                    "default": {"defaultCertificate": {"certFile": "/d.crt", "keyFile": "d.key"}}
                },
                "options": {"o": {"clientAuth": {"caFiles": ["clients.pem"]}}},
            },
        }
    )
    assert relative_files(c) == [
        ("tls.certificates[0].certFile", "a.crt"),
        ("tls.certificates[0].keyFile", "a.key"),
        ("tls.stores.default.defaultCertificate.keyFile", "d.key"),
        ("tls.options.o.clientAuth.caFiles[0]", "clients.pem"),
        ("http.middlewares.basic.basicAuth.usersFile", "users"),
        ("http.middlewares.digest.digestAuth.usersFile", "conf/digest"),
        ("http.serversTransports.t.rootCAs[0]", "ca.pem"),
        ("http.serversTransports.t.certificates[0].certFile", "c.crt"),
        ("tcp.serversTransports.u.tls.rootCAs[0]", "sub/ca.pem"),
    ]


def test_a_missing_relative_file_says_where_it_was_looked_for(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        client_tls_context(root_cas=["ca.pem"], system_roots=False)
    where = os.path.join(tmp_path, "ca.pem")
    assert info.value.message == (
        f"rootCAs[0] ca.pem: no such file (a relative path, read from the working directory: {where})"
    )


# -- serversTransports: versions, cipher suites, peer SANs --------------------------------


def transport(**fields: object) -> ServersTransport:
    return msgspec.convert(fields, ServersTransport)


def test_versions_and_suites_reach_the_client_context() -> None:
    ctx = transport_tls_context(
        transport(
            minVersion="VersionTLS12",
            maxVersion="VersionTLS12",
            cipherSuites=["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256"],
        ),
        system_roots=False,
    )
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] != "TLSv1.3"]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]


def test_tls13_suites_alone_allow_tls13_alone() -> None:
    ctx = transport_tls_context(
        transport(cipherSuites=["TLS_AES_256_GCM_SHA384"]), system_roots=False
    )
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


def test_tls10_lowers_the_security_level_as_tls_options_do() -> None:
    ctx = transport_tls_context(transport(minVersion="VersionTLS10"), system_roots=False)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1
    assert any(c["name"] == "ECDHE-ECDSA-AES128-SHA" for c in ctx.get_ciphers())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cipherSuites": ["TLS_NOPE"]}, "cipherSuites: unknown cipher suite 'TLS_NOPE'"),
        (
            {"minVersion": "VersionTLS13", "maxVersion": "VersionTLS12"},
            "minVersion VersionTLS13 is above maxVersion VersionTLS12",
        ),
        (
            {"cipherSuites": ["TLS_AES_128_GCM_SHA256"], "maxVersion": "VersionTLS12"},
            "cipherSuites names no TLS 1.0-1.2 suite while maxVersion is VersionTLS12",
        ),
    ],
)
def test_transport_settings_no_handshake_could_honour_are_refused(fields, message) -> None:
    with pytest.raises(msgspec.ValidationError, match=message):
        transport(**fields)


def test_a_suite_this_openssl_lacks_alone_cannot_be_used() -> None:
    with pytest.raises(ConfigError, match="cipherSuites: none is available"):
        transport_tls_context(
            transport(cipherSuites=["TLS_RSA_WITH_RC4_128_SHA"]), system_roots=False
        )


def test_own_tls_is_any_setting_beyond_the_defaults() -> None:
    assert not own_tls(transport(serverName="a.test"))
    for fields in (
        {"minVersion": "VersionTLS13"},
        {"cipherSuites": ["TLS_AES_128_GCM_SHA256"]},
        {"peerCertURI": "spiffe://x"},
        {"peerCertSANs": [{"type": "DNSName", "value": "a.test"}]},
    ):
        assert own_tls(transport(**fields)), fields


def certificate(*names: x509.GeneralName) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "peer")])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


URI, DNS = "URI", "DNSName"


@pytest.mark.parametrize(
    ("sans", "wanted", "match"),
    [
        ([x509.UniformResourceIdentifier("spiffe://td/a")], [(URI, "spiffe://td/a")], True),
        ([x509.UniformResourceIdentifier("spiffe://td/a")], [(URI, "SPIFFE://TD/A")], True),
        ([x509.UniformResourceIdentifier("spiffe://td/a")], [(URI, "spiffe://td/ab")], False),
        ([x509.UniformResourceIdentifier("spiffe://td/a")], [(DNS, "td")], False),
        ([x509.DNSName("*.a.test")], [(DNS, "x.a.test")], True),
        ([x509.DNSName("*.a.test")], [(DNS, "y.x.a.test")], False),  # one label
        ([x509.DNSName("*.a.test")], [(DNS, "a.test")], False),
        ([x509.DNSName("b.test")], [(URI, "spiffe://x"), (DNS, "B.test.")], True),
        ([x509.IPAddress(ipaddress.ip_address("10.0.0.1"))], [(DNS, "10.0.0.1")], True),
        ([x509.DNSName("10.0.0.1")], [(DNS, "10.0.0.1")], False),  # an address: IP SANs
        ([], [(DNS, "peer")], False),  # no SAN: the CN is not read, as in Go
    ],
)
def test_peer_sans_match(sans, wanted, match) -> None:
    pairs = [PeerCertSAN(type=t, value=v) for t, v in wanted]
    assert peer_sans_match(certificate(*sans), pairs) is match
