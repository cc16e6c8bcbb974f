"""Go's TLS names, as Traefik's configuration writes them, in Python's ``ssl`` and OpenSSL.

Owns the one table of each: TLS versions (``VersionTLS12`` -> ``ssl.TLSVersion``) and
cipher suites (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> OpenSSL's
``ECDHE-RSA-AES128-GCM-SHA256``), which both sides of TLS read: the TLS options
edge terminates with (:mod:`edge.tls.certs`) and the serversTransports it dials
servers with (:func:`edge.config.runtime.client_tls_context`). Pure tables and
functions over them; nothing here builds a context.

Go configures the suites of TLS 1.0-1.2 only: its TLS 1.3 suites are always on,
and a name of one in ``cipherSuites`` changes nothing. Python's ``ssl`` cannot
choose TLS 1.3 suites either (``set_ciphers`` is OpenSSL's TLS 1.2 list), so those
names, and ``TLS_FALLBACK_SCSV`` (a signal, not a suite), are accepted and not
applied, as Go accepts them.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable

__all__ = [
    "CIPHER_SUITES",
    "IGNORED_SUITES",
    "LEGACY_CIPHERS",
    "VERSIONS",
    "openssl_suites",
]

VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}
"""Go's version names (Traefik's ``minVersion`` / ``maxVersion``) -> Python's."""

LEGACY_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:ECDHE+AES"
"""The cipher list where TLS 1.0/1.1 are allowed and ``cipherSuites`` names none: Go's
default kinds (ECDHE; AES-GCM, ChaCha20-Poly1305, AES-CBC, which TLS 1.0/1.1 need)."""

# Go's cipher suite names (Traefik's list) -> OpenSSL's, for TLS 1.0-1.2.
CIPHER_SUITES = {
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# Accepted and not applied (Go does not apply them either).
IGNORED_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_FALLBACK_SCSV",
    }
)


def openssl_suites(suites: Iterable[str]) -> list[str]:
    """OpenSSL's names of the TLS 1.0-1.2 suites among Go's ``suites``, in their order,
    each once; an empty list when they name none (only TLS 1.3 ones, or nothing).
    ValueError names the first name Go does not know."""
    wanted: dict[str, None] = {}
    for suite in suites:
        openssl = CIPHER_SUITES.get(suite)
        if openssl is not None:
            wanted[openssl] = None
        elif suite not in IGNORED_SUITES:
            raise ValueError(f"unknown cipher suite {suite!r}")
    return list(wanted)
