"""Certificates and TLS options of one configuration: server name -> ``ssl.SSLContext``.

Owns :class:`TLSCertificates`, a snapshot built once per dynamic configuration from
its ``tls`` section (certificates, options, the default store), and the mapping of
Traefik's TLS options (Go's names) onto Python's ``ssl``.

Invariants:
- Per connection the snapshot costs a few dict lookups: the server name picks a
  certificate (exact SAN name, then a single-label wildcard ``*.example.com``, then
  ``tls.stores.default.defaultCertificate``, then edge's own self-signed certificate,
  generated once per process); the pair (certificate, options name) picks an
  ``SSLContext`` built once, on first use, and reused for every later connection
  (a terminating TCP router's is another one only where its ALPN list differs).
  A new configuration builds a new snapshot when its ``tls`` section or a file it
  names changed (:meth:`~TLSCertificates.current`; ``edge.app`` keeps the live one
  otherwise, so its contexts and their session-ticket keys survive a route change
  and clients keep resuming); connections keep the context they got.
- A broken certificate never fails the snapshot: it is left out and its
  :class:`CertificateError` (naming the file) is kept in ``errors``; a broken
  options entry (one the loader stood in for, with ``problems``, included: nothing
  is built from it) is kept in :meth:`~TLSCertificates.options_error` and refuses its
  connections. The runtime asks both to disable only the routers concerned.
- A failure that may pass by itself (:func:`transient`: descriptors or memory
  short, an interrupted call, an I/O error) is never kept for the life of the
  snapshot. A certificate, key or CA file that could not be read so is an error
  marked ``transient`` and makes the snapshot stale (:meth:`~TLSCertificates.current`
  is false, so the next round reads the files again; the data plane schedules such
  a round, :class:`edge.app.Dataplane`); a context that could not be built so is
  built again by the first connection that needs it :data:`TRANSIENT_RETRY` seconds
  later. A permanent failure (a missing file, a key that does not match) is kept.
- Inline PEM (a value holding ``-----BEGIN``) never appears in a message or a log;
  any other value is a file path.

Python's ``ssl`` (3.11, OpenSSL 3) cannot do all that Go's crypto/tls does; where an
option cannot be honoured exactly, edge does the nearest safe thing:

- ``cipherSuites``: Go names map to OpenSSL names for TLS 1.0-1.2. TLS 1.3 suites
  (``TLS_AES_128_GCM_SHA256``, ...) and ``TLS_FALLBACK_SCSV`` are accepted and
  ignored, as Go ignores them (Python has no way to set TLS 1.3 suites either).
  A known suite this OpenSSL lacks (RC4, 3DES) is left out with a warning.
- ``curvePreferences``: Python 3.11 sets one group only (``set_ecdh_curve``), so
  edge offers the first listed curve alone (a warning names the others): a
  client without that curve is refused rather than served a curve not asked for.
- ``clientAuth.clientAuthType`` (Go's values): ``NoClientCert`` asks for nothing;
  ``VerifyClientCertIfGiven`` asks and verifies a given one against ``caFiles``;
  ``RequireAndVerifyClientCert`` requires one that verifies. Python cannot ask
  for a certificate without verifying it, so ``RequestClientCert`` asks for none
  (no client is refused, as Go promises, but none is seen) and
  ``RequireAnyClientCert`` requires one that verifies against ``caFiles`` (an
  error without ``caFiles``). An empty type means ``RequireAndVerifyClientCert``
  when ``caFiles`` are given, ``NoClientCert`` otherwise (Traefik's rule).
- ``minVersion: VersionTLS10/11`` works, as in Go: OpenSSL 3's default
  security level (Debian's too) allows no TLS 1.0/1.1 handshake (their
  signatures use SHA-1), so for those options alone the context's level is
  lowered to 0 (``@SECLEVEL=0``; the cipher list, when ``cipherSuites`` names
  none, is Go's default kinds: ECDHE with AES-GCM, ChaCha20 or AES-CBC). Options
  with ``VersionTLS12`` and above keep OpenSSL's level.
- ``alpnProtocols``: a context that terminates into HTTPS routers offers only
  what edge speaks to HTTP clients (``h2``, ``http/1.1``, ``http/1.0``) from the
  list, in its order, and no ALPN at all when none is listed (the client falls
  back to HTTP/1.1); the default is Traefik's, ``h2`` then ``http/1.1``. A name
  left out (``acme-tls/1``) gets a warning naming the options. A TCP router that
  terminates gets the list as configured (its server may speak anything;
  Traefik hands it the protocol negotiated): ``context_for(..., tcp=True)``.
"""

