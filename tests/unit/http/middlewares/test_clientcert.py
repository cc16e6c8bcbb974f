"""passTLSClientCert's header values (edge.http.middlewares.clientcert), against
Traefik's own test table (pkg/middlewares/passtlsclientcert): its certificates in,
the same header values out; and the values kept per certificate chain."""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote_plus

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge.config.dynamic import Middleware as MiddlewareConfig
from edge.config.dynamic import PassTLSClientCert as PassTLSClientCertConfig
from edge.config.dynamic import TLSClientCertificateInfo
from edge.http.middlewares import Forward
from edge.http.middlewares.clientcert import (
    CERT_HEADER,
    INFO_HEADER,
    PassTLSClientCert,
    cert_info,
    cert_value,
    info_value,
)

# Traefik's test certificates (pass_tls_client_cert_test.go): the same inputs.
MINIMAL_CHEESE = b"""\
-----BEGIN CERTIFICATE-----
MIIEQDCCAygCFFRY0OBk/L5Se0IZRj3CMljawL2UMA0GCSqGSIb3DQEBCwUAMIIB
hDETMBEGCgmSJomT8ixkARkWA29yZzEWMBQGCgmSJomT8ixkARkWBmNoZWVzZTEP
MA0GA1UECgwGQ2hlZXNlMREwDwYDVQQKDAhDaGVlc2UgMjEfMB0GA1UECwwWU2lt
cGxlIFNpZ25pbmcgU2VjdGlvbjEhMB8GA1UECwwYU2ltcGxlIFNpZ25pbmcgU2Vj
dGlvbiAyMRowGAYDVQQDDBFTaW1wbGUgU2lnbmluZyBDQTEcMBoGA1UEAwwTU2lt
cGxlIFNpZ25pbmcgQ0EgMjELMAkGA1UEBhMCRlIxCzAJBgNVBAYTAlVTMREwDwYD
VQQHDAhUT1VMT1VTRTENMAsGA1UEBwwETFlPTjEWMBQGA1UECAwNU2lnbmluZyBT
dGF0ZTEYMBYGA1UECAwPU2lnbmluZyBTdGF0ZSAyMSEwHwYJKoZIhvcNAQkBFhJz
aW1wbGVAc2lnbmluZy5jb20xIjAgBgkqhkiG9w0BCQEWE3NpbXBsZTJAc2lnbmlu
Zy5jb20wHhcNMTgxMjA2MTExMDM2WhcNMjEwOTI1MTExMDM2WjAzMQswCQYDVQQG
EwJGUjETMBEGA1UECAwKU29tZS1TdGF0ZTEPMA0GA1UECgwGQ2hlZXNlMIIBIjAN
BgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAskX/bUtwFo1gF2BTPNaNcTUMaRFu
FMZozK8IgLjccZ4kZ0R9oFO6Yp8Zl/IvPaf7tE26PI7XP7eHriUdhnQzX7iioDd0
RZa68waIhAGc+xPzRFrP3b3yj3S2a9Rve3c0K+SCV+EtKAwsxMqQDhoo9PcBfo5B
RHfht07uD5MncUcGirwN+/pxHV5xzAGPcc7On0/5L7bq/G+63nhu78zw9XyuLaHC
PM5VbOUvpyIESJHbMMzTdFGL8ob9VKO+Kr1kVGdEA9i8FLGl3xz/GBKuW/JD0xyW
DrU29mri5vYWHmkuv7ZWHGXnpXjTtPHwveE9/0/ArnmpMyR9JtqFr1oEvQIDAQAB
MA0GCSqGSIb3DQEBCwUAA4IBAQBHta+NWXI08UHeOkGzOTGRiWXsOH2dqdX6gTe9
xF1AIjyoQ0gvpoGVvlnChSzmlUj+vnx/nOYGIt1poE3hZA3ZHZD/awsvGyp3GwWD
IfXrEViSCIyF+8tNNKYyUcEO3xdAsAUGgfUwwF/mZ6MBV5+A/ZEEILlTq8zFt9dV
vdKzIt7fZYxYBBHFSarl1x8pDgWXlf3hAufevGJXip9xGYmznF0T5cq1RbWJ4be3
/9K7yuWhuBYC3sbTbCneHBa91M82za+PIISc1ygCYtWSBoZKSAqLk0rkZpHaekDP
WqeUSNGYV//RunTeuRDAf5OxehERb1srzBXhRZ3cZdzXbgR/
-----END CERTIFICATE-----
"""

