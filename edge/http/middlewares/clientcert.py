"""passTLSClientCert: the TLS client's certificate, to the upstream, as Traefik v3
writes it (pkg/middlewares/passtlsclientcert).

On a request whose connection terminated TLS with a client certificate:

- ``pem``: ``X-Forwarded-Tls-Client-Cert`` holds each certificate's DER in base64
  (its PEM without the armour lines and line breaks), certificates joined by ``,``;
- ``info``: ``X-Forwarded-Tls-Client-Cert-Info`` holds, per certificate (joined by
  ``,``), the fields selected, joined by ``;``, each ``Key="value"`` (a field with
  nothing to say left out): ``Subject`` and ``Issuer`` (``DC``, ``C``, ``ST``,
  ``L``, ``O``, ``OU`` for the subject, ``SN``, ``CN``, each ``X=value`` joined by
  ``,``; Go's ``pkix.Name``: every C, ST, L, O, OU in order, the last serialNumber
  and CN only), ``SerialNumber`` (decimal), ``NB`` and ``NA`` (Unix seconds),
  ``SAN`` (DNS names, e-mail addresses, IP addresses, URIs, in that order); the
  whole query-escaped as Go's ``url.QueryEscape`` does.

Without a certificate nothing is set (an untrusted client's own headers of those
names never reach the upstream: :mod:`edge.http.codec.forward` drops them).

The chain is what the connection offers (``Forward.client_certs``: on Python
before 3.13 through CPython's private ``get_unverified_chain``, else the leaf
alone, where Traefik passes every certificate the client sent). A header with
nothing in it is not sent (Traefik sends it empty).

Cost: both values are made once per certificate chain (its DER bytes the key),
kept for the next requests of that client, at most :data:`KEPT` chains per
middleware, the least recently used dropped first.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
from collections import OrderedDict
from urllib.parse import quote_plus

from cryptography import x509
from cryptography.x509.oid import NameOID

from edge.config.dynamic import (
    TLSClientCertificateInfo,
    TLSClientCertificateIssuerDNInfo,
    TLSClientCertificateSubjectDNInfo,
)
from edge.http.middlewares import Answer, Forward, Middleware

__all__ = ["PassTLSClientCert", "cert_info", "cert_value", "info_value"]

log = logging.getLogger("edge.middlewares")

CERT_HEADER = b"X-Forwarded-Tls-Client-Cert"
INFO_HEADER = b"X-Forwarded-Tls-Client-Cert-Info"
KEPT = 1024
"""Certificate chains whose header values a middleware keeps made."""

_DN = TLSClientCertificateSubjectDNInfo | TLSClientCertificateIssuerDNInfo


class PassTLSClientCert(Middleware):
    """Sets the client certificate headers (module doc)."""

    __slots__ = ("info", "kept", "pem")

    def __init__(self, name: str, pem: bool, info: TLSClientCertificateInfo | None) -> None:
        super().__init__(name)
        self.pem = pem
        self.info = info
        self.kept: OrderedDict[tuple[bytes, ...], tuple[tuple[bytes, bytes], ...]] = OrderedDict()

    def request(self, fwd: Forward) -> Answer | None:
        if not self.pem and self.info is None:
            return None
        chain = tuple(fwd.client_certs())
        if not chain:
            return None
        kept = self.kept
        headers = kept.get(chain)
        if headers is None:
            headers = self.headers(chain)
            if len(kept) >= KEPT:
                kept.popitem(last=False)
            kept[chain] = headers
        else:
            kept.move_to_end(chain)
        for name, value in headers:
            fwd.set_header(name, value)
        return None

    def headers(self, chain: tuple[bytes, ...]) -> tuple[tuple[bytes, bytes], ...]:
        """The headers for a client's chain (DER, leaf first), made in full."""
        out = []
        if self.pem:
            out.append((CERT_HEADER, cert_value(chain)))
        if self.info is not None:
            try:
                value = info_value(chain, self.info)
            except Exception as exc:  # cryptography refuses what the handshake took
                log.warning("middleware %s: client certificate not read: %s", self.name, exc)
            else:
                if value:
                    out.append((INFO_HEADER, value))
        return tuple(out)