from __future__ import annotations

import dataclasses
import datetime
import errno
import functools
import logging
import os
import secrets
import ssl
import time
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from edge.config.dynamic import TLSConfiguration, TLSOptions
from edge.config.paths import relative_note
from edge.config.pem import PEM_MARK, describe, pem_file, read_pem
from edge.config.tlsnames import CIPHER_SUITES, LEGACY_CIPHERS, VERSIONS, openssl_suites
from edge.errors import ConfigError
from edge.tls import tickets as ticket_keys

log = logging.getLogger("edge.tls")

__all__ = [
    "DEFAULT",
    "DEFAULT_CERT_CN",
    "Certificate",
    "CertificateError",
    "TLSCertificates",
    "TLSOptionsError",
    "generated_default",
    "transient",
]

DEFAULT = "default"  # the options and store every router gets unless it names others
DEFAULT_CERT_CN = "EDGE DEFAULT CERT"  # subject of the self-signed certificate edge generates
UNRECOGNIZED_NAME = int(ssl.AlertDescription.ALERT_DESCRIPTION_UNRECOGNIZED_NAME)  # 112
INTERNAL_ERROR = int(ssl.AlertDescription.ALERT_DESCRIPTION_INTERNAL_ERROR)  # 80
TRANSIENT_RETRY = 1.0
"""Seconds before a context that failed for a transient reason is built again (by the
first connection that needs it after them)."""
# errno values of failures that pass by themselves: the process or the system out of
# descriptors or memory, a call interrupted or that would block, an I/O error (a disk
# or network file system that answers again).
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.ENOBUFS,
        errno.EAGAIN,
        errno.EINTR,
        errno.EBUSY,
        errno.EIO,
        errno.ETIMEDOUT,
        errno.ESTALE,
    }
)
TRANSIENT_NOTE = " (transient: retried)"  # ends the message of an error marked transient
# What edge speaks to a client it terminates into HTTPS routers: the ALPN names an
# HTTPS context may offer from an options entry's alpnProtocols (h2: edge.http.server.h2).
HTTP_ALPN = ("h2", "http/1.1", "http/1.0")

# Go's curve names and Traefik's aliases -> OpenSSL's short names.
CURVES = {
    "CurveP256": "prime256v1",
    "secp256r1": "prime256v1",
    "CurveP384": "secp384r1",
    "secp384r1": "secp384r1",
    "CurveP521": "secp521r1",
    "secp521r1": "secp521r1",
    "X25519": "X25519",
    "x25519": "X25519",
}

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)


class CertificateError(ConfigError):
    """A certificate or its key cannot be served.

    ``path`` is where it is configured (``$.tls.certificates[2]``); the message names
    the file (or says "inline PEM"). ``names`` are the DNS names of the certificate
    when it could be read, so the runtime can tell which routers lose it.
    """

    def __init__(
        self, message: str, *, path: str, names: tuple[str, ...] = (), transient: bool = False
    ) -> None:
        self.names = names
        self.transient = transient  # may pass by itself: read again at the next round
        super().__init__(message + (TRANSIENT_NOTE if transient else ""), path=path)


class TLSOptionsError(ConfigError):
    """A ``tls.options`` entry is unknown or cannot be applied; names the option.

    ``transient``: a CA file could not be read, or the entry applied, for a reason
    that may pass by itself (:func:`transient`).
    """

    def __init__(self, name: str, message: str, *, transient: bool = False) -> None:
        self.name = name
        self.transient = transient
        super().__init__(
            message + (TRANSIENT_NOTE if transient else ""), path=f"$.tls.options.{name}"
        )


