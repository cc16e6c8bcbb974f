"""One session-ticket key for every server context of edge, across snapshots and workers.

OpenSSL gives each ``SSL_CTX`` random ticket keys of its own. Edge builds a context per
(certificate, TLS options) in each certificate snapshot, a new snapshot when the ``tls``
section changes, and with ``workers: N`` each worker builds its own: a ticket from one
context does not resume on another, so a client lost resumption after every change of
the ``tls`` section (a Secret added for a new Ingress) and, with N workers sharing a
port by SO_REUSEPORT, on (N-1)/N of its connections. nginx shares its keys among
workers by making its contexts before it forks; Python's ``ssl`` has no way to set
them, so :func:`install` calls OpenSSL's ``SSL_CTX_set_tlsext_ticket_keys`` (a
``SSL_CTX_ctrl``) through ctypes, on the libssl the ``_ssl`` module is linked to.

The secret (:func:`new_key`: 80 random bytes) is made once by ``edge run`` (the
supervisor with workers, which sends it in :class:`edge.ipc.Start`) and lives as long
as the process, as nginx's keys live until a reload. A context does not get the secret
itself but a key derived from it and from its TLS options, every field that decides
whom a handshake admits (:func:`derive`): a ticket resumes only under the options that
issued it. One key for all would let a session made for an open name resume on a name
whose options require a client certificate, with none: a resumption skips the
certificate request, and every context CPython makes has the same session id context,
so OpenSSL does not tell them apart (nginx sets one per server block for that reason).
Options changed under the same name get another key, so a reload that adds
``clientAuth`` ends the tickets issued before it. TLS 1.3 resumption
with a key exchange (what OpenSSL offers and clients use) keeps forward secrecy even if
the key leaked; a TLS 1.2 ticket does not, as with nginx.

The ``SSL_CTX`` pointer is read from the ``ssl.SSLContext`` object: CPython's
``PySSLContext`` begins with the object header, then that pointer (3.8-3.14). Before
any key is set the binding checks it: ``SSL_CTX_get_options`` on the pointer must
return the context's ``options``, on a probe context made for the purpose (options that
differ from OpenSSL's defaults). Where any of that is missing (another interpreter, a
free-threaded build, a libssl without the symbols) :func:`install` returns False and
each context keeps its own keys, as before; the caller logs it once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import ssl
import sys
import sysconfig

__all__ = ["KEY_SIZE", "available", "derive", "install", "new_key"]

KEY_SIZE = 80  # OpenSSL 1.1+: 16 bytes of key name, 32 of HMAC key, 32 of AES key
SET_TICKET_KEYS = 59  # SSL_CTRL_SET_TLSEXT_TICKET_KEYS


def new_key() -> bytes:
    return os.urandom(KEY_SIZE)


def derive(secret: bytes, *parts: str) -> bytes:
    """A :data:`KEY_SIZE`-byte key from ``secret`` for what ``parts`` name (SHAKE-256 over
    the secret and the length-prefixed parts: distinct parts, unrelated keys)."""
    shake = hashlib.shake_256(b"edge session ticket key\0" + secret)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        shake.update(len(data).to_bytes(8, "big") + data)
    return shake.digest(KEY_SIZE)


class _LibSSL:
    """The two libssl calls, bound through the ``_ssl`` module's own handle."""

    def __init__(self) -> None:
        import _ssl

        lib = ctypes.CDLL(_ssl.__file__)  # dlsym also searches its libssl
        self.ctrl = lib.SSL_CTX_ctrl
        self.ctrl.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p)
        self.ctrl.restype = ctypes.c_long
        self.get_options = lib.SSL_CTX_get_options
        self.get_options.argtypes = (ctypes.c_void_p,)
        self.get_options.restype = ctypes.c_uint64
        self.offset = 2 * ctypes.sizeof(ctypes.c_void_p)  # after ob_refcnt and ob_type

    def pointer(self, ctx: ssl.SSLContext) -> int | None:
        return ctypes.c_void_p.from_address(id(ctx) + self.offset).value

    def works(self) -> bool:
        """The pointer is where it is assumed: its options are the probe context's."""
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        probe.options |= ssl.OP_NO_TICKET | ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
        pointer = self.pointer(probe)
        return bool(pointer) and self.get_options(pointer) == int(probe.options)


@functools.cache
def _libssl() -> _LibSSL | None:
    """The binding, made and checked once per process; None where it cannot be."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return None
    try:
        lib = _LibSSL()
    except (ImportError, OSError, AttributeError):
        return None
    return lib if lib.works() else None


def available() -> bool:
    """Whether :func:`install` can set keys in this process."""
    return _libssl() is not None


def install(ctx: ssl.SSLContext, key: bytes) -> bool:
    """Make ``key`` (:data:`KEY_SIZE` bytes) ``ctx``'s session-ticket key; False where it
    cannot be done (``ctx`` keeps its own keys)."""
    lib = _libssl()
    if lib is None or len(key) != KEY_SIZE:
        return False
    pointer = lib.pointer(ctx)
    if not pointer:
        return False
    buffer = ctypes.create_string_buffer(key, KEY_SIZE)
    return lib.ctrl(pointer, SET_TICKET_KEYS, KEY_SIZE, buffer) == 1
