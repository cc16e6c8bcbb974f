"""Certificates by SNI and TLS options: edge.tls.certs.

Handshakes here are real OpenSSL handshakes between two ``ssl.SSLObject``s over
memory BIOs (no sockets): what a client sees is what a client would see.
"""

from __future__ import annotations

import contextlib
import hashlib
import ssl

import msgspec
import pytest

from edge.config.dynamic import Configuration, TLSConfiguration
from edge.config.merge import merge
from edge.tls.certs import DEFAULT_CERT_CN, CertificateError, TLSCertificates, generated_default
from tests.fixtures.tls.pki import PKI


@pytest.fixture(scope="module")
def pki() -> PKI:
    return PKI()


@pytest.fixture(scope="module")
def pairs(pki):
    return {
        "a": pki.issue("a.test", "www.a.test"),
        "b": pki.issue("b.test", kind="rsa"),
        "wild": pki.issue("*.wild.test"),
        "cn": pki.issue("cn.test", san=False),
        "store": pki.issue("store-default.test"),
        "client": pki.issue(cn="client-1", client=True),
    }


def tls(section: dict) -> TLSConfiguration:
    """A merged tls section, as the runtime gets it (the file provider's names)."""
    return merge({"file": msgspec.convert({"tls": section}, Configuration)}).tls


def handshake(
    server: ssl.SSLContext,
    server_name: str | None = None,
    *,
    client: ssl.SSLContext | None = None,
    rounds: int = 10,
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a handshake between ``client`` and ``server``; raises the first side's SSLError."""
    if client is None:
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=server_name)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = set()
    for _ in range(rounds):
        for name, obj in (("client", c), ("server", s)):
            if name in done:
                continue
            try:
                obj.do_handshake()
                done.add(name)
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if len(done) == 2:
            # TLS 1.3: a refused client certificate reaches the client after its Finished.
            c.write(b"ping")
            s_in.write(c_out.read())
            assert s.read(4) == b"ping"
            return c, s
    raise AssertionError(f"handshake did not finish in {rounds} rounds (done: {done})")