COMPLETE_CHEESE = b"""\
-----BEGIN CERTIFICATE-----
MIIGWjCCBUKgAwIBAgIBATANBgkqhkiG9w0BAQUFADCCAYQxEzARBgoJkiaJk/Is
ZAEZFgNvcmcxFjAUBgoJkiaJk/IsZAEZFgZjaGVlc2UxDzANBgNVBAoMBkNoZWVz
ZTERMA8GA1UECgwIQ2hlZXNlIDIxHzAdBgNVBAsMFlNpbXBsZSBTaWduaW5nIFNl
Y3Rpb24xITAfBgNVBAsMGFNpbXBsZSBTaWduaW5nIFNlY3Rpb24gMjEaMBgGA1UE
AwwRU2ltcGxlIFNpZ25pbmcgQ0ExHDAaBgNVBAMME1NpbXBsZSBTaWduaW5nIENB
IDIxCzAJBgNVBAYTAkZSMQswCQYDVQQGEwJVUzERMA8GA1UEBwwIVE9VTE9VU0Ux
DTALBgNVBAcMBExZT04xFjAUBgNVBAgMDVNpZ25pbmcgU3RhdGUxGDAWBgNVBAgM
D1NpZ25pbmcgU3RhdGUgMjEhMB8GCSqGSIb3DQEJARYSc2ltcGxlQHNpZ25pbmcu
Y29tMSIwIAYJKoZIhvcNAQkBFhNzaW1wbGUyQHNpZ25pbmcuY29tMB4XDTE4MTIw
NjExMTAxNloXDTIwMTIwNTExMTAxNlowggF2MRMwEQYKCZImiZPyLGQBGRYDb3Jn
MRYwFAYKCZImiZPyLGQBGRYGY2hlZXNlMQ8wDQYDVQQKDAZDaGVlc2UxETAPBgNV
BAoMCENoZWVzZSAyMR8wHQYDVQQLDBZTaW1wbGUgU2lnbmluZyBTZWN0aW9uMSEw
HwYDVQQLDBhTaW1wbGUgU2lnbmluZyBTZWN0aW9uIDIxFTATBgNVBAMMDCouY2hl
ZXNlLm9yZzEVMBMGA1UEAwwMKi5jaGVlc2UuY29tMQswCQYDVQQGEwJGUjELMAkG
A1UEBhMCVVMxETAPBgNVBAcMCFRPVUxPVVNFMQ0wCwYDVQQHDARMWU9OMRkwFwYD
VQQIDBBDaGVlc2Ugb3JnIHN0YXRlMRkwFwYDVQQIDBBDaGVlc2UgY29tIHN0YXRl
MR4wHAYJKoZIhvcNAQkBFg9jZXJ0QGNoZWVzZS5vcmcxHzAdBgkqhkiG9w0BCQEW
EGNlcnRAc2NoZWVzZS5jb20wggEiMA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIB
AQDed/qNA3AwOd1RG8xg26laE7Gv/izGOJuICg+O2RuhHa8NZuQTW7xdNpLXXtD6
iCnTeOGB3piyqSI/v4qvEpJj1KnD8uR+0tyixTkceuvXEnBjLkFH4PAI6Ny+CQHs
KAmvNdd5nFA10Wvlh3s09tIxZR0YQmlsBBGD/kSukJItC3U5V2LmFy9HK8dT3RAt
yeMGE9K5umMuPH2Da9aJycydTb+f6KN72siZK7pm1o74QUGgydBeyBGkVUqTg4dj
BGNBnPtoBGfCcS/yZR0CXRXbLNkEaYXCfQ3qO6yF+NSPD8VwskXh7LJUC+n3grSb
Gy25JdSryo9bRD4V3bh/t+75AgMBAAGjgeAwgd0wDgYDVR0PAQH/BAQDAgWgMAkG
A1UdEwQCMAAwHQYDVR0lBBYwFAYIKwYBBQUHAwEGCCsGAQUFBwMCMB0GA1UdDgQW
BBSUunN4oof7WCgoz5g7wkVwFm4pLzAfBgNVHSMEGDAWgBQeUqLoVNU369WoHeTC
BB034vdwAzBhBgNVHREEWjBYggwqLmNoZWVzZS5vcmeCDCouY2hlZXNlLm5ldIIM
Ki5jaGVlc2UuY29thwQKAAEAhwQKAAECgQ90ZXN0QGNoZWVzZS5vcmeBD3Rlc3RA
Y2hlZXNlLm5ldDANBgkqhkiG9w0BAQUFAAOCAQEAdmsFsA40EbGDmZHcrhviCBWL
FrKbJxwCrLXfG9DQdaQrLFxl7Zmr983+OD/DmiIxG6yMHML5XdR1ei5yx4WpBK+f
KszTlnXwjsfGdkisRaS5Ah4vwBXEBwiSyydQZ6HIBcU6s6ZIvuvVWauiG5UwcRNb
CppzO2DMENBqx+XXiy/5Lpjy/4EUJAnjS1VXCRoidPH2QBMxQ4lxCpYaBYIfgzqH
mxcl71pV8i3NDU3kgVi2440JYpoMveTlXPCV2svHNCw0X238YHsSW4b93yGJO0gI
ML9n/4zmm1PMhzZHcEA72ZAq0tKCxpz10djg5v2qL5V+Oaz8TtTOZbPsxpiKMQ==
-----END CERTIFICATE-----
"""