@dataclass(frozen=True, eq=False)
class Certificate:
    """A validated certificate chain and its key (PEM), and the names it serves."""

    where: str  # "$.tls.certificates[0]", "$.tls.stores.default.defaultCertificate", "generated"
    names: tuple[str, ...]  # lower-case DNS names (SAN, or the CN when there is no SAN)
    fingerprint: str  # SHA-256 of the leaf, hex
    chain_pem: bytes = field(repr=False)
    key_pem: bytes = field(repr=False)


@dataclass(frozen=True)
class _Options:
    """One validated ``tls.options`` entry, ready to apply to a fresh context."""

    minimum: ssl.TLSVersion
    maximum: ssl.TLSVersion | None
    ciphers: str | None
    curve: str | None
    alpn: tuple[str, ...]
    sni_strict: bool
    verify_mode: ssl.VerifyMode
    ca_pem: str | None = field(default=None, repr=False)
    tickets: bool = True
    ticket_key: bytes | None = field(
        default=None, repr=False
    )  # edge.tls.tickets: shared by every context

    def ticket_key_from(self, secret: bytes, name: str) -> bytes:
        """This entry's session-ticket key: from the process's ``secret``, this name and
        every field that decides whom a handshake admits (:func:`edge.tls.tickets.derive`),
        so that a ticket resumes only under the options that issued it."""
        fields = (
            self.minimum,
            self.maximum,
            self.ciphers,
            self.curve,
            self.sni_strict,
            self.verify_mode,
        )
        return ticket_keys.derive(
            secret, name, *map(repr, fields), *self.alpn, "", self.ca_pem or ""
        )

    def apply(self, ctx: ssl.SSLContext) -> None:
        ctx.minimum_version = self.minimum
        if self.maximum is not None:
            ctx.maximum_version = self.maximum
        if self.ciphers is not None:
            ctx.set_ciphers(self.ciphers)
        if self.curve is not None:
            ctx.set_ecdh_curve(self.curve)
        if self.alpn:
            ctx.set_alpn_protocols(list(self.alpn))
        if self.ca_pem is not None:
            ctx.load_verify_locations(cadata=self.ca_pem)
        ctx.verify_mode = self.verify_mode
        ctx.options |= ssl.OP_NO_RENEGOTIATION
        if not self.tickets:
            # Neither stateless tickets nor (TLS 1.3 with OP_NO_TICKET) stateful ones.
            ctx.options |= ssl.OP_NO_TICKET
            ctx.num_tickets = 0
        elif self.ticket_key is not None:
            ticket_keys.install(ctx, self.ticket_key)


_BROKEN = object()  # a context that could not be built, for good (logged once)


class _Failed:
    """A context that could not be built for a transient reason: built again by the
    first connection that needs it from ``retry`` (a ``time.monotonic()`` value) on."""

    __slots__ = ("retry",)

    def __init__(self, retry: float) -> None:
        self.retry = retry