def refused_with(server: ssl.SSLContext, server_name: str) -> str:
    """The reason the client gives for the alert ``server`` refuses its ClientHello with
    (``TLSV1_UNRECOGNIZED_NAME``, ``TLSV1_ALERT_INTERNAL_ERROR``)."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(c_in, c_out, server_hostname=server_name)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    with pytest.raises(ssl.SSLWantReadError):
        c.do_handshake()
    s_in.write(c_out.read())
    with pytest.raises(ssl.SSLError):
        s.do_handshake()
    c_in.write(s_out.read())
    with pytest.raises(ssl.SSLError) as refused:
        c.do_handshake()
    return refused.value.reason


def served(ctx: ssl.SSLContext, server_name: str | None) -> str:
    client, _ = handshake(ctx, server_name)
    return hashlib.sha256(client.getpeercert(binary_form=True)).hexdigest()


def test_certificate_by_name_exact_then_wildcard_then_default(tmp_path, pairs):
    a_crt, a_key = pairs["a"].write(tmp_path, "a")
    certs = TLSCertificates(
        tls(
            {
                "certificates": [
                    {"certFile": a_crt, "keyFile": a_key},
                    {"certFile": pairs["b"].cert_pem, "keyFile": pairs["b"].key_pem},  # inline PEM
                    {"certFile": pairs["wild"].cert_pem, "keyFile": pairs["wild"].key_pem},
                    {"certFile": pairs["cn"].cert_pem, "keyFile": pairs["cn"].key_pem},
                ]
            }
        )
    )
    assert certs.errors == ()
    fp = {k: p.fingerprint for k, p in pairs.items()}
    assert served(certs.context_for("a.test"), "a.test") == fp["a"]
    assert served(certs.context_for("WWW.A.Test."), "www.a.test") == fp["a"]  # case, trailing dot
    assert served(certs.context_for("b.test"), "b.test") == fp["b"]
    assert served(certs.context_for("x.wild.test"), "x.wild.test") == fp["wild"]
    assert served(certs.context_for("cn.test"), "cn.test") == fp["cn"]  # CN when no SAN
    generated = generated_default()
    for name in ("unknown.test", "wild.test", "a.b.wild.test", None):  # wildcard: one label only
        assert certs.certificate_for(name) is None
        assert served(certs.context_for(name), name) == generated.fingerprint
    assert TLSCertificates(None).default is generated  # made once per process


def test_generated_default_subject():
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(generated_default().chain_pem)
    assert cert.subject.rfc4514_string() == f"CN={DEFAULT_CERT_CN}"
    assert generated_default().names[0].endswith(".edge.default")


def test_default_store_certificate(pairs):
    store = pairs["store"]
    certs = TLSCertificates(
        tls(
            {
                "stores": {
                    "default": {
                        "defaultCertificate": {"certFile": store.cert_pem, "keyFile": store.key_pem}
                    }
                }
            }
        )
    )
    assert served(certs.context_for("nothing.test"), "nothing.test") == store.fingerprint
    assert served(certs.context_for(None), None) == store.fingerprint


def test_contexts_are_built_once_per_certificate_and_options(pairs):
    section = {
        "certificates": [
            {"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem},
            {"certFile": pairs["b"].cert_pem, "keyFile": pairs["b"].key_pem},
        ],
        "options": {"modern": {"minVersion": "VersionTLS13"}},
    }
    certs = TLSCertificates(tls(section))
    ctx = certs.context_for("a.test")
    assert certs.context_for("www.a.test") is ctx  # same certificate, same options
    assert certs.context_for("b.test") is not ctx
    modern = certs.context_for("a.test", "modern@file")
    assert modern is not ctx and certs.context_for("a.test", "modern@file") is modern
    assert modern.minimum_version == ssl.TLSVersion.TLSv1_3
    # A new configuration is a new snapshot: new contexts, the old ones untouched.
    again = TLSCertificates(tls(section))
    assert again.context_for("a.test") is not ctx
    assert certs.context_for("a.test") is ctx


def test_broken_certificates_are_left_out_with_errors_naming_the_file(tmp_path, pki, pairs):
    a_crt, a_key = pairs["a"].write(tmp_path, "a")
    b_crt, b_key = pairs["b"].write(tmp_path, "b")
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    encrypted = tmp_path / "enc.key"
    from cryptography.hazmat.primitives import serialization

    encrypted.write_bytes(
        pairs["a"].key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    other = pki.issue("other.test")
    certs = TLSCertificates(
        tls(
            {
                "certificates": [
                    {"certFile": str(tmp_path / "missing.crt"), "keyFile": a_key},
                    {"certFile": str(garbage), "keyFile": a_key},
                    {"certFile": a_crt, "keyFile": b_key},  # key of another certificate
                    {"certFile": a_crt, "keyFile": str(encrypted)},
                    {"certFile": other.cert_pem, "keyFile": pairs["b"].key_pem},  # inline mismatch
                    {
                        "certFile": pairs["b"].cert_pem,
                        "keyFile": "-----BEGIN PRIVATE KEY-----\nQUJD\n",
                    },
                    {"certFile": b_crt, "keyFile": b_key},  # the one that works
                ]
            }
        )
    )
    messages = [str(e) for e in certs.errors]
    assert len(messages) == 6, messages
    assert "$.tls.certificates[0]" in messages[0] and "missing.crt: no such file" in messages[0]
    assert "garbage.crt: no PEM certificate" in messages[1]
    assert f"keyFile {b_key} does not match certFile {a_crt}" in messages[2]
    assert "enc.key: the key is encrypted" in messages[3]
    assert "keyFile inline PEM does not match certFile inline PEM" in messages[4]
    assert "keyFile inline PEM: no PEM private key" in messages[5]
    for message in messages:  # inline PEM never leaks
        assert "BEGIN" not in message and "QUJD" not in message
    assert all(isinstance(e, CertificateError) for e in certs.errors)
    # The rest serves.
    assert served(certs.context_for("b.test"), "b.test") == pairs["b"].fingerprint
    assert certs.certificate_for("a.test") is None
    # What the runtime asks per router domain.
    assert certs.errors_for("b.test") == ()
    a_errors = certs.errors_for("a.test")
    assert certs.errors[2] in a_errors and certs.errors[3] in a_errors  # named a.test
    assert certs.errors[0] in a_errors  # unreadable: may have been a.test's
    assert certs.errors[4] not in a_errors  # other.test's


def test_broken_default_store_certificate_falls_back_to_generated(tmp_path):
    certs = TLSCertificates(
        tls(
            {
                "stores": {
                    "default": {
                        "defaultCertificate": {"certFile": str(tmp_path / "x.crt"), "keyFile": "k"}
                    }
                }
            }
        )
    )
    assert "$.tls.stores.default.defaultCertificate" in str(certs.errors[0])
    assert certs.default is generated_default()


def test_other_stores_are_ignored(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [
                    {
                        "certFile": pairs["a"].cert_pem,
                        "keyFile": pairs["a"].key_pem,
                        "stores": ["other"],
                    },
                    {
                        "certFile": pairs["b"].cert_pem,
                        "keyFile": pairs["b"].key_pem,
                        "stores": ["default"],
                    },
                ]
            }
        )
    )
    assert certs.certificate_for("a.test") is None
    assert certs.certificate_for("b.test") is not None


def test_sni_strict_refuses_unknown_and_missing_names(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {"strict": {"sniStrict": True}},
            }
        )
    )
    assert certs.context_for("a.test", "strict@file") is not None
    assert certs.context_for("unknown.test", "strict@file") is None
    assert certs.context_for(None, "strict@file") is None
    assert certs.context_for("unknown.test") is not None  # default options are not strict


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cipherSuites": ["TLS_NOPE"]}, "unknown cipher suite 'TLS_NOPE'"),
        ({"cipherSuites": ["TLS_AES_128_GCM_SHA256"]}, "names no TLS 1.2 suite"),
        ({"cipherSuites": ["TLS_RSA_WITH_RC4_128_SHA"]}, "none is available"),
        ({"minVersion": "VersionTLS13", "maxVersion": "VersionTLS12"}, "below minVersion"),
        ({"curvePreferences": ["CurveP999"]}, "unknown curve 'CurveP999'"),
        ({"clientAuth": {"clientAuthType": "RequireAndVerifyClientCert"}}, "needs caFiles"),
        ({"clientAuth": {"clientAuthType": "VerifyClientCertIfGiven"}}, "needs caFiles"),
        ({"clientAuth": {"caFiles": ["/nonexistent/ca.pem"]}}, "/nonexistent/ca.pem: no such file"),
        (
            {"clientAuth": {"caFiles": ["-----BEGIN CERTIFICATE-----\nQUJD\n"]}},
            "caFiles[0] inline PEM",
        ),
    ],
)
def test_invalid_options_are_reported_by_name(options, message):
    certs = TLSCertificates(tls({"options": {"bad": options}}))
    err = certs.options_error("bad@file")
    assert err is not None and message in str(err), str(err)
    assert "$.tls.options.bad@file" in str(err)
    assert "QUJD" not in str(err)
    assert certs.context_for("a.test", "bad@file") is None
    assert certs.options_error("default") is None  # the others still serve
    assert certs.context_for("a.test") is not None


def test_options_the_loader_stood_in_for_build_nothing(pairs):
    """Options with a key error are the loader's stand-in: its defaults (TLS 1.2 and
    up, no client certificate) are not what the user wrote, so no context is built
    from them and the reason is the key error."""
    problem = "$.tls.options.mtls.clientAuth.caFile: unknown key"
    certs = TLSCertificates(tls({"options": {"mtls": {"problems": [problem]}}}))
    err = certs.options_error("mtls@file")
    assert err is not None
    assert str(err) == f"$.tls.options.mtls@file: TLS options 'mtls@file' are disabled: {problem}"
    assert certs.context_for("a.test", "mtls@file") is None
    assert certs.context_for("a.test", "mtls@file", tcp=True) is None
    assert certs.selecting_context("mtls@file") is None
    assert certs.options_error("default") is None  # the others still serve
    assert certs.context_for("a.test") is not None


def test_unknown_options_name():
    certs = TLSCertificates(tls({}))
    assert "'nope@file' do not exist" in str(certs.options_error("nope@file"))
    assert certs.context_for("a.test", "nope@file") is None


def client_context(
    *, maximum=None, minimum=None, ciphers=None, curve=None, alpn=None, cert=None, ca=None
):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if maximum:
        ctx.maximum_version = maximum
    if minimum:
        ctx.minimum_version = minimum
    if ciphers:
        ctx.set_ciphers(ciphers)
    if curve:
        ctx.set_ecdh_curve(curve)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    if ca is not None:
        ctx.load_verify_locations(cadata=ca)
    return ctx


def test_versions(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {
                    "v13": {"minVersion": "VersionTLS13"},
                    "v12": {"maxVersion": "VersionTLS12"},
                },
            }
        )
    )
    old = client_context(maximum=ssl.TLSVersion.TLSv1_2)
    with pytest.raises(ssl.SSLError):
        handshake(certs.context_for("a.test", "v13@file"), "a.test", client=old)
    client, _ = handshake(certs.context_for("a.test", "v13@file"), "a.test")
    assert client.version() == "TLSv1.3"
    client, _ = handshake(certs.context_for("a.test", "v12@file"), "a.test")
    assert client.version() == "TLSv1.2"
    client, _ = handshake(certs.context_for("a.test"), "a.test")
    assert client.version() == "TLSv1.3"


def test_cipher_suites_map_go_names_and_ignore_tls13_ones(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["b"].cert_pem, "keyFile": pairs["b"].key_pem}],
                "options": {
                    "cbc": {
                        "maxVersion": "VersionTLS12",
                        "cipherSuites": [
                            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
                            "TLS_AES_128_GCM_SHA256",
                        ],
                    }
                },
            }
        )
    )
    assert certs.options_error("cbc@file") is None
    ctx = certs.context_for("b.test", "cbc@file")
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-RSA-AES128-SHA256"]
    client, _ = handshake(ctx, "b.test")
    assert client.cipher()[0] == "ECDHE-RSA-AES128-SHA256"
    with pytest.raises(ssl.SSLError):  # a client without that suite shares none
        handshake(ctx, "b.test", client=client_context(ciphers="ECDHE-RSA-AES256-GCM-SHA384"))


def test_curve_preferences_offer_the_first_curve(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {"p384": {"curvePreferences": ["CurveP384", "X25519"]}},
            }
        )
    )
    ctx = certs.context_for("a.test", "p384@file")
    handshake(ctx, "a.test", client=client_context(curve="secp384r1"))
    with pytest.raises(ssl.SSLError):
        handshake(ctx, "a.test", client=client_context(curve="X25519"))


def resumed(server: ssl.SSLContext, server_name: str) -> bool:
    """Two handshakes from one client that keeps its session: was the second resumed?"""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    session = None
    for _ in range(2):
        c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
        c = client.wrap_bio(c_in, c_out, server_hostname=server_name, session=session)
        s = server.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(5):
            for obj in (c, s):
                with contextlib.suppress(ssl.SSLWantReadError):
                    obj.do_handshake()
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        with contextlib.suppress(ssl.SSLWantReadError):
            c.read(1)  # takes the TLS 1.3 tickets the server sent, if any
        session = c.session
    return c.session_reused


def test_disable_session_tickets_makes_every_handshake_a_full_one(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {"full": {"disableSessionTickets": True}},
            }
        )
    )
    assert resumed(certs.context_for("a.test"), "a.test")  # tickets by default (2, OpenSSL's)
    full = certs.context_for("a.test", "full@file")
    assert full.num_tickets == 0 and full.options & ssl.OP_NO_TICKET
    assert not resumed(full, "a.test")


def test_alpn(pairs):
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {"h2": {"alpnProtocols": ["h2", "http/1.1"]}},
            }
        )
    )
    client, _ = handshake(
        certs.context_for("a.test"), "a.test", client=client_context(alpn=["h2", "http/1.1"])
    )
    assert client.selected_alpn_protocol() == "h2"  # the default options: Traefik's h2, http/1.1
    client, _ = handshake(
        certs.context_for("a.test"), "a.test", client=client_context(alpn=["http/1.1"])
    )
    assert client.selected_alpn_protocol() == "http/1.1"
    client, _ = handshake(
        certs.context_for("a.test", "h2@file", tcp=True),
        "a.test",
        client=client_context(alpn=["h2", "http/1.1"]),
    )
    assert (
        client.selected_alpn_protocol() == "h2"
    )  # a terminating TCP router: the list as configured


def test_https_offers_only_the_http_versions_edge_speaks(pairs, caplog):
    """Traefik's default list (h2 first, acme-tls/1) copied into an options entry:
    HTTPS routers offer h2 and http/1.1 from it, in its order (edge has no ACME), or no
    ALPN at all when the list has nothing edge speaks; a terminating TCP router offers
    the list as it is."""
    section = {
        "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
        "options": {
            "traefik": {"alpnProtocols": ["h2", "http/1.1", "acme-tls/1"]},
            "h2only": {"alpnProtocols": ["h2"]},
            "plain": {"alpnProtocols": ["http/1.1"]},
            "acme": {"alpnProtocols": ["acme-tls/1"]},
        },
    }
    with caplog.at_level("INFO", logger="edge.tls"):
        certs = TLSCertificates(tls(section))
    warned = [r.getMessage() for r in caplog.records if "alpnProtocols" in r.getMessage()]
    assert len(warned) == 2, warned  # once per options name that loses something
    assert any(
        "traefik@file" in m and "acme-tls/1 left out" in m and "offer h2, http/1.1" in m
        for m in warned
    )
    assert any("acme@file" in m and "no ALPN" in m for m in warned)

    for server in (
        certs.context_for("a.test", "traefik@file"),
        certs.selecting_context("traefik@file"),
    ):
        client, _ = handshake(server, "a.test", client=client_context(alpn=["h2", "http/1.1"]))
        assert client.selected_alpn_protocol() == "h2"
        client, _ = handshake(server, "a.test", client=client_context(alpn=["http/1.1"]))
        assert client.selected_alpn_protocol() == "http/1.1"
    # Options offering h2 alone: a client that has only HTTP/1.1 gets no ALPN (and speaks it).
    for server in (
        certs.context_for("a.test", "h2only@file"),
        certs.selecting_context("h2only@file"),
    ):
        client, _ = handshake(server, "a.test", client=client_context(alpn=["h2"]))
        assert client.selected_alpn_protocol() == "h2"
        client, _ = handshake(server, "a.test", client=client_context(alpn=["http/1.1"]))
        assert client.selected_alpn_protocol() is None
    # Options with nothing edge speaks to HTTP clients: no ALPN from HTTPS.
    client, _ = handshake(
        certs.context_for("a.test", "acme@file"), "a.test", client=client_context(alpn=["h2"])
    )
    assert client.selected_alpn_protocol() is None
    # TCP routers: the list as configured; a context of its own only where the lists differ.
    for name in ("traefik@file", "acme@file"):
        tcp = certs.context_for("a.test", name, tcp=True)
        assert tcp is not certs.context_for("a.test", name)
        assert certs.context_for("www.a.test", name, tcp=True) is tcp  # built once
        client, _ = handshake(tcp, "a.test", client=client_context(alpn=["acme-tls/1"]))
        assert client.selected_alpn_protocol() == "acme-tls/1"
    client, _ = handshake(
        certs.context_for("a.test", "traefik@file", tcp=True),
        "a.test",
        client=client_context(alpn=["acme-tls/1"]),
    )
    assert client.selected_alpn_protocol() == "acme-tls/1"
    assert certs.context_for("a.test", "plain@file", tcp=True) is certs.context_for(
        "a.test", "plain@file"
    )
    assert certs.context_for("a.test", tcp=True) is certs.context_for("a.test")


def test_client_auth(tmp_path, pki, pairs):
    ca_path = pki.write_ca(tmp_path)
    stranger = PKI("stranger CA").issue(cn="intruder", client=True)
    good = pairs["client"].write(tmp_path, "client")
    bad = stranger.write(tmp_path, "intruder")
    certs = TLSCertificates(
        tls(
            {
                "certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}],
                "options": {
                    "require": {
                        "clientAuth": {
                            "caFiles": [ca_path],
                            "clientAuthType": "RequireAndVerifyClientCert",
                        }
                    },
                    "implicit": {
                        "clientAuth": {"caFiles": [pki.cert_pem]}
                    },  # inline; type defaults
                    "ifgiven": {
                        "clientAuth": {
                            "caFiles": [ca_path],
                            "clientAuthType": "VerifyClientCertIfGiven",
                        }
                    },
                    "request": {"clientAuth": {"clientAuthType": "RequestClientCert"}},
                    "none": {
                        "clientAuth": {"caFiles": [ca_path], "clientAuthType": "NoClientCert"}
                    },
                },
            }
        )
    )
    for name in ("require", "implicit", "ifgiven", "request", "none"):
        assert certs.options_error(f"{name}@file") is None, name

    def ctx(name):
        return certs.context_for("a.test", f"{name}@file")

    for name in ("require", "implicit"):
        assert ctx(name).verify_mode == ssl.CERT_REQUIRED
        with pytest.raises(ssl.SSLError):
            handshake(ctx(name), "a.test")
        with pytest.raises(ssl.SSLError):
            handshake(ctx(name), "a.test", client=client_context(cert=bad))
        _, server = handshake(ctx(name), "a.test", client=client_context(cert=good))
        assert dict(x[0] for x in server.getpeercert()["subject"])["commonName"] == "client-1"
    handshake(ctx("ifgiven"), "a.test")
    handshake(ctx("ifgiven"), "a.test", client=client_context(cert=good))
    with pytest.raises(ssl.SSLError):
        handshake(ctx("ifgiven"), "a.test", client=client_context(cert=bad))
    for name in ("request", "none"):  # no certificate asked for: nobody refused
        assert ctx(name).verify_mode == ssl.CERT_NONE
        handshake(ctx(name), "a.test", client=client_context(cert=bad))


# -- transient failures: retried, never kept for the life of the snapshot ----------------------


@contextlib.contextmanager
def descriptors_exhausted():
    """This process's descriptor table full, as under a connection flood: the soft
    RLIMIT_NOFILE lowered to the lowest free descriptor number, so every open, memfd or
    socket fails with EMFILE until the block ends (the limit is restored)."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = os.open(os.devnull, os.O_RDONLY)  # the lowest free number
    os.close(probe)
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
    try:
        with pytest.raises(OSError, match="Too many open files"):
            os.close(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_transient_tells_failures_that_pass_from_those_that_do_not():
    import errno

    from edge.tls.certs import transient

    for code in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EIO):
        assert transient(OSError(code, "x"))
    assert transient(MemoryError())
    assert not transient(FileNotFoundError(errno.ENOENT, "x"))
    assert not transient(PermissionError(errno.EACCES, "x"))
    assert not transient(ssl.SSLError(5, "[SSL] PEM lib"))  # OpenSSL's 5 is not EIO
    assert not transient(ValueError("x")) and not transient(None)


