"""htpasswd and htdigest lines, as Traefik's basicAuth and digestAuth read them
(pkg/middlewares/auth with its go-http-auth library): parsed, judged and verified.

Owns the user tables a configuration's ``users`` and ``usersFile`` make
(:func:`basic_users`, :func:`digest_users`) and the check of a password against an
htpasswd hash (:func:`verify`). Pure but for reading ``usersFile``; imports nothing
of edge but :mod:`edge.config.paths` (where a relative path is read, said as for
certificates), so the configuration models judge a table with the very code the
middlewares build it with.

Invariant: a table is either whole and every hash in it is one :func:`verify` can
match, or a ``ValueError`` names the key and line that stop it (never a hash: an
error message is logged and shown by the API). Traefik builds a line it cannot
match and then refuses every password for it; edge refuses the configuration
instead, saying why.

Formats, as go-http-auth's ``CheckSecret`` tells them apart: bcrypt (``$2a$``,
``$2b$``, ``$2x$``, ``$2y$``), SHA-1 (``{SHA}`` and the base64 of the digest),
MD5-crypt (``$apr1$``, Apache's, and ``$1$``, FreeBSD's: one algorithm, another
magic). Anything else (a plain-text password, crypt(3) DES, ``$5$``/``$6$``) never
matches in Traefik, and is refused here by name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence

from edge.config.paths import relative_note

__all__ = ["basic_users", "digest_users", "md5_crypt", "users_file_lines", "verify"]

_BCRYPT = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}")
_MD5_CRYPT = re.compile(r"\$(apr1|1)\$([^$]*)\$[./0-9A-Za-z]{22}")
_HA1 = re.compile(r"[0-9a-fA-F]{32}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ITOA64 = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BCRYPT_MAX = 72
"""Bytes of a password bcrypt reads (Go's bcrypt ignores the rest; Python's refuses them)."""


def users_file_lines(path: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of each user line of ``path``: trimmed, blank lines and
    ``#`` comments left out (Traefik's getLinesFromFile). A relative path is read
    from the working directory, as Traefik reads it. ``ValueError`` naming the file
    when it cannot be read."""
    where = repr(path) + relative_note(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ValueError(f"usersFile: {where}: no such file") from None
    except OSError as exc:
        raise ValueError(f"usersFile: {where}: cannot be read ({exc.strerror})") from None
    text = data.decode("utf-8", "surrogateescape")
    return [
        (number, line.strip())
        for number, line in enumerate(text.split("\n"), 1)
        if line.strip() and not line.strip().startswith("#")
    ]


def _lines(users: Sequence[str], users_file: str) -> Iterable[tuple[str, str]]:
    """Where each line is (for errors) and the line: the file's first, then ``users``,
    so a user given in ``users`` replaces the file's (Traefik's order)."""
    if users_file:
        for number, line in users_file_lines(users_file):
            yield f"usersFile: line {number} of {users_file!r}", line
    for i, line in enumerate(users):
        yield f"users[{i}]", line


def _user_name(where: str, name: str) -> str:
    if _CONTROL.search(name):
        raise ValueError(f"{where}: the user name holds a control character")
    return name


def basic_users(users: Sequence[str], users_file: str) -> dict[str, str]:
    """name -> hash, from htpasswd lines (``name:hash``); ``ValueError`` naming the key and
    line of the first that cannot be used, or when there is no user at all (Traefik:
    "no users found")."""
    table: dict[str, str] = {}
    for where, line in _lines(users, users_file):
        parts = line.split(":")
        if len(parts) != 2:
            raise ValueError(f"{where}: not an htpasswd line (name:hash)")
        name, hashed = parts
        _user_name(where, name)
        problem = hash_problem(hashed)
        if problem:
            raise ValueError(f"{where}: user {name!r}: {problem}")
        table[name] = hashed
    if not table:
        raise ValueError("users: no user (users and usersFile give none)")
    return table


def digest_users(users: Sequence[str], users_file: str) -> dict[tuple[str, str], str]:
    """(name, realm) -> HA1 (lowercase hex), from htdigest lines (``name:realm:md5``);
    ``ValueError`` naming the key and line of the first that cannot be used. No user
    at all is no error (Traefik builds the middleware; it lets nobody in)."""
    table: dict[tuple[str, str], str] = {}
    for where, line in _lines(users, users_file):
        parts = line.split(":")
        if len(parts) != 3:
            raise ValueError(f"{where}: not an htdigest line (name:realm:hash)")
        name, realm, ha1 = parts
        _user_name(where, name)
        if not _HA1.fullmatch(ha1):
            raise ValueError(
                f"{where}: user {name!r}: the hash is not 32 hex digits (htdigest's MD5)"
            )
        table[(name, realm)] = ha1.lower()
    return table


def hash_problem(hashed: str) -> str:
    """Why ``hashed`` can never be matched (without quoting it); ``""`` when it can."""
    if hashed.startswith("{SHA}"):
        try:
            digest = base64.b64decode(hashed[5:], validate=True)
        except (binascii.Error, ValueError):
            digest = b""
        return "" if len(digest) == 20 else "malformed {SHA} hash (base64 of 20 bytes expected)"
    if hashed.startswith(("$2a$", "$2b$", "$2x$", "$2y$")):
        m = _BCRYPT.fullmatch(hashed)
        if m is None or not 4 <= int(m.group(1)) <= 31:
            return f"malformed bcrypt hash ({hashed[:4]}, a cost 04-31 and 53 characters expected)"
        return ""
    if hashed.startswith(("$apr1$", "$1$")):
        if _MD5_CRYPT.fullmatch(hashed) is None:
            return f"malformed MD5-crypt hash ({hashed[: hashed.index('$', 1) + 1]}salt$ and 22 characters expected)"
        return ""
    if hashed.startswith("$") and hashed.count("$") >= 2:
        prefix = hashed[: hashed.index("$", 1) + 1]
        if len(prefix) <= 8 and not _CONTROL.search(prefix):
            return f"unknown hash format {prefix} ({_KNOWN})"
    return f"not a hash edge (or Traefik) can match: a plain-text password? ({_KNOWN})"


_KNOWN = "bcrypt $2y$/$2b$/$2a$/$2x$, MD5 $apr1$/$1$ and {SHA} are read: htpasswd -B, -m or -s"


def verify(password: bytes, hashed: str) -> bool:
    """Whether ``password`` matches ``hashed``, a hash :func:`hash_problem` accepts;
    compared in constant time. bcrypt costs what its cost says (2^cost rounds);
    MD5-crypt 1,000 MD5s."""
    if hashed.startswith("{SHA}"):
        mine = base64.b64encode(hashlib.sha1(password).digest())
        return hmac.compare_digest(mine, hashed[5:].encode())
    if hashed.startswith("$2"):
        import bcrypt  # the bcrypt package (a C/Rust build): pure Python is far too slow

        return bool(bcrypt.checkpw(password[:BCRYPT_MAX], hashed.encode()))
    _, magic, salt, _ = hashed.split("$", 3)
    expected = md5_crypt(password, salt.encode(), b"$%s$" % magic.encode())
    return hmac.compare_digest(expected, hashed.encode())


def md5_crypt(password: bytes, salt: bytes, magic: bytes) -> bytes:
    """Poul-Henning Kamp's MD5-based crypt, whole (``magic salt $ 22 characters``):
    FreeBSD's with ``$1$``, Apache's with ``$apr1$``. The salt is used as given
    (Traefik's library does not cut it at 8 characters)."""
    mixin = hashlib.md5(password + salt + password).digest()
    first = hashlib.md5(password + magic + salt)
    length = len(password)
    first.update((mixin * (length // 16 + 1))[:length])
    bit = length
    while bit:
        first.update(b"\0" if bit & 1 else password[:1])
        bit >>= 1
    digest = first.digest()
    for round_ in range(1000):
        step = hashlib.md5(password if round_ & 1 else digest)
        if round_ % 3:
            step.update(salt)
        if round_ % 7:
            step.update(password)
        step.update(digest if round_ & 1 else password)
        digest = step.digest()
    out = bytearray()
    for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)):
        out += _to64(digest[a] << 16 | digest[b] << 8 | digest[c], 4)
    out += _to64(digest[11], 2)
    return magic + salt + b"$" + bytes(out)


def _to64(value: int, count: int) -> bytes:
    """``count`` characters of crypt's base64, six bits at a time, lowest first."""
    out = bytearray()
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return bytes(out)
