"""Go's TLS names in OpenSSL's (edge.config.tlsnames): the suites a list names."""

from __future__ import annotations

import pytest

from edge.config.tlsnames import CIPHER_SUITES, openssl_suites


def test_suites_are_openssls_names_in_order_each_once() -> None:
    assert openssl_suites(
        [
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",  # Go's other name of the first
        ]
    ) == ["ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-ECDSA-AES128-GCM-SHA256"]


def test_tls13_suites_and_the_fallback_signal_are_accepted_and_add_nothing() -> None:
    names = ["TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256", "TLS_FALLBACK_SCSV"]
    assert openssl_suites(names) == []
    assert openssl_suites([*names, "TLS_RSA_WITH_AES_128_GCM_SHA256"]) == ["AES128-GCM-SHA256"]


def test_an_unknown_name_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown cipher suite 'ECDHE-RSA-AES128-GCM-SHA256'"):
        openssl_suites(["TLS_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"])


def test_every_go_name_maps_to_an_openssl_name() -> None:
    assert all(name.startswith("TLS_") and "_" not in CIPHER_SUITES[name] for name in CIPHER_SUITES)