def test_a_certificate_unreadable_for_want_of_descriptors_is_read_again_not_kept(tmp_path, pairs):
    """A certificate read while the process had no descriptor left was left out with
    its error, and the snapshot stayed current (same section, same file stamps): the
    data plane kept it, so the name had no certificate until the files were touched or
    edge restarted. The error is now marked transient and the snapshot is not current,
    so the next round reads the file again; a missing file is still kept."""
    a_crt, a_key = pairs["a"].write(tmp_path, "a")
    section = tls(
        {
            "certificates": [
                {"certFile": a_crt, "keyFile": a_key},
                {"certFile": str(tmp_path / "missing.crt"), "keyFile": a_key},
            ]
        }
    )
    with descriptors_exhausted():
        short = TLSCertificates(section)
    first, second = short.errors
    assert (
        first.transient
        and "Too many open files" in str(first)
        and "(transient: retried)" in str(first)
    )
    assert "$.tls.certificates[0]" in str(first) and a_crt in str(first)
    assert second.transient  # with no descriptor to open it, a missing file cannot be told
    assert short.transient == (first, second)
    assert short.certificate_for("a.test") is None and first in short.errors_for("a.test")
    assert not short.current(section)  # the files are the same, but were not read
    healed = TLSCertificates(section)
    (missing,) = healed.errors
    assert not missing.transient and "missing.crt: no such file" in str(missing)
    assert healed.transient == () and healed.current(section)  # a permanent error: kept
    assert served(healed.context_for("a.test"), "a.test") == pairs["a"].fingerprint