MINIMAL = b"""\
-----BEGIN CERTIFICATE-----
MIIDGTCCAgECCQCqLd75YLi2kDANBgkqhkiG9w0BAQsFADBYMQswCQYDVQQGEwJG
UjETMBEGA1UECAwKU29tZS1TdGF0ZTERMA8GA1UEBwwIVG91bG91c2UxITAfBgNV
BAoMGEludGVybmV0IFdpZGdpdHMgUHR5IEx0ZDAeFw0xODA3MTgwODI4MTZaFw0x
ODA4MTcwODI4MTZaMEUxCzAJBgNVBAYTAkZSMRMwEQYDVQQIDApTb21lLVN0YXRl
MSEwHwYDVQQKDBhJbnRlcm5ldCBXaWRnaXRzIFB0eSBMdGQwggEiMA0GCSqGSIb3
DQEBAQUAA4IBDwAwggEKAoIBAQC/+frDMMTLQyXG34F68BPhQq0kzK4LIq9Y0/gl
FjySZNn1C0QDWA1ubVCAcA6yY204I9cxcQDPNrhC7JlS5QA8Y5rhIBrqQlzZizAi
Rj3NTrRjtGUtOScnHuJaWjLy03DWD+aMwb7q718xt5SEABmmUvLwQK+EjW2MeDwj
y8/UEIpvrRDmdhGaqv7IFpIDkcIF7FowJ/hwDvx3PMc+z/JWK0ovzpvgbx69AVbw
ZxCimeha65rOqVi+lEetD26le+WnOdYsdJ2IkmpPNTXGdfb15xuAc+gFXfMCh7Iw
3Ynl6dZtZM/Ok2kiA7/OsmVnRKkWrtBfGYkI9HcNGb3zrk6nAgMBAAEwDQYJKoZI
hvcNAQELBQADggEBAC/R+Yvhh1VUhcbK49olWsk/JKqfS3VIDQYZg1Eo+JCPbwgS
I1BSYVfMcGzuJTX6ua3m/AHzGF3Tap4GhF4tX12jeIx4R4utnjj7/YKkTvuEM2f4
xT56YqI7zalGScIB0iMeyNz1QcimRl+M/49au8ow9hNX8C2tcA2cwd/9OIj/6T8q
SBRHc6ojvbqZSJCO0jziGDT1L3D+EDgTjED4nd77v/NRdP+egb0q3P0s4dnQ/5AV
aQlQADUn61j3ScbGJ4NSeZFFvsl38jeRi/MEzp0bGgNBcPj6JHi7qbbauZcZfQ05
jECvgAY7Nfd9mZ1KtyNaW31is+kag7NsvjxU/kM=
-----END CERTIFICATE-----
"""

