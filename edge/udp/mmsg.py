"""Datagrams from a listening socket by ``recvmmsg(2)``, through ctypes on libc.

Owns :class:`BatchReader`: one call reads every datagram waiting on a socket (up to
:data:`VLEN`), each into a slot of its own in one buffer, with its sender's address
as the raw ``sockaddr`` bytes the kernel wrote. Those bytes are the session key: no
``inet_ntop`` and no tuple per datagram (the socket module's ``recvfrom`` formats
the address of every datagram, about 2,400 instructions), and an empty socket is a
return of -1, not a raised BlockingIOError. A ctypes call costs about 2,900
instructions whatever it does (libffi prepares the call each time), more than the
socket module's ``send`` or ``recv`` (900 and 1,700), so only the listener's reads
go this way, where one call serves a whole batch; upstream sockets and replies stay
on the socket module. A wildcard listener's IP_PKTINFO / IPV6_PKTINFO comes in a
control slot per datagram (``control``), read only when a session needs it.

Invariants: a slot holds a whole datagram (:data:`SLOT` exceeds the largest UDP
payload, so nothing is truncated); a slot's bytes, name and ancillary data are valid
until the next read, and a control slot a read used holds its full room again (by
:meth:`BatchReader.rearm`) before the next; the library is loaded as ``PyDLL``, so the GIL is held
through the call, which never blocks (the socket is non-blocking).
"""

from __future__ import annotations

import array
import ctypes
import errno
import functools
import mmap
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["NAME_SIZE", "SLOT", "VLEN", "BatchReader", "address_of", "recvmmsg"]

_CMSGHDR = struct.Struct("@Nii")  # cmsg_len (size_t), cmsg_level, cmsg_type
_WORD = ctypes.sizeof(ctypes.c_size_t)
_WORD_CODES: dict[int, Literal["Q", "I"]] = {8: "Q", 4: "I"}
_WORD_CODE = _WORD_CODES[_WORD]  # an array / memoryview code for a size_t

VLEN = 64  # datagrams one read takes at most
SLOT = 65536  # bytes per datagram slot: more than any UDP payload (65,507 over IPv4)
NAME_SIZE = {socket.AF_INET: 16, socket.AF_INET6: 28}  # sizeof(sockaddr_in), (sockaddr_in6)


class _IOVec(ctypes.Structure):
    _fields_ = (("base", ctypes.c_void_p), ("len", ctypes.c_size_t))


class _MsgHdr(ctypes.Structure):
    _fields_ = (
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.c_void_p),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    )


class _MMsgHdr(ctypes.Structure):
    _fields_ = (("hdr", _MsgHdr), ("len", ctypes.c_uint))


