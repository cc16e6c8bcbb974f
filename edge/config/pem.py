"""Certificates and keys as the configuration gives them: a file path, or the PEM itself.

Owns the one rule every reader of ``certFile``/``keyFile``/``caFiles``/``rootCAs``
follows (the TLS certificate snapshot, :mod:`edge.tls.certs`; the servers
transports' files checked by :mod:`edge.config.runtime`): a value holding
``-----BEGIN`` is inline PEM and never appears in a message or a log; any other
value is a path. And :func:`pem_file`, the path OpenSSL reads such bytes from
(``ssl`` loads certificate chains and keys from files only).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

from edge.errors import ConfigError

__all__ = ["PEM_MARK", "describe", "pem_file", "read_pem"]

PEM_MARK = "-----BEGIN"


def describe(value: str) -> str:
    """The value as a message may name it: the path, or "inline PEM"."""
    return "inline PEM" if PEM_MARK in value else value


def read_pem(what: str, value: str) -> bytes:
    """The PEM bytes of a path or inline value; ConfigError naming the file."""
    if PEM_MARK in value:
        return value.encode()
    if not value:
        raise ConfigError(f"{what} is empty")
    try:
        with open(value, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ConfigError(f"{what} {value}: no such file") from None
    except OSError as exc:  # the cause stays: a reader may tell a failure that passes (EMFILE)
        raise ConfigError(f"{what} {value}: cannot read: {exc.strerror}") from exc


@contextlib.contextmanager
def pem_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can read ``data`` from: an anonymous memory file where the OS has
    them (a key never touches a disk), else a private temporary file (created 0600)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("edge-tls", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="edge-tls-") as f:
        f.write(data)
        f.flush()
        yield f.name