SUBJECT_ALL = {
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
ISSUER_ALL = {
    k: True
    for k in (
        "country",
        "province",
        "locality",
        "organization",
        "commonName",
        "serialNumber",
        "domainComponent",
    )
}
ALL = {
    "notAfter": True,
    "notBefore": True,
    "sans": True,
    "serialNumber": True,
    "subject": SUBJECT_ALL,
    "issuer": ISSUER_ALL,
}
MINIMAL_CHEESE_ALL = ";".join(
    (
        'Subject="C=FR,ST=Some-State,O=Cheese"',
        'Issuer="DC=org,DC=cheese,C=FR,C=US,ST=Signing State,ST=Signing State 2,L=TOULOUSE,'
        'L=LYON,O=Cheese,O=Cheese 2,CN=Simple Signing CA 2"',
        'SerialNumber="481535886039632329873080491016862977516759989652"',
        'NB="1544094636"',
        'NA="1632568236"',
    )
)
COMPLETE_CHEESE_ALL = ";".join(
    (
        'Subject="DC=org,DC=cheese,C=FR,C=US,ST=Cheese org state,ST=Cheese com state,'
        "L=TOULOUSE,L=LYON,O=Cheese,O=Cheese 2,OU=Simple Signing Section,"
        'OU=Simple Signing Section 2,CN=*.cheese.com"',
        'Issuer="DC=org,DC=cheese,C=FR,C=US,ST=Signing State,ST=Signing State 2,L=TOULOUSE,'
        'L=LYON,O=Cheese,O=Cheese 2,CN=Simple Signing CA 2"',
        'SerialNumber="1"',
        'NB="1544094616"',
        'NA="1607166616"',
        'SAN="*.cheese.org,*.cheese.net,*.cheese.com,test@cheese.org,test@cheese.net,'
        '10.0.1.0,10.0.1.2"',
    )
)


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def info(doc: dict) -> TLSClientCertificateInfo:
    return msgspec.convert(doc, TLSClientCertificateInfo)


def sanitized(pem: bytes) -> bytes:
    """Traefik's sanitize: the PEM without its armour lines and line breaks."""
    return re.sub(rb"-----(BEGIN|END) CERTIFICATE-----|\n", b"", pem)


@pytest.mark.parametrize(
    ("pems", "expected"),
    [
        ([MINIMAL_CHEESE], [MINIMAL_CHEESE]),
        ([MINIMAL_CHEESE, COMPLETE_CHEESE], [MINIMAL_CHEESE, COMPLETE_CHEESE]),
        ([MINIMAL, MINIMAL_CHEESE], [MINIMAL, MINIMAL_CHEESE]),
    ],
)
def test_pem_is_each_certificate_sanitized_joined_by_commas(pems, expected):
    assert cert_value([der(p) for p in pems]) == b",".join(sanitized(p) for p in expected)


@pytest.mark.parametrize(
    ("pems", "doc", "expected"),
    [
        ([MINIMAL_CHEESE], ALL, MINIMAL_CHEESE_ALL),
        (
            [MINIMAL_CHEESE],
            {"notAfter": True, "sans": True, "subject": {"organization": True},
             "issuer": {"country": True}},
            'Subject="O=Cheese";Issuer="C=FR,C=US";NA="1632568236"',
        ),
        (  # organizationalUnit asked, and absent from the certificate
            [MINIMAL_CHEESE],
            {"notAfter": True, "sans": True,
             "subject": {"organization": True, "organizationalUnit": True},
             "issuer": {"country": True}},
            'Subject="O=Cheese";Issuer="C=FR,C=US";NA="1632568236"',
        ),
        ([COMPLETE_CHEESE], ALL, COMPLETE_CHEESE_ALL),
        ([MINIMAL_CHEESE, COMPLETE_CHEESE], ALL, MINIMAL_CHEESE_ALL + "," + COMPLETE_CHEESE_ALL),
        ([MINIMAL_CHEESE], {"subject": {}}, ""),  # nothing selected: nothing to say
    ],
)  # fmt: skip
def test_info_as_traefik_formats_it(pems, doc, expected):
    value = info_value([der(p) for p in pems], info(doc))
    assert unquote_plus(value.decode()) == expected
    # Go's url.QueryEscape: only letters, digits and -_.~ as they are, a space as +.
    assert re.fullmatch(rb"[A-Za-z0-9\-_.~+%]*", value)
    if expected:
        assert b"+" in value or " " not in expected


def test_info_escapes_as_go_query_escape():
    value = info_value([der(MINIMAL_CHEESE)], info({"subject": {"province": True}}))
    assert value == b"Subject%3D%22ST%3DSome-State%22"


def _self_signed(sans: list[x509.GeneralName], before: datetime) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "first"),
            x509.NameAttribute(NameOID.COMMON_NAME, "last"),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, "sn-1"),
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "example"),
        ]
    )
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(before)
        .not_valid_after(before + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(key, hashes.SHA256())
    )


