"""passTLSClientCert through a real TLS entrypoint with clientAuth, under both codecs,
with curl presenting a client certificate (and its intermediate) and ``edge
whoami`` echoing what it received: X-Forwarded-Tls-Client-Cert holds the chain the
client sent, X-Forwarded-Tls-Client-Cert-Info what ``info`` selects, as Traefik
formats them; without a certificate no such header reaches the upstream, a
client's own included."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
from urllib.parse import unquote_plus

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.fixtures.tls.pki import PKI
from tests.harness import Edge, need
from tests.integration.peers import certificates


def _name(*attrs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs])


def client_chain(pki: PKI) -> tuple[x509.Certificate, x509.Certificate, object]:
    """(leaf, intermediate, leaf key): a client certificate issued by an intermediate
    CA the test CA signed, with a subject and SANs worth formatting."""
    now = datetime.datetime.now(datetime.UTC)
    mid_key = ec.generate_private_key(ec.SECP256R1())
    mid_name = _name(
        (NameOID.ORGANIZATION_NAME, "Edge"), (NameOID.COMMON_NAME, "edge intermediate")
    )
    intermediate = (
        x509.CertificateBuilder()
        .subject_name(mid_name)
        .issuer_name(pki.cert.subject)
        .public_key(mid_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(pki.key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(
            _name(
                (NameOID.DOMAIN_COMPONENT, "test"),
                (NameOID.COUNTRY_NAME, "FR"),
                (NameOID.ORGANIZATION_NAME, "Cheese"),
                (NameOID.ORGANIZATIONAL_UNIT_NAME, "Cellar"),
                (NameOID.COMMON_NAME, "client one"),
            )
        )
        .issuer_name(mid_name)
        .public_key(key.public_key())
        .serial_number(123456789)
        .not_valid_before(datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.RFC822Name("one@client.test"), x509.DNSName("one.client.test")]
            ),
            critical=False,
        )
        .sign(mid_key, hashes.SHA256())
    )
    return leaf, intermediate, key


@pytest.fixture(scope="module")
def setup(tmp_path_factory, pki, certs):
    folder = tmp_path_factory.mktemp("client-cert")
    leaf, intermediate, key = client_chain(pki)
    crt, key_file = folder / "client.crt", folder / "client.key"
    crt.write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + intermediate.public_bytes(serialization.Encoding.PEM)
    )
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {"leaf": leaf, "intermediate": intermediate, "crt": str(crt), "key": str(key_file)}


@pytest.fixture(scope="module", params=["httptools", "h11"])
def edge(request, tmp_path_factory, certs, whoami):
    subject = {
        k: True
        for k in (
            "country",
            "province",
            "locality",
            "organization",
            "organizationalUnit",
            "commonName",
            "serialNumber",
            "domainComponent",
        )
    }
    middlewares = {
        "pass": {
            "passTLSClientCert": {
                "pem": True,
                "info": {
                    "notBefore": True,
                    "sans": True,
                    "serialNumber": True,
                    "subject": subject,
                    "issuer": {"commonName": True, "organization": True},
                },
            }
        }
    }
    dyn = {
        "http": {
            "routers": {
                "mtls": {
                    "rule": "Host(`a.test`)",
                    "service": "who",
                    "middlewares": ["pass"],
                    "tls": {"options": "mtls"},
                },
                "open": {
                    "rule": "Host(`echo.test`)",
                    "service": "who",
                    "middlewares": ["pass"],
                    "tls": {},
                },
            },
            "services": {"who": {"loadBalancer": {"servers": [{"url": whoami.url}]}}},
            "middlewares": middlewares,
        },
        "tls": {
            "certificates": certificates(certs, "a.test", "echo.test"),
            "options": {
                "mtls": {
                    "clientAuth": {
                        "caFiles": [certs["ca"]],
                        "clientAuthType": "RequireAndVerifyClientCert",
                    }
                }
            },
        },
    }
    tmp = tmp_path_factory.mktemp(f"client-cert-{request.param}")
    e = Edge(tmp, dyn, parser=request.param)
    yield e
    e.stop()


def curl(edge: Edge, certs: dict, host: str, *args: str) -> dict:
    """The headers whoami received, through curl over TLS to ``host``."""
    done = subprocess.run(
        [
            need("curl"),
            "-sS",
            "--max-time",
            "20",
            "--resolve",
            f"{host}:{edge.port}:127.0.0.1",
            "--cacert",
            certs["ca"],
            *args,
            f"https://{host}:{edge.port}/x",
        ],
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["headers"]


def b64(cert: x509.Certificate) -> str:
    return base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()


def test_certificate_chain_and_info_go_upstream(edge, certs, setup):
    headers = curl(edge, certs, "a.test", "--cert", setup["crt"], "--key", setup["key"])
    leaf, intermediate = setup["leaf"], setup["intermediate"]
    # The chain as the client sent it, leaf first, as Traefik's PeerCertificates.
    assert headers["X-Forwarded-Tls-Client-Cert"] == [f"{b64(leaf)},{b64(intermediate)}"]
    info = headers["X-Forwarded-Tls-Client-Cert-Info"]
    assert len(info) == 1
    assert " " not in info[0] and "=" not in info[0]  # query-escaped, as Go's QueryEscape
    nb = int(leaf.not_valid_before_utc.timestamp())
    mid_nb = int(intermediate.not_valid_before_utc.timestamp())
    assert unquote_plus(info[0]) == (
        'Subject="DC=test,C=FR,O=Cheese,OU=Cellar,CN=client one";'
        'Issuer="O=Edge,CN=edge intermediate";SerialNumber="123456789";'
        f'NB="{nb}";SAN="one.client.test,one@client.test",'
        f'Subject="O=Edge,CN=edge intermediate";Issuer="CN=edge test CA";'
        f'SerialNumber="{intermediate.serial_number}";NB="{mid_nb}"'
    )


def test_no_certificate_no_header_not_even_the_clients(edge, certs):
    headers = curl(
        edge,
        certs,
        "echo.test",
        "-H",
        "X-Forwarded-Tls-Client-Cert: forged",
        "-H",
        "X-Forwarded-Tls-Client-Cert-Info: forged",
    )
    assert "X-Forwarded-Tls-Client-Cert" not in headers
    assert "X-Forwarded-Tls-Client-Cert-Info" not in headers


def test_a_client_certificate_replaces_a_forged_header(edge, certs, setup):
    headers = curl(
        edge,
        certs,
        "a.test",
        "--cert",
        setup["crt"],
        "--key",
        setup["key"],
        "-H",
        "X-Forwarded-Tls-Client-Cert: forged",
    )
    assert headers["X-Forwarded-Tls-Client-Cert"][0].startswith(b64(setup["leaf"]))
    assert "forged" not in json.dumps(headers)
