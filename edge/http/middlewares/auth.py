"""The auth middlewares: basicAuth and digestAuth, as Traefik v3's
(pkg/middlewares/auth, with its go-http-auth library).

Both read the request's first Authorization header. Without valid credentials the
answer is edge's own 401 with a ``WWW-Authenticate`` challenge and the body
``401 Unauthorized`` (``text/plain``, as go-http-auth writes it); with them the
request goes upstream, with the user's name in ``headerField`` (replacing any the
client sent) and, with ``removeHeader``, without its Authorization header.

Cost: the user tables are made once per configuration (:mod:`edge.config.htpasswd`).
A Basic password check can be a bcrypt (tens of milliseconds, on the event
loop), so each middleware keeps the Authorization values it has verified, as a
keyed BLAKE2b of the value (the key random per middleware, so no value is kept
and none can be made to collide), at most :data:`VERIFIED_KEPT`, least recently
used out first; a value not in it is checked in full, and only a success goes
in, so a wrong password is never taken for a right one. Refused values are kept
apart the same way, so a client repeating a stale password costs one check, not
one per request (different wrong passwords still cost a check each: on the
event loop, until the pipeline can hand a check to a thread). Both tables go
with the configuration. Digest costs a few MD5s per request; its nonces are kept per
middleware as go-http-auth keeps them (the last nonce count seen, at most
:data:`NONCES_KEPT` plus a tolerance, the least recently used dropped first).

Where edge differs from Traefik, on purpose: a Digest response for a user the
table does not hold is refused (go-http-auth computes it over an empty HA1,
which anyone can do too); the digest ``uri`` is compared with the request-target
the client sent, before any middleware rewrote the path (the one it signed).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
from collections import OrderedDict
from urllib.parse import unquote_to_bytes

from edge.config.dynamic import BasicAuth as BasicAuthConfig
from edge.config.dynamic import DigestAuth as DigestAuthConfig
from edge.config.htpasswd import basic_users, digest_users, verify
from edge.http.middlewares import Answer, Forward, Middleware

__all__ = ["BasicAuth", "DigestAuth", "basic_auth", "digest_auth"]

log = logging.getLogger("edge.middlewares")

DEFAULT_REALM = "traefik"
VERIFIED_KEPT = 1024
"""Per basicAuth middleware, the verified Authorization values kept (a hit costs a
BLAKE2b of the value; a miss the password's hash)."""
NONCES_KEPT = 1000
NONCES_TOLERANCE = 100
"""go-http-auth's client cache: past KEPT + TOLERANCE nonces, 2 x TOLERANCE of the
least recently used are dropped."""
UNAUTHORIZED = b"401 Unauthorized\n"
UNAUTHORIZED_TYPE = b"text/plain"  # go-http-auth's, without a charset
_AUTHORIZATION = b"authorization"
_NONCE_COUNT = re.compile(rb"[0-9a-fA-F]{1,16}")


def authorization(fwd: Forward) -> bytes | None:
    """The value of the request's first Authorization header (Go's Header.Get)."""
    head = fwd.head
    if head is None:
        return None
    for name, value in head.headers:
        if len(name) == 13 and name.lower() == _AUTHORIZATION:
            return value
    return None


class _Auth(Middleware):
    __slots__ = ("header_field", "realm", "remove_header")

    def __init__(self, name: str, realm: str, header_field: str, remove_header: bool) -> None:
        super().__init__(name)
        self.realm = realm or DEFAULT_REALM
        self.header_field = header_field.encode()
        self.remove_header = remove_header

    def authenticated(self, fwd: Forward, user: str) -> None:
        if self.header_field:
            fwd.set_header(self.header_field, user.encode("utf-8", "surrogateescape"))
        if self.remove_header:
            fwd.set_header(b"Authorization", b"")  # an empty value removes


class BasicAuth(_Auth):
    """Basic authentication against an htpasswd table, verified passwords cached."""

    __slots__ = ("challenge", "key", "not_found", "refused", "users", "verified")

    def __init__(
        self,
        name: str,
        users: dict[str, str],
        realm: str = "",
        header_field: str = "",
        remove_header: bool = False,
    ) -> None:
        super().__init__(name, realm, header_field, remove_header)
        self.users = users
        # An unknown user costs a check too (Traefik's notFoundSecret: the time
        # taken does not tell which users exist).
        self.not_found = next(iter(users.values()), "")
        self.key = os.urandom(32)
        self.verified: OrderedDict[bytes, str | None] = OrderedDict()  # value -> user
        self.refused: OrderedDict[bytes, str | None] = OrderedDict()  # value -> None
        self.challenge = Answer(
            401,
            b'WWW-Authenticate: Basic realm="%s"\r\n' % self.realm.encode(),
            UNAUTHORIZED,
            UNAUTHORIZED_TYPE,
        )

    def request(self, fwd: Forward) -> Answer | None:
        value = authorization(fwd)
        if value is None:
            return self.challenge
        key = hashlib.blake2b(value, key=self.key, digest_size=16).digest()
        user = self.verified.get(key)
        if user is not None:
            self.verified.move_to_end(key)
        elif key in self.refused:
            return self.challenge
        else:
            user = self.check(value)
            _keep(self.verified if user is not None else self.refused, key, user)
            if user is None:
                return self.challenge
        self.authenticated(fwd, user)
        return None

    def check(self, value: bytes) -> str | None:
        """The user ``value`` (an Authorization header) authenticates, in full."""
        credentials = basic_credentials(value)
        if credentials is None:
            return None
        user, password = credentials
        hashed = self.users.get(user)
        if hashed is None:
            if self.not_found:
                verify(password, self.not_found)
            return None
        return user if verify(password, hashed) else None


def _keep(kept: OrderedDict[bytes, str | None], key: bytes, value: str | None) -> None:
    if len(kept) >= VERIFIED_KEPT:
        kept.popitem(last=False)
    kept[key] = value


def basic_credentials(value: bytes) -> tuple[str, bytes] | None:
    """(user, password) of ``Basic base64(user:password)`` (Go's Request.BasicAuth:
    the scheme in any case, padded standard base64, the first colon splits)."""
    if value[:6].lower() != b"basic ":
        return None
    try:
        decoded = base64.b64decode(value[6:], validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    return user.decode("utf-8", "surrogateescape"), password


class DigestAuth(_Auth):
    """Digest authentication (RFC 2617: MD5, ``qop=auth``) against an htdigest table."""

    __slots__ = ("nonces", "opaque", "users")

    def __init__(
        self,
        name: str,
        users: dict[str, str],
        realm: str = "",
        header_field: str = "",
        remove_header: bool = False,
    ) -> None:
        super().__init__(name, realm, header_field, remove_header)
        self.users = users  # name -> HA1, of this realm
        self.opaque = _random_key()
        self.nonces: OrderedDict[bytes, int] = OrderedDict()  # nonce -> last nc seen

    def request(self, fwd: Forward) -> Answer | None:
        value = authorization(fwd)
        if value is None or fwd.head is None:
            return self.challenge()
        scheme, _, rest = value.partition(b" ")
        if scheme != b"Digest":
            return self.challenge()
        p = digest_params(rest)
        if (
            p.get(b"opaque", b"") != self.opaque
            or p.get(b"algorithm", b"MD5") != b"MD5"
            or p.get(b"qop") != b"auth"
        ):
            return self.challenge()
        uri = p.get(b"uri", b"")
        target = fwd.head.target
        if uri != target and not _uri_prefix(uri, target):
            return self.challenge()
        user = p.get(b"username", b"").decode("utf-8", "surrogateescape")
        ha1 = self.users.get(user)
        if ha1 is None:
            return self.challenge()
        nonce = p.get(b"nonce", b"")
        nc = p.get(b"nc", b"")
        ha2 = _md5(b"%s:%s" % (fwd.method, uri))
        expected = _md5(b":".join((ha1.encode(), nonce, nc, p.get(b"cnonce", b""), b"auth", ha2)))
        if not hmac.compare_digest(expected, p.get(b"response", b"")):
            return self.challenge()
        if not _NONCE_COUNT.fullmatch(nc):
            return self.challenge()
        count = int(nc, 16)
        last = self.nonces.get(nonce)
        if last is None:
            return self.challenge()
        if last:
            if count == last:  # replayed
                return self.challenge()
            if count < last:  # pipelined out of order: the client may retry as it is
                return self.challenge(stale=True)
        self.nonces[nonce] = count
        self.nonces.move_to_end(nonce)
        self.authenticated(fwd, user)
        return None

    def challenge(self, stale: bool = False) -> Answer:
        """A 401 with a new nonce (go-http-auth's requireAuth)."""
        nonces = self.nonces
        if len(nonces) > NONCES_KEPT + NONCES_TOLERANCE:
            for _ in range(2 * NONCES_TOLERANCE):
                nonces.popitem(last=False)
        nonce = _random_key()
        nonces[nonce] = 0
        header = (
            b'WWW-Authenticate: Digest realm="%s", nonce="%s", opaque="%s", %salgorithm="MD5", qop="auth"\r\n'
            % (
                self.realm.encode(),
                nonce,
                self.opaque,
                b'stale="true", ' if stale else b"",
            )
        )
        return Answer(401, header, UNAUTHORIZED, UNAUTHORIZED_TYPE)


def digest_params(text: bytes) -> dict[bytes, bytes]:
    """The ``key=value`` pairs of a Digest Authorization header after its scheme:
    comma-separated, a quoted value unquoted (backslash escapes a character), a
    key without ``=`` taken with an empty value (go-http-auth's ParsePairs)."""
    items: list[bytes] = []
    buf = bytearray()
    quoted = escaped = False
    for c in text.strip():
        if escaped:
            buf.append(c)
            escaped = False
        elif quoted:
            if c == 0x5C:  # backslash
                escaped = True
                continue
            if c == 0x22:
                quoted = False
            buf.append(c)
        elif c == 0x2C:  # comma
            items.append(bytes(buf).strip())
            buf.clear()
        else:
            if c == 0x22:
                quoted = True
            buf.append(c)
    if buf:
        items.append(bytes(buf).strip())
    pairs: dict[bytes, bytes] = {}
    for item in items:
        key, eq, value = item.partition(b"=")
        if eq and len(value) >= 2 and value[0] == value[-1] == 0x22:
            value = value[1:-1]
        pairs[key] = value
    return pairs


def _uri_prefix(uri: bytes, target: bytes) -> bool:
    """go-http-auth's leniency: a digest ``uri`` other than the request-target still
    holds when its path is a prefix of the request's path (both unescaped)."""
    path = uri
    if b"://" in path:
        path = b"/" + path.split(b"://", 1)[1].partition(b"/")[2]
    path = unquote_to_bytes(path.partition(b"?")[0].partition(b"#")[0])
    mine = unquote_to_bytes(target.partition(b"?")[0])
    return len(path) <= len(mine) and mine.startswith(path)


def _md5(data: bytes) -> bytes:
    return hashlib.md5(data).hexdigest().encode()


def _random_key() -> bytes:
    """16 characters of base64 from 12 random bytes (go-http-auth's RandomKey)."""
    return base64.b64encode(os.urandom(12))


def basic_auth(name: str, config: BasicAuthConfig) -> BasicAuth:
    """The middleware a checked basicAuth configuration describes. Its usersFile is
    read again here: when it no longer gives a table, the middleware lets nobody
    in, and says why."""
    try:
        users = basic_users(config.users, config.users_file)
    except ValueError as exc:
        log.error("middleware %s: basicAuth.%s; every request refused", name, exc)
        users = {}
    return BasicAuth(name, users, config.realm, config.header_field, config.remove_header)


def digest_auth(name: str, config: DigestAuthConfig) -> DigestAuth:
    """As :func:`basic_auth`, for digestAuth: only the lines of its realm are kept."""
    realm = config.realm or DEFAULT_REALM
    try:
        table = digest_users(config.users, config.users_file)
    except ValueError as exc:
        log.error("middleware %s: digestAuth.%s; every request refused", name, exc)
        table = {}
    users = {user: ha1 for (user, in_realm), ha1 in table.items() if in_realm == realm}
    return DigestAuth(name, users, config.realm, config.header_field, config.remove_header)