def test_a_ca_file_unreadable_for_want_of_descriptors_is_read_again(tmp_path, pki):
    ca = pki.write_ca(tmp_path)
    section = tls({"options": {"mtls": {"clientAuth": {"caFiles": [ca]}}}})
    with descriptors_exhausted():
        short = TLSCertificates(section)
    error = short.options_error("mtls@file")
    assert error is not None and error.transient and "Too many open files" in str(error)
    assert short.transient == (error,) and not short.current(section)
    healed = TLSCertificates(section)
    assert healed.options_error("mtls@file") is None and healed.current(section)


def test_a_context_that_cannot_be_built_for_want_of_descriptors_is_built_again(pairs, caplog):
    """The issue's log: 'tls.certificates[1] ... cannot build a TLS context: [Errno 24]'.
    The failed build was cached for the snapshot's life, so that name was refused
    (unrecognized_name) after every descriptor was free again. Now the refusal is an
    internal_error and the first connection after ``retry_after`` builds it again."""
    import time

    section = tls(
        {
            "certificates": [
                {"certFile": pairs["b"].cert_pem, "keyFile": pairs["b"].key_pem},
                {"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem},
            ]
        }
    )
    certs = TLSCertificates(section, retry_after=0.2)
    selecting = certs.selecting_context()  # the default certificate's, before the flood
    assert served(selecting, "b.test") == pairs["b"].fingerprint
    with descriptors_exhausted():
        assert certs.context_for("a.test") is None  # the memory file for the key: EMFILE
        # the SNI callback: internal_error, not unrecognized_name
        assert refused_with(selecting, "a.test") == "TLSV1_ALERT_INTERNAL_ERROR"
    assert (
        "$.tls.certificates[1] with TLS options default: cannot build a TLS context" in caplog.text
    )
    assert "Errno 24" in caplog.text and "transient" in caplog.text
    # Descriptors are free again; until retry_after passes the failure stands (a flood
    # of handshakes does not rebuild it for each), then the next connection builds it.
    assert certs.context_for("a.test") is None
    time.sleep(0.25)
    assert served(certs.context_for("a.test"), "a.test") == pairs["a"].fingerprint
    assert served(selecting, "a.test") == pairs["a"].fingerprint
    assert certs.current(section)  # nothing was read wrong: the snapshot stays


def test_a_selecting_context_that_cannot_be_built_now_is_not_kept(pairs):
    certs = TLSCertificates(
        tls({"certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}]})
    )
    with descriptors_exhausted():
        assert certs.selecting_context() is None
    ctx = certs.selecting_context()
    assert ctx is not None and certs.selecting_context() is ctx
    assert served(ctx, "a.test") == pairs["a"].fingerprint


def test_the_sni_callback_refuses_a_server_name_with_a_trailing_dot(pairs):
    """RFC 6066: no trailing dot in a host_name; Go's crypto/tls (Traefik) refuses the
    ClientHello. The entrypoint without a peek stage routed 'a.test.' as 'a.test'."""
    certs = TLSCertificates(
        tls({"certificates": [{"certFile": pairs["a"].cert_pem, "keyFile": pairs["a"].key_pem}]})
    )
    ctx = certs.selecting_context()
    for name in ("a.test.", "unknown.test.", "A.TEST."):
        assert refused_with(ctx, name) == "TLSV1_UNRECOGNIZED_NAME"
    assert served(ctx, "a.test") == pairs["a"].fingerprint


def test_certificates_skip_the_empty_label():
    pki = PKI()
    wild, other = pki.issue("*.wild.test"), pki.issue("other.test")
    section = {
        "certificates": [
            {"certFile": wild.cert_pem, "keyFile": wild.key_pem},
            {"certFile": wild.cert_pem, "keyFile": other.key_pem},  # broken: its names are known
        ]
    }
    certs = TLSCertificates(merge({"file": msgspec.convert({"tls": section}, Configuration)}).tls)
    assert len(certs.errors) == 1
    assert certs.certificate_for("x.wild.test") is not None
    assert certs.certificate_for(".wild.test") is None
    assert certs.errors_for("x.nowhere.wild.test") == ()  # two labels: not the wildcard's
    assert certs.errors_for(".wild.test") == ()