class TLSCertificates:
    """The certificates and TLS options of one configuration (see the module doc).

    ``errors`` holds one :class:`CertificateError` per certificate left out;
    ``default`` is the certificate served when no name matches.
    """

    def __init__(
        self,
        config: TLSConfiguration | None,
        *,
        ticket_key: bytes | None = None,
        retry_after: float = TRANSIENT_RETRY,
    ) -> None:
        """``ticket_key``: the session-ticket key every context of this snapshot gets
        (:mod:`edge.tls.tickets`); None: each its own, OpenSSL's default.
        ``retry_after``: seconds before a context that failed for a transient reason
        is built again."""
        self.config = config
        self.retry_after = retry_after
        self.stamps = file_stamps(
            config
        )  # before reading: a file changed meanwhile is read again next time
        config = config or TLSConfiguration()
        self.errors: tuple[CertificateError, ...] = ()
        errors: list[CertificateError] = []
        self._exact: dict[str, Certificate] = {}
        self._wildcard: dict[str, Certificate] = {}  # "example.com" -> cert for "*.example.com"
        certificates = []
        for i, entry in enumerate(config.certificates):
            where = f"$.tls.certificates[{i}]"
            if entry.stores and DEFAULT not in entry.stores:
                log.warning(
                    "%s: stores %s ignored: edge has only the default store", where, entry.stores
                )
                continue
            try:
                cert = _load(where, entry.cert_file, entry.key_file)
            except CertificateError as exc:
                errors.append(exc)
                continue
            certificates.append(cert)
            for name in cert.names:
                index = self._wildcard if name.startswith("*.") else self._exact
                key = name[2:] if name.startswith("*.") else name
                if key in index:
                    log.debug("%s: %s already served by %s", where, name, index[key].where)
                else:
                    index[key] = cert
        self.certificates: tuple[Certificate, ...] = tuple(certificates)

        default: Certificate | None = None
        for name in config.stores:
            if name != DEFAULT:
                log.warning("TLS store %s ignored: edge has only the default store", name)
        store = config.stores.get(DEFAULT)
        if store is not None and store.default_certificate is not None:
            where = "$.tls.stores.default.defaultCertificate"
            try:
                default = _load(
                    where, store.default_certificate.cert_file, store.default_certificate.key_file
                )
            except CertificateError as exc:
                errors.append(exc)
        self.default: Certificate = default or generated_default()
        self.errors = tuple(errors)
        for error in self.errors:
            log.error("certificate left out: %s", error)

        self._options: dict[str, _Options] = {}  # for HTTPS routers (HTTP/1.x ALPN only)
        self._tcp_options: dict[str, _Options] = {}  # as configured, where that offers more
        self._options_errors: dict[str, TLSOptionsError] = {}
        # merge() always adds "default"; a snapshot built from a bare section gets it too.
        options = (
            config.options
            if DEFAULT in config.options
            else {DEFAULT: TLSOptions(), **config.options}
        )
        for name, opts in options.items():
            if opts.problems:  # the loader's stand-in for options that did not decode
                self._options_errors[name] = TLSOptionsError(
                    name, f"TLS options {name!r} are disabled: {'; '.join(opts.problems)}"
                )
                continue
            try:
                configured = _options(name, opts)
            except TLSOptionsError as exc:
                self._options_errors[name] = exc
                log.error("TLS options left out: %s", exc)
                continue
            if ticket_key is not None:
                configured = dataclasses.replace(
                    configured, ticket_key=configured.ticket_key_from(ticket_key, name)
                )
            https = self._options[name] = _for_https(name, configured)
            if https is not configured:
                self._tcp_options[name] = configured
        self._contexts: dict[tuple[int, str], object] = {}
        self._tcp_contexts: dict[tuple[int, str], object] = {}  # for _tcp_options
        self._selecting: dict[str, ssl.SSLContext | None] = {}
        # The errors that may pass by themselves: while there are any, this snapshot
        # is not current, and its owner reads the files again soon (edge.app).
        failed: list[CertificateError | TLSOptionsError] = [
            *self.errors,
            *self._options_errors.values(),
        ]
        self.transient = tuple(exc for exc in failed if exc.transient)

    def current(self, config: TLSConfiguration | None) -> bool:
        """Whether a snapshot of ``config`` would be this one: the same section, every
        file it names as it was when this one read it, and nothing read then failed for
        a transient reason (a file that could not be read for want of a descriptor
        reads differently now, though its stamp is the same)."""
        return not self.transient and config == self.config and file_stamps(config) == self.stamps

    # -- per connection -------------------------------------------------------------

    def context_for(
        self, server_name: str | None, options: str = DEFAULT, *, tcp: bool = False
    ) -> ssl.SSLContext | None:
        """The context to terminate a connection for ``server_name`` (the SNI, or None)
        into HTTPS routers, or with ``tcp`` for a TCP router (the configured ALPN list;
        the same context where the two lists agree).

        ``None`` means refuse: the options are unknown or broken, or ``sniStrict``
        is set and no certificate has the name (or the client sent none).
        """
        opts = self._options.get(options)
        if opts is None:
            return None
        cert = self.certificate_for(server_name)
        if cert is None:
            if opts.sni_strict:
                return None
            cert = self.default
        if tcp and options in self._tcp_options:
            return _context(
                self._tcp_contexts, cert, options, self._tcp_options[options], self.retry_after
            )
        return _context(self._contexts, cert, options, opts, self.retry_after)

    def selecting_context(self, options: str = DEFAULT) -> ssl.SSLContext | None:
        """A context that chooses each connection's certificate during the handshake,
        as :meth:`context_for` would for its SNI into HTTPS, under ``options``; None when the
        options are unusable or the default certificate cannot be served with them.

        Built once per options name: its own context with the default certificate,
        plus (when there are certificates to choose among, or ``sniStrict``) an SNI
        callback that sets the connection's ``sni`` and, for another certificate,
        its ``context`` (OpenSSL swaps the certificate in, as nginx does per server
        name; everything else stays this context's, which is why one such context
        serves one options name). ``sniStrict`` with no certificate for the name:
        an ``unrecognized_name`` alert. The connection object the callback gets is
        the SSL object's owner: edge's :class:`~edge.tls.terminate.TLSAccept`.
        Session tickets are this context's, whatever certificate a connection got.

        None too for ``sniStrict`` options that allow TLS 1.2: on a TLS 1.2
        resumption OpenSSL hands the callback the session's server name, not the
        one the client sent, and a ticket from any name of these options resumes,
        so a client could come back with an unknown name (or none) and be served;
        the peek reads the name from the ClientHello and refuses it.

        The callback holds the certificate tables, not this snapshot: a context
        whose callback held it would make a reference cycle, and the data plane
        ``gc.freeze()``s after each switch, so a replaced snapshot would never be freed.
        """
        if options in self._selecting:
            return self._selecting[options]
        opts = self._options.get(options)
        ctx = None
        if opts is not None and not (opts.sni_strict and opts.minimum < ssl.TLSVersion.TLSv1_3):
            built = _build(self.default, options, opts, self.retry_after)
            if built.__class__ is _Failed:
                return None  # not kept: the next call builds it again
            if built is not _BROKEN:
                ctx = built
                if self._exact or self._wildcard or opts.sni_strict:
                    ctx.sni_callback = self._chooser(options, opts)  # type: ignore[attr-defined]
        self._selecting[options] = ctx  # type: ignore[assignment]
        return ctx  # type: ignore[return-value]

    def _chooser(self, options: str, opts: _Options):
        # Not self (nor its bound methods): see selecting_context.
        exact, wildcard, contexts = self._exact, self._wildcard, self._contexts
        strict, retry_after = opts.sni_strict, self.retry_after

        def choose(conn, server_name: str | None, _: ssl.SSLContext) -> int | None:
            conn.sni = server_name
            if server_name and server_name[-1] == ".":
                # RFC 6066 section 3: a host_name has no trailing dot. Go's crypto/tls
                # (hence Traefik) refuses such a ClientHello; so does the peek
                # (edge.tls.clienthello), with the same alert.
                return UNRECOGNIZED_NAME
            cert = _certificate(exact, wildcard, server_name)
            if cert is None:
                # The default certificate (this context's own), or none under sniStrict.
                return UNRECOGNIZED_NAME if strict else None
            ctx = _context(contexts, cert, options, opts, retry_after)
            if ctx is None:
                # Cannot be built: for now (internal_error, which RFC 8446 names for
                # an allocation failure; a later connection builds it again), or for good.
                failed = contexts.get((id(cert), options)).__class__ is _Failed
                return INTERNAL_ERROR if failed else UNRECOGNIZED_NAME
            conn.context = ctx
            return None

        return choose

    def certificate_for(self, server_name: str | None) -> Certificate | None:
        """The configured certificate for a name (exact, then wildcard), not the default."""
        return _certificate(self._exact, self._wildcard, server_name)

    # -- for the runtime ------------------------------------------------------------

    def options_error(self, name: str) -> TLSOptionsError | None:
        """Why connections with these options are refused; None when they are usable."""
        if name in self._options:
            return None
        return self._options_errors.get(name) or TLSOptionsError(
            name, f"TLS options {name!r} do not exist"
        )

    def errors_for(self, domain: str) -> tuple[CertificateError, ...]:
        """The errors that explain why ``domain`` has no certificate of its own.

        Empty when a configured certificate serves it; otherwise the errors of the
        certificates whose names cover it, and those of certificates that could not
        be read far enough to know their names.
        """
        if self.certificate_for(domain) is not None:
            return ()
        name = domain.lower().rstrip(".")
        dot = name.find(".")
        parent = name[dot + 1 :] if dot > 0 else None  # as _certificate: no empty label
        return tuple(
            exc
            for exc in self.errors
            if not exc.names or name in exc.names or (parent and f"*.{parent}" in exc.names)
        )