def cert_value(chain: tuple[bytes, ...] | list[bytes]) -> bytes:
    """``X-Forwarded-Tls-Client-Cert``: each DER in base64, joined by ``,``."""
    return b",".join(base64.b64encode(der) for der in chain)


def info_value(chain: tuple[bytes, ...] | list[bytes], info: TLSClientCertificateInfo) -> bytes:
    """``X-Forwarded-Tls-Client-Cert-Info`` for ``chain``, query-escaped."""
    text = ",".join(cert_info(x509.load_der_x509_certificate(der), info) for der in chain)
    return quote_plus(text, safe="").encode("ascii")


def cert_info(cert: x509.Certificate, info: TLSClientCertificateInfo) -> str:
    """One certificate's part of the info header, before escaping."""
    values = []
    if info.subject is not None:
        subject = _dn(cert.subject, info.subject)
        if subject:
            values.append(f'Subject="{subject}"')
    if info.issuer is not None:
        issuer = _dn(cert.issuer, info.issuer)
        if issuer:
            values.append(f'Issuer="{issuer}"')
    if info.serial_number:
        values.append(f'SerialNumber="{cert.serial_number}"')
    if info.not_before:
        values.append(f'NB="{_unix(cert.not_valid_before_utc.timestamp())}"')
    if info.not_after:
        values.append(f'NA="{_unix(cert.not_valid_after_utc.timestamp())}"')
    if info.sans:
        sans = _sans(cert)
        if sans:
            values.append(f'SAN="{",".join(sans)}"')
    return ";".join(values)


def _unix(timestamp: float) -> int:
    """Go's ``uint64(t.Unix())``: seconds, a date before 1970 wrapped as Go wraps it."""
    return int(timestamp // 1) % (1 << 64)


def _dn(name: x509.Name, options: _DN) -> str:
    """A name's parts ``options`` selects, as Traefik writes them from Go's pkix.Name."""
    dc: list[str] = []
    found: dict[x509.ObjectIdentifier, list[str]] = {}
    for rdn in name.rdns:
        for attr in rdn:
            value = attr.value
            if attr.oid == NameOID.DOMAIN_COMPONENT:
                dc.append(value if isinstance(value, str) else value.decode("latin-1"))
            elif isinstance(value, str):
                found.setdefault(attr.oid, []).append(value)
    parts: list[str] = []
    if options.domain_component:
        parts += (f"DC={v}" for v in dc)  # written even when empty, as Traefik does
    selected = [
        (options.country, NameOID.COUNTRY_NAME, "C", False),
        (options.province, NameOID.STATE_OR_PROVINCE_NAME, "ST", False),
        (options.locality, NameOID.LOCALITY_NAME, "L", False),
        (options.organization, NameOID.ORGANIZATION_NAME, "O", False),
        (
            getattr(options, "organizational_unit", False),  # the subject's only
            NameOID.ORGANIZATIONAL_UNIT_NAME,
            "OU",
            False,
        ),
        (options.serial_number, NameOID.SERIAL_NUMBER, "SN", True),
        (options.common_name, NameOID.COMMON_NAME, "CN", True),
    ]
    for wanted, oid, key, last_only in selected:
        if not wanted:
            continue
        values = found.get(oid, [])
        if last_only:
            values = values[-1:]  # pkix.Name keeps the last one
        parts += (f"{key}={v}" for v in values if v)
    return ",".join(parts)


def _sans(cert: x509.Certificate) -> list[str]:
    """The DNS names, e-mail addresses, IP addresses and URIs of the SAN extension."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    san = ext.value
    ips = []
    for ip in san.get_values_for_type(x509.IPAddress):
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # Go prints a 16-byte IPv4 address as IPv4
        ips.append(str(ip))
    return [
        *san.get_values_for_type(x509.DNSName),
        *san.get_values_for_type(x509.RFC822Name),
        *ips,
        *san.get_values_for_type(x509.UniformResourceIdentifier),
    ]