def recvmmsg() -> Callable[..., int] | None:
    """libc's ``recvmmsg`` as a ctypes function; None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.PyDLL(None, use_errno=True).recvmmsg
    except (OSError, AttributeError):
        return None


def address_of(name: bytes) -> tuple[Any, ...]:
    """The socket module's form of a raw ``sockaddr_in`` / ``sockaddr_in6``: (host, port)
    or (host, port, flowinfo, scope_id), as ``recvfrom`` would have returned it."""
    port = int.from_bytes(name[2:4], "big")
    if len(name) == NAME_SIZE[socket.AF_INET]:
        return socket.inet_ntop(socket.AF_INET, name[4:8]), port
    flowinfo = int.from_bytes(name[4:8], "big")
    scope_id = int.from_bytes(name[24:28], sys.byteorder)
    return socket.inet_ntop(socket.AF_INET6, name[8:24]), port, flowinfo, scope_id


class BatchReader:
    """Buffers and headers for reading up to ``vlen`` datagrams from ``sock`` per call.

    After ``count = reader.read()`` (0: nothing waiting, or an error, then in
    ``reader.error``), datagram ``i < count`` is ``reader.views[i][:reader.size(i)]``
    from ``reader.names[i].raw``. The hot path reads the fields directly.

    ``control``: bytes of ancillary data kept per datagram (0: none), for a listener
    with IP_PKTINFO / IPV6_RECVPKTINFO on: :meth:`ancillary` gives datagram ``i``'s as
    ``recvmsg`` does. The kernel writes back how much of that room each datagram used,
    so after a read :meth:`rearm` gives the used slots their full room again.
    """

    __slots__ = (
        "_buffer",
        "_control",
        "_first",
        "_full",
        "_iovs",
        "_msgs",
        "_raw",
        "_step",
        "at",
        "control",
        "error",
        "fd",
        "lengths",
        "names",
        "receive",
        "stride",
        "views",
        "vlen",
        "words",
    )

    _buffer: mmap.mmap
    _control: ctypes.Array[ctypes.c_char]
    _first: int
    _full: memoryview[int]
    _iovs: ctypes.Array[_IOVec]
    _msgs: ctypes.Array[_MMsgHdr]
    _raw: bytearray
    _step: int
    at: int
    control: int
    error: int
    fd: int
    lengths: memoryview[int]
    names: list[ctypes.Array[ctypes.c_char]]
    receive: Callable[[], int]  # recvmmsg with its arguments bound (see __init__)
    stride: int
    views: list[memoryview]
    vlen: int
    words: memoryview[int]

    def __init__(
        self, sock: socket.socket, call: Callable[..., int], vlen: int = VLEN, control: int = 0
    ) -> None:
        """``call``: :func:`recvmmsg`'s function (not None)."""
        size = NAME_SIZE[sock.family]
        self.fd = sock.fileno()
        self.vlen = vlen
        self.error = 0
        # Anonymous memory: pages are committed as datagrams reach them, so 64 slots of
        # 64 KiB cost what the datagrams use, not 4 MiB up front.
        self._buffer = mmap.mmap(-1, vlen * SLOT)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._buffer))
        self.names = [(ctypes.c_char * size)() for _ in range(vlen)]
        self._iovs = (_IOVec * vlen)()
        self._raw = bytearray(ctypes.sizeof(_MMsgHdr) * vlen)
        self._msgs = (_MMsgHdr * vlen).from_buffer(self._raw)
        self.control = control
        self._control = (ctypes.c_char * max(control * vlen, 1))()
        cbase = ctypes.addressof(self._control)
        for i in range(vlen):
            self._iovs[i].base = base + i * SLOT
            self._iovs[i].len = SLOT
            hdr = self._msgs[i].hdr
            hdr.name = ctypes.addressof(self.names[i])
            hdr.namelen = size  # the kernel writes back the same size for this family
            hdr.iov = ctypes.addressof(self._iovs[i])
            hdr.iovlen = 1
            if control:
                hdr.control = cbase + i * control
                hdr.controllen = control
        whole = memoryview(self._buffer)
        self.views = [whole[i * SLOT : (i + 1) * SLOT] for i in range(vlen)]
        # msg_len of datagram i is lengths[stride * i + at] (unsigned ints)
        self.lengths = memoryview(self._raw).cast("I")
        self.stride = ctypes.sizeof(_MMsgHdr) // 4
        self.at = _MMsgHdr.len.offset // 4
        # msg_controllen of datagram i is words[step * i + first] (size_t); _full: the room
        self.words = memoryview(self._raw).cast(_WORD_CODE)
        self._full = memoryview(array.array(_WORD_CODE, [control] * vlen))
        self._step = ctypes.sizeof(_MMsgHdr) // _WORD
        self._first = (_MMsgHdr.hdr.offset + _MsgHdr.controllen.offset) // _WORD
        # The call with its arguments bound: what the hot path makes (the count read,
        # or -1 with errno set: EAGAIN when nothing is waiting).
        self.receive = functools.partial(call, self.fd, self._msgs, vlen, 0, None)

    def read(self) -> int:
        """Datagrams read into the slots (0: none waiting, or an error: see ``error``)."""
        count = self.receive()
        if count > 0:
            return count
        self.failed(count)
        return 0

    def failed(self, count: int) -> int:
        """After a read that returned ``count`` < 1: its errno, kept in ``error``; 0 when
        it only found the socket empty or was interrupted."""
        err = ctypes.get_errno() if count < 0 else 0
        self.error = 0 if err in (errno.EAGAIN, errno.EINTR) else err
        return self.error

    def size(self, i: int) -> int:
        return self.lengths[self.stride * i + self.at]

    def rearm(self, count: int) -> None:
        """Give the first ``count`` datagrams' ancillary room back its full size."""
        if count == 1:  # the common case: one store, not a strided copy
            self.words[self._first] = self.control
        else:
            first, step = self._first, self._step
            self.words[first : first + step * count : step] = self._full[:count]

    def ancillary(self, i: int) -> list[tuple[int, int, bytes]]:
        """Datagram ``i``'s ancillary data as ``recvmsg`` gives it: (level, type, data)."""
        used = self.words[self._first + self._step * i]
        raw = bytes(memoryview(self._control)[i * self.control : i * self.control + used])
        items = []
        at = 0
        while at + _CMSGHDR.size <= len(raw):
            length, level, kind = _CMSGHDR.unpack_from(raw, at)
            if length < _CMSGHDR.size:
                break
            items.append((level, kind, raw[at + _CMSGHDR.size : at + length]))
            at += (length + _WORD - 1) & -_WORD  # CMSG_ALIGN on Linux: to sizeof(size_t)
        return items

    def datagram(self, i: int) -> bytes:
        """Datagram ``i`` of the last read, copied out of its slot."""
        return bytes(self.views[i][: self.size(i)])

    def close(self) -> None:
        """Release the buffer (the views first: an exported buffer cannot be closed)."""
        for view in self.views:
            view.release()
        self.views = []
        self.lengths.release()
        self.words.release()
        del self._msgs, self.receive  # the headers and the bound call: a closed reader is not read
        self._buffer.close()