# -- contexts -----------------------------------------------------------------------


def _certificate(
    exact: dict[str, Certificate], wildcard: dict[str, Certificate], server_name: str | None
) -> Certificate | None:
    """TLSCertificates.certificate_for over its two tables."""
    if not server_name:
        return None
    name = server_name.lower().rstrip(".")
    cert = exact.get(name)
    if cert is None:
        dot = name.find(".")
        if dot > 0:
            cert = wildcard.get(name[dot + 1 :])
    return cert


def _context(
    contexts: dict[tuple[int, str], object],
    cert: Certificate,
    options: str,
    opts: _Options,
    retry_after: float,
) -> ssl.SSLContext | None:
    """The context for (``cert``, ``options``) from a snapshot's ``contexts``, built on
    first use; None when it cannot be built. One that failed for a transient reason is
    built again once ``retry_after`` seconds have passed."""
    key = (id(cert), options)
    ctx = contexts.get(key)
    if ctx is None or (ctx.__class__ is _Failed and ctx.retry <= time.monotonic()):
        ctx = contexts[key] = _build(cert, options, opts, retry_after, again=ctx is not None)
    # mypy cannot narrow an object to SSLContext by what it is not (_BROKEN, a _Failed)
    return None if ctx is _BROKEN or ctx.__class__ is _Failed else ctx  # type: ignore[return-value]