def test_sans_in_go_order_and_ipv4_mapped_as_ipv4():
    """Go's getSANs order: DNS names, e-mail addresses, IPs, URIs (whatever the order
    in the certificate); a 16-byte IPv4-mapped address prints as IPv4, as net.IP does."""
    cert = _self_signed(
        [
            x509.UniformResourceIdentifier("spiffe://example.org/a"),
            x509.IPAddress(ipaddress.ip_address("::ffff:10.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("2001:db8::1")),
            x509.RFC822Name("a@example.org"),
            x509.DNSName("a.example.org"),
        ],
        datetime(2020, 1, 1, tzinfo=UTC),
    )
    text = cert_info(cert, info({"sans": True, "notBefore": True, "serialNumber": True}))
    assert text == (
        'SerialNumber="7";NB="1577836800";'
        'SAN="a.example.org,a@example.org,10.0.0.1,2001:db8::1,spiffe://example.org/a"'
    )


def test_last_common_name_and_serial_number_only_as_pkix_name_keeps_them():
    cert = _self_signed([x509.DNSName("a")], datetime(2020, 1, 1, tzinfo=UTC))
    text = cert_info(cert, info({"subject": SUBJECT_ALL, "issuer": {"commonName": True}}))
    assert text == 'Subject="DC=example,SN=sn-1,CN=last";Issuer="CN=last"'


def test_a_date_before_1970_wraps_as_go_uint64():
    cert = _self_signed([x509.DNSName("a")], datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC))
    assert cert_info(cert, info({"notBefore": True})) == f'NB="{(1 << 64) - 1}"'


def test_headers_pem_and_info_made_once_per_chain():
    middleware = PassTLSClientCert("m", True, info({"subject": {"organization": True}}))
    chain = (der(MINIMAL_CHEESE),)
    headers = middleware.headers(chain)
    assert headers == (
        (CERT_HEADER, sanitized(MINIMAL_CHEESE)),
        (INFO_HEADER, b"Subject%3D%22O%3DCheese%22"),
    )


def test_without_a_certificate_nothing_is_set():
    """No TLS (a Forward with no transport): no header, as Traefik leaves them."""
    middleware = PassTLSClientCert("m", True, info(ALL))
    fwd = Forward("a", b"/", b"")
    assert middleware.request(fwd) is None
    assert fwd.headers is None
    assert middleware.kept == {}


def test_model_keys_are_traefiks():
    config = msgspec.convert(
        {
            "passTLSClientCert": {
                "pem": True,
                "info": {"notAfter": True, "subject": {"commonName": True}},
            }
        },
        MiddlewareConfig,
    )
    assert config.kind == "passTLSClientCert"
    assert isinstance(config.pass_tls_client_cert, PassTLSClientCertConfig)
    with pytest.raises(msgspec.ValidationError, match="organizationalUnit"):
        msgspec.convert(
            {"passTLSClientCert": {"info": {"issuer": {"organizationalUnit": True}}}},
            MiddlewareConfig,
        )
