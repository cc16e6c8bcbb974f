"""TLS in validation: the routers that terminate TLS checked against a certificate
snapshot (:func:`check_tls`), and the client side of TLS to upstream servers
(:func:`client_tls_context`), whose files each serversTransport's check loads once.

Certificate, key, CA and users files of a dynamic configuration named by a relative
path are opened relative to the process's working directory, as Traefik (Go's
``os.ReadFile``) opens them (:mod:`edge.config.paths`); :func:`relative_files` lists
them, so that ``edge check`` can say which file each one is where it runs.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from cryptography import x509

from edge.config.dynamic import (
    ClientCertificate,
    Configuration,
    PeerCertSAN,
    ServersTransport,
    TCPServersTransport,
    TLSClientConfig,
)
from edge.config.merge import DEFAULT_TLS
from edge.config.paths import relative, relative_note
from edge.config.pem import PEM_MARK, describe, pem_file, read_pem
from edge.config.runtime.model import DISABLED, RouterInfo, RuntimeConfig, _Checked
from edge.config.tlsnames import LEGACY_CIPHERS, VERSIONS, openssl_suites
from edge.errors import ConfigError


class CertificateCheck(Protocol):
    """What :func:`check_tls` asks of a configuration's certificate snapshot
    (:class:`edge.tls.certs.TLSCertificates`, which sits above this layer)."""

    def options_error(self, name: str) -> Exception | None: ...

    def errors_for(self, domain: str) -> tuple[Exception, ...]: ...


def check_tls(rt: RuntimeConfig, certs: CertificateCheck) -> list[str]:
    """Disable the routers that would terminate TLS with broken options or certificates.

    The one check made after :func:`build_runtime`, by whoever builds the
    certificate snapshot (the data plane, ``edge check``), before any router is
    built from ``rt``. A router is disabled when its ``tls.options`` cannot be
    applied, or when a name it serves (its Host/HostSNI names, ``tls.domains``)
    has no certificate because the certificate meant for it is broken; the reason
    names the file. TLS passthrough terminates nothing and is not concerned.
    Returns the messages added, prefixed as :meth:`RuntimeConfig.errors` does.

    A router given errors gets a new info in ``rt`` (:meth:`ElementInfo.copy`): the one
    validation made stays as it was, for the next round to reuse (:func:`_endpoints_only`).
    When that round's snapshot is checked with the very ``certs`` its previous one was,
    the routers and their tls section being the same, so are the verdicts: the previous
    round's infos and messages are taken as they are, without walking the routers.
    """
    basis = rt._basis
    if basis is not None:
        basis.checks += 1
        basis.tls.certs = certs if basis.checks == 1 else None  # checked twice: not reused
        inherited, basis.inherited = basis.inherited, None
        if inherited is not None and basis.checks == 1 and inherited.certs is certs:
            by_label: dict[str, dict[str, RouterInfo[Any]]] = {
                "router": rt.http_routers,
                "tcp router": rt.tcp_routers,
            }
            for (label, key), (_, checked) in inherited.infos.items():
                by_label[label][key] = checked
            basis.tls = _Checked()
            basis.tls.certs, basis.tls.messages = certs, inherited.messages
            basis.tls.infos = dict(inherited.infos)
            return list(inherited.messages)
    added: list[str] = []
    tables: list[tuple[str, dict[str, RouterInfo[Any]]]] = [
        ("router", rt.http_routers),
        ("tcp router", rt.tcp_routers),
    ]
    for label, table in tables:
        for key, info in list(table.items()):
            tls = info.config.tls
            if tls is None or info.status == DISABLED or getattr(tls, "passthrough", False):
                continue
            reasons: list[str] = []
            options = tls.options or DEFAULT_TLS
            if options in rt.tls.options:  # a missing one was reported by build_runtime
                error = certs.options_error(options)
                if error is not None:
                    reasons.append(str(error))
            names = list(info.rule.hosts or ()) if info.rule is not None else []
            for domain in tls.domains:
                names += [n for n in (domain.main, *domain.sans) if n]
            for name in dict.fromkeys(n.lower() for n in names):
                reasons += [
                    f"no certificate for {name}: {error}" for error in certs.errors_for(name)
                ]
            if not reasons:
                continue
            checked = info.copy()
            if basis is not None and (label, key) not in basis.tls.infos:
                basis.tls.infos[(label, key)] = (info, checked)
            info = table[key] = checked
            for reason in reasons:
                info.add_error(reason)
                added.append(f"{label} {info.name}: {reason}")
    if basis is not None and basis.checks == 1:
        basis.tls.messages = added
    return list(added)


def client_tls_context(
    *,
    insecure_skip_verify: bool = False,
    root_cas: Sequence[str] = (),
    certificates: Sequence[ClientCertificate] = (),
    system_roots: bool = True,
    min_version: str = "",
    max_version: str = "",
    cipher_suites: Sequence[str] = (),
    peer_sans: Sequence[PeerCertSAN] = (),
) -> ssl.SSLContext:
    """The client side of TLS to upstream servers, as a serversTransport describes it.

    As Go's crypto/tls does for Traefik: the server's certificate is verified
    against ``rootCAs`` (paths or inline PEM) when given, else the system's CAs
    (``system_roots``; validation passes False: loading them costs tens of ms and
    cannot fail), and its name checked (the caller passes serverName or the host
    as ``server_hostname``); ``insecureSkipVerify`` verifies nothing.
    ``certificates`` are offered to a server that asks for a client certificate;
    OpenSSL keeps one per key type, so the first of each type listed is the one
    offered (Go picks the first that suits the server). Raises ConfigError
    naming the file (or "inline PEM") that cannot be used; a key is never read
    with a password (an encrypted one is an error, not a prompt).

    ``min_version``/``max_version`` (Go's names; TLS 1.2 and the highest by
    default, Go's client defaults) bound the versions offered. ``cipher_suites``
    (Go's names) are the TLS 1.0-1.2 suites offered; TLS 1.3's are always offered,
    by Go as by OpenSSL, so names of those change nothing, and a list of those alone
    leaves TLS 1.3 as the only version a handshake can agree on (Go offers no TLS
    1.2 suite then), which is what the context allows. TLS 1.0/1.1 get OpenSSL's
    security level 0, as TLS options do (:mod:`edge.tls.certs`).

    ``peer_sans``: the server's certificate must also carry one of these SANs, the
    check Go's VerifyPeerCertificate makes for Traefik after the handshake; with
    ``insecureSkipVerify`` the chain is still verified then (not the name), as Go's
    check does. The handshake fails with :class:`ssl.SSLCertVerificationError`.
    """
    ctx = (
        _SANContext(ssl.PROTOCOL_TLS_CLIENT)
        if peer_sans
        else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    )
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    _versions(ctx, min_version, max_version, cipher_suites)
    for i, value in enumerate(root_cas):
        what = f"rootCAs[{i}] {describe(value)}"
        try:
            if PEM_MARK in value:
                ctx.load_verify_locations(cadata=value)
            else:
                ctx.load_verify_locations(cafile=value)
        except FileNotFoundError:
            raise ConfigError(f"{what}: no such file{relative_note(value)}") from None
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ConfigError(f"{what}: no CA certificate could be read ({_reason(exc)})") from None
    if not root_cas and system_roots and (peer_sans or not insecure_skip_verify):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    for i, cert in reversed(list(enumerate(certificates))):  # the first of each key type wins
        what = f"certificates[{i}]"
        chain_pem = read_pem(f"{what}: certFile", cert.cert_file)
        key_pem = read_pem(f"{what}: keyFile", cert.key_file)
        try:
            with pem_file(chain_pem) as chain, pem_file(key_pem) as key:
                ctx.load_cert_chain(chain, key, password=_no_password)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{what}: certFile {describe(cert.cert_file)} / keyFile {describe(cert.key_file)}: "
                f"cannot be used ({_reason(exc)})"
            ) from None
    if insecure_skip_verify:
        ctx.check_hostname = False
        if isinstance(ctx, _SANContext):
            ctx.peer_sans = tuple(peer_sans)  # the chain verified still, as Go's check does
        else:
            ctx.verify_mode = ssl.CERT_NONE
    elif isinstance(ctx, _SANContext):
        ctx.peer_sans = tuple(peer_sans)
    return ctx


def transport_tls_context(
    tls: ServersTransport | TLSClientConfig, *, system_roots: bool = True
) -> ssl.SSLContext:
    """:func:`client_tls_context` for a serversTransport (HTTP) or a TCP one's ``tls``,
    with all its settings; ``peerCertURI`` is one more URI SAN of ``peerCertSANs``."""
    sans = list(tls.peer_cert_sans)
    if tls.peer_cert_uri:
        sans.append(PeerCertSAN(type="URI", value=tls.peer_cert_uri))
    http = tls if isinstance(tls, ServersTransport) else None
    return client_tls_context(
        insecure_skip_verify=tls.insecure_skip_verify,
        root_cas=tls.root_cas,
        certificates=tls.certificates,
        system_roots=system_roots,
        min_version=http.min_version if http is not None else "",
        max_version=http.max_version if http is not None else "",
        cipher_suites=http.cipher_suites if http is not None else (),
        peer_sans=sans,
    )


def own_tls(tls: ServersTransport | TLSClientConfig) -> bool:
    """Whether ``tls`` asks for anything of TLS beyond the system's CAs and OpenSSL's
    defaults (``serverName`` aside: it is the dial's), so needs a context of its own."""
    http = tls if isinstance(tls, ServersTransport) else None
    return bool(
        tls.root_cas
        or tls.certificates
        or tls.insecure_skip_verify
        or tls.peer_cert_uri
        or tls.peer_cert_sans
        or (http is not None and (http.cipher_suites or http.min_version or http.max_version))
    )


def _versions(
    ctx: ssl.SSLContext, min_version: str, max_version: str, cipher_suites: Sequence[str]
) -> None:
    """The versions and TLS 1.0-1.2 suites of a client context (validation checked the
    names: :class:`~edge.config.dynamic.ServersTransport`); ConfigError when this
    OpenSSL has none of the suites named."""
    minimum = VERSIONS[min_version] if min_version else ssl.TLSVersion.TLSv1_2
    try:
        tls12 = openssl_suites(cipher_suites)
    except ValueError as exc:
        raise ConfigError(f"cipherSuites: {exc}") from None
    if cipher_suites and not tls12:
        minimum = ssl.TLSVersion.TLSv1_3  # Go offers TLS 1.3's suites alone
    ctx.minimum_version = minimum
    if max_version:
        ctx.maximum_version = VERSIONS[max_version]
    ciphers = ":".join(tls12) if tls12 else None
    if minimum < ssl.TLSVersion.TLSv1_2:
        # TLS 1.0/1.1 need SHA-1 signatures, which OpenSSL's default level refuses.
        ciphers = f"{ciphers or LEGACY_CIPHERS}:@SECLEVEL=0"
    if ciphers is not None:
        try:
            ctx.set_ciphers(ciphers)
        except ssl.SSLError:
            raise ConfigError(f"cipherSuites: none is available in {ssl.OPENSSL_VERSION}") from None


class _SANChecked(ssl.SSLObject):
    """A client's TLS whose handshake ends with its context's ``peerCertSANs`` check."""

    def do_handshake(self) -> None:
        super().do_handshake()
        context = self.context
        sans = context.peer_sans if isinstance(context, _SANContext) else ()
        if sans:
            der = self.getpeercert(binary_form=True)
            if der is None or not peer_sans_match(der, sans):
                names = ", ".join(f"{san.type} {san.value}" for san in sans)
                why = f"the server's certificate has none of peerCertSANs ({names})"
                error = ssl.SSLCertVerificationError(why)
                error.reason = error.verify_message = why  # as OpenSSL's errors carry theirs
                raise error


class _SANContext(ssl.SSLContext):
    """A client context with ``peerCertSANs``: its TLS objects check them (asyncio's
    and uvloop's TLS, and :mod:`edge.tls.terminate`'s, make theirs with ``wrap_bio``)."""

    sslobject_class = _SANChecked
    peer_sans: tuple[PeerCertSAN, ...] = ()


def peer_sans_match(der: bytes, sans: Sequence[PeerCertSAN]) -> bool:
    """Whether the certificate ``der`` carries one of ``sans``: a URI SAN equal to a
    ``URI`` one regardless of case, or DNS (or, for an address, IP) SANs a
    ``DNSName`` one matches as a host name (Go's ``VerifyHostname``)."""
    try:
        ext = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        )
    except (ValueError, x509.ExtensionNotFound):
        return False
    names = ext.value
    for san in sans:
        if san.type == "URI":
            wanted = san.value.casefold()
            if any(
                uri.casefold() == wanted
                for uri in names.get_values_for_type(x509.UniformResourceIdentifier)
            ):
                return True
        elif _host_matches(san.value, names):
            return True
    return False


def _host_matches(host: str, names: x509.SubjectAlternativeName) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return address in names.get_values_for_type(x509.IPAddress)
    labels = host.lower().rstrip(".").split(".")
    for pattern in names.get_values_for_type(x509.DNSName):
        wanted = pattern.lower().rstrip(".").split(".")
        if len(wanted) != len(labels):
            continue
        if all(
            w == h or (i == 0 and w == "*" and h)
            for i, (w, h) in enumerate(zip(wanted, labels, strict=True))
        ):
            return True
    return False


def relative_files(conf: Configuration) -> list[tuple[str, str]]:
    """``(key path, path)`` of every certificate, key, CA and users file ``conf`` names
    by a relative path (inline PEM excluded), in the configuration's order."""
    return [(where, value) for where, value in _files(conf) if relative(value)]


def _files(conf: Configuration) -> Iterator[tuple[str, str]]:
    def pairs(where: str, certs: Sequence[ClientCertificate]) -> Iterator[tuple[str, str]]:
        for i, cert in enumerate(certs):
            yield f"{where}.certificates[{i}].certFile", cert.cert_file
            yield f"{where}.certificates[{i}].keyFile", cert.key_file

    def cas(where: str, values: Sequence[str]) -> Iterator[tuple[str, str]]:
        for i, value in enumerate(values):
            yield f"{where}[{i}]", value

    tls = conf.tls
    if tls is not None:
        for i, cert in enumerate(tls.certificates):
            yield f"tls.certificates[{i}].certFile", cert.cert_file
            yield f"tls.certificates[{i}].keyFile", cert.key_file
        for name, store in tls.stores.items():
            default = store.default_certificate
            if default is not None:
                yield f"tls.stores.{name}.defaultCertificate.certFile", default.cert_file
                yield f"tls.stores.{name}.defaultCertificate.keyFile", default.key_file
        for name, options in tls.options.items():
            if options.client_auth is not None:
                yield from cas(
                    f"tls.options.{name}.clientAuth.caFiles", options.client_auth.ca_files
                )
    if conf.http is not None:
        for name, middleware in conf.http.middlewares.items():
            for key, auth in (
                ("basicAuth", middleware.basic_auth),
                ("digestAuth", middleware.digest_auth),
            ):
                if auth is not None:
                    yield f"http.middlewares.{name}.{key}.usersFile", auth.users_file
        for name, transport in conf.http.servers_transports.items():
            where = f"http.serversTransports.{name}"
            yield from cas(f"{where}.rootCAs", transport.root_cas)
            yield from pairs(where, transport.certificates)
    if conf.tcp is not None:
        for name, tcp in conf.tcp.servers_transports.items():
            if tcp.tls is not None:
                where = f"tcp.serversTransports.{name}.tls"
                yield from cas(f"{where}.rootCAs", tcp.tls.root_cas)
                yield from pairs(where, tcp.tls.certificates)


def _no_password() -> bytes:
    return b""  # an encrypted key fails to load instead of prompting on the terminal


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


class _TransportTLS:
    """Each transport's TLS files checked once per validation: name -> error or None."""

    def __init__(self) -> None:
        self.verdicts: dict[str, str | None] = {}

    def check(self, name: str, config: ServersTransport | TCPServersTransport) -> str | None:
        if name not in self.verdicts:
            tls = config.tls if isinstance(config, TCPServersTransport) else config
            error = None
            if tls is not None and own_tls(tls):
                try:
                    transport_tls_context(tls, system_roots=False)
                except ConfigError as exc:
                    error = str(exc)
            self.verdicts[name] = error
        return self.verdicts[name]