def _build(
    cert: Certificate, name: str, opts: _Options, retry_after: float, *, again: bool = False
) -> object:
    """A context serving ``cert`` under options ``name``; ``_BROKEN`` when it cannot be
    built, a :class:`_Failed` when it cannot be built now (:func:`transient`).
    ``again``: the one before failed (a success is logged, to say the failure ended)."""
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        opts.apply(ctx)
        _load_chain(ctx, cert)
    except (OSError, MemoryError) as exc:  # ssl.SSLError, EMFILE for the memory file, /proc missing
        if transient(exc):
            log.error(
                "%s with TLS options %s: cannot build a TLS context: %s (transient: built again"
                " by a connection after %gs)",
                cert.where,
                name,
                exc,
                retry_after,
            )
            return _Failed(time.monotonic() + retry_after)
        log.error("%s with TLS options %s: cannot build a TLS context: %s", cert.where, name, exc)
        return _BROKEN
    if again:
        log.info("%s with TLS options %s: TLS context built", cert.where, name)
    return ctx


def transient(exc: BaseException | None) -> bool:
    """Whether the failure ``exc`` may pass by itself, so that trying again later may
    succeed: memory or descriptors short, an interrupted call, an I/O error
    (:data:`TRANSIENT_ERRNOS`). A missing or forbidden file, a malformed PEM, a key
    that does not match are not: trying again gives the same answer."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, ssl.SSLError):
        # OpenSSL's own error: its errno is OpenSSL's code, not the system's.
        return "MALLOC_FAILURE" in str(exc).upper().replace(" ", "_")
    return isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS


# -- certificates -----------------------------------------------------------------


FileStamp = tuple[str] | tuple[str, int, int, int, int]
"""(path,) for a file that cannot be read, else (path, inode, size, mtime, ctime)."""


def file_stamps(config: TLSConfiguration | None) -> tuple[FileStamp, ...]:
    """What the files ``config`` names are now: (path, inode, size, mtime, ctime) of each
    certFile, keyFile and caFiles value that is a path ((path,) where it cannot be
    read), in the order named. A file replaced (a Kubernetes Secret volume swaps a
    symlink) or rewritten in place changes its stamp."""
    if config is None:
        return ()
    paths = [v for c in config.certificates for v in (c.cert_file, c.key_file)]
    for store in config.stores.values():
        if store.default_certificate is not None:
            paths += (store.default_certificate.cert_file, store.default_certificate.key_file)
    for opts in config.options.values():
        if opts.client_auth is not None:
            paths += opts.client_auth.ca_files
    stamps: list[FileStamp] = []
    for path in paths:
        if not path or PEM_MARK in path:
            continue
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            stamps.append((path,))
            continue
        stamps.append((path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(stamps)


def _read(where: str, what: str, value: str) -> bytes:
    """The PEM bytes of a path or inline value; CertificateError naming the file, marked
    ``transient`` when the read failed for a reason that may pass (:func:`transient`)."""
    try:
        return read_pem(what, value)
    except ConfigError as exc:
        raise CertificateError(
            exc.message + relative_note(value), path=where, transient=transient(exc.__cause__)
        ) from None


def _load(where: str, cert_file: str, key_file: str) -> Certificate:
    """Read and check a certificate chain and its key; CertificateError names the file."""
    chain_pem = _read(where, "certFile", cert_file)
    key_pem = _read(where, "keyFile", key_file)
    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except ValueError:
        raise CertificateError(
            f"certFile {describe(cert_file)}: no PEM certificate could be read", path=where
        ) from None
    leaf = chain[0]
    names = _names(leaf)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise CertificateError(
            f"keyFile {describe(key_file)}: the key is encrypted (edge takes unencrypted keys)",
            path=where,
            names=names,
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise CertificateError(
            f"keyFile {describe(key_file)}: no PEM private key could be read",
            path=where,
            names=names,
        ) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise CertificateError(
            f"keyFile {describe(key_file)} does not match certFile {describe(cert_file)}",
            path=where,
            names=names,
        )
    return Certificate(
        where=where,
        names=names,
        fingerprint=leaf.fingerprint(hashes.SHA256()).hex(),
        chain_pem=chain_pem,
        key_pem=key_pem,
    )


def _names(cert: x509.Certificate) -> tuple[str, ...]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return tuple(dict.fromkeys(n.lower().rstrip(".") for n in names if n))


def _load_chain(ctx: ssl.SSLContext, cert: Certificate) -> None:
    with pem_file(cert.chain_pem) as chain, pem_file(cert.key_pem) as key:
        ctx.load_cert_chain(chain, key)


@functools.cache
def generated_default() -> Certificate:
    """edge's self-signed certificate (ECDSA P-256, one year), made once per process.

    Its only name is random under ``.edge.default``, so it never matches a real one.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = f"{secrets.token_hex(8)}.{secrets.token_hex(8)}.edge.default"
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, DEFAULT_CERT_CN)])
    now = datetime.datetime.now(datetime.UTC)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Certificate(
        where="generated",
        names=(name,),
        fingerprint=leaf.fingerprint(hashes.SHA256()).hex(),
        chain_pem=leaf.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


# -- options ----------------------------------------------------------------------


def _for_https(name: str, opts: _Options) -> _Options:
    """``opts`` for HTTPS routers: the ALPN names edge speaks to HTTP clients (HTTP_ALPN),
    in the configured order; ``opts`` itself when nothing is left out."""
    alpn = tuple(p for p in opts.alpn if p in HTTP_ALPN)
    if alpn == opts.alpn:
        return opts
    log.warning(
        "TLS options %s: alpnProtocols %s left out on HTTPS routers (edge speaks HTTP/2 and HTTP/1.x to HTTP clients),"
        " which offer %s; TCP routers that terminate TLS offer the list as configured",
        name,
        ", ".join(p for p in opts.alpn if p not in HTTP_ALPN),
        ", ".join(alpn) if alpn else "no ALPN (the client falls back to HTTP/1.1)",
    )
    return dataclasses.replace(opts, alpn=alpn)


def _options(name: str, opts: TLSOptions) -> _Options:
    """Validate one options entry against this OpenSSL; TLSOptionsError names the field."""

    def fail(message: str) -> TLSOptionsError:
        return TLSOptionsError(name, message)

    minimum = VERSIONS[opts.min_version]
    maximum = VERSIONS[opts.max_version] if opts.max_version else None
    if maximum is not None and maximum < minimum:
        raise fail(f"maxVersion {opts.max_version} is below minVersion {opts.min_version}")

    ciphers = None
    if opts.cipher_suites:
        try:
            wanted = openssl_suites(opts.cipher_suites)
        except ValueError as exc:
            raise fail(f"cipherSuites: {exc}") from None
        if wanted:
            ciphers = ":".join(wanted)
        elif minimum < ssl.TLSVersion.TLSv1_3:
            raise fail("cipherSuites names no TLS 1.2 suite while minVersion allows TLS 1.2")
    if minimum < ssl.TLSVersion.TLSv1_2:
        # TLS 1.0/1.1 need SHA-1 signatures, which OpenSSL's default level refuses.
        ciphers = f"{ciphers or LEGACY_CIPHERS}:@SECLEVEL=0"

    curve = None
    if opts.curve_preferences:
        unknown = [c for c in opts.curve_preferences if c not in CURVES]
        if unknown:
            raise fail(f"curvePreferences: unknown curve {unknown[0]!r}")
        curve = CURVES[opts.curve_preferences[0]]
        if len(opts.curve_preferences) > 1:
            log.warning(
                "TLS options %s: curvePreferences: only %s is offered (Python's ssl sets one curve)",
                name,
                opts.curve_preferences[0],
            )

    auth = opts.client_auth
    ca_files = auth.ca_files if auth is not None else []
    kind = (auth.client_auth_type if auth is not None else "") or (
        "RequireAndVerifyClientCert" if ca_files else "NoClientCert"
    )
    ca_pem = None
    if ca_files:
        parts = []
        for i, value in enumerate(ca_files):
            what = f"clientAuth.caFiles[{i}]"
            try:
                data = _read(f"$.tls.options.{name}", what, value)
                x509.load_pem_x509_certificates(data)
            except CertificateError as exc:
                message = exc.message.removesuffix(TRANSIENT_NOTE)
                raise TLSOptionsError(name, message, transient=exc.transient) from None
            except ValueError:
                raise fail(f"{what} {describe(value)}: no PEM certificate could be read") from None
            parts.append(data.decode("ascii", "replace"))
        ca_pem = "\n".join(parts)
    if (
        kind in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert", "RequireAnyClientCert")
        and not ca_pem
    ):
        raise fail(f"clientAuth: clientAuthType {kind} needs caFiles")
    verify_mode = {
        "NoClientCert": ssl.CERT_NONE,
        "RequestClientCert": ssl.CERT_NONE,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAnyClientCert": ssl.CERT_REQUIRED,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }[kind]

    built = _Options(
        minimum=minimum,
        maximum=maximum,
        ciphers=ciphers,
        curve=curve,
        alpn=tuple(opts.alpn_protocols),
        sni_strict=opts.sni_strict,
        verify_mode=verify_mode,
        ca_pem=ca_pem,
        tickets=not opts.disable_session_tickets,
    )
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        built.apply(probe)
    except ssl.SSLError as exc:
        if transient(exc):
            raise TLSOptionsError(name, f"cannot be applied: {exc}", transient=True) from None
        if ciphers is not None and "cipher" in str(exc).lower():
            raise fail(f"cipherSuites: none is available in {ssl.OPENSSL_VERSION}") from None
        raise fail(f"cannot be applied: {exc}") from None
    except ValueError as exc:
        raise fail(f"cannot be applied: {exc}") from None
    if ciphers is not None:
        have = {c["name"] for c in probe.get_ciphers()}
        missing = [
            s for s in opts.cipher_suites if s in CIPHER_SUITES and CIPHER_SUITES[s] not in have
        ]
        if missing:
            log.warning(
                "TLS options %s: cipher suites not available in %s, left out: %s",
                name,
                ssl.OPENSSL_VERSION,
                ", ".join(missing),
            )
    return built
