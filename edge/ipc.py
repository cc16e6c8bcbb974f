"""What the supervisor and its workers say to each other, and how it is framed (pure, no I/O).

Owns the message types of the multi-process mode (``workers: N``, see
:mod:`edge.supervisor`) and their wire form. A frame is a 4-byte big-endian payload
length followed by one msgpack-encoded message; messages are a msgspec tagged union,
so every frame says what it is (``{"type": "apply", ...}``). Configuration durations
travel as their text form (:func:`edge.config.durations.enc_hook`) and come back as
:class:`~edge.config.durations.Duration` (``dec_hook``).

Supervisor -> worker: :class:`Start` (once, first), :class:`Apply` (every validated
configuration, numbered by ``generation``), :class:`Ready` (the whole set of workers has
applied a complete configuration: answer ``/ready`` 200).
Worker -> supervisor: :class:`Started` (entry points bound), :class:`Ack` (generation
applied), :class:`Unopened` (the run-time entry points it could not bind, each time that
set changes). Supervisor -> worker, with ``runtimeEntryPoints``: :class:`Origins` (what
the providers open each run-time entry point for, which a worker's API shows). Both ways, with ``metrics.prometheus``: :class:`Metrics` (a worker's samples,
every second; the sum the supervisor made of them, which a worker's ``/metrics`` shows).

Invariants: :func:`encode` and :class:`FrameDecoder` are inverse for every message,
whatever the chunking of the bytes in between; a frame longer than ``max_frame`` or a
payload that does not decode raises :class:`IPCError` (the channel is then unusable:
its peer is broken, not merely slow).
"""

from __future__ import annotations

import struct

import msgspec

from edge.config.durations import dec_hook, enc_hook
from edge.config.dynamic import Configuration
from edge.config.static import StaticConfig
from edge.errors import EdgeError

__all__ = [
    "HEADER",
    "MAX_FRAME",
    "Ack",
    "Apply",
    "FrameDecoder",
    "IPCError",
    "Message",
    "Metrics",
    "Origins",
    "Ready",
    "Start",
    "Started",
    "ToSupervisor",
    "ToWorker",
    "Unopened",
    "encode",
]

HEADER = struct.Struct(">I")
"""The frame header: the payload length, 4 bytes, big-endian."""

MAX_FRAME = 256 * 1024 * 1024
"""Largest payload accepted (a configuration of a very large cluster is a few MB)."""


class IPCError(EdgeError):
    """A frame that cannot be read: too long, or not a message of the expected kind."""


class _Msg(msgspec.Struct, frozen=True, tag_field="type"):
    """Base of every message: frozen, tagged by the ``type`` field."""


class Start(_Msg, tag="start"):
    """First message to a worker: who it is and the static configuration to serve.

    ``static`` has concrete ports (the supervisor resolved port 0 once, so every worker
    binds the same port); ``parser`` is ``edge run --http-parser``, if given;
    ``ticket_key`` the session-ticket key every worker's TLS contexts share, so a
    ticket one worker issued resumes on another (:mod:`edge.tls.tickets`).
    """

    worker_id: int
    static: StaticConfig
    parser: str | None = None
    ticket_key: bytes | None = None


class Apply(_Msg, tag="apply"):
    """The merged dynamic configuration the watcher validated, as generation ``generation``."""

    generation: int
    configuration: Configuration


class Ready(_Msg, tag="ready"):
    """Every worker applied a complete configuration (at least ``generation``): be ready."""

    generation: int


class Started(_Msg, tag="started"):
    """The worker bound every entry point and serves (``/ping`` answers)."""

    worker_id: int
    pid: int


class Ack(_Msg, tag="ack"):
    """The worker applied configuration ``generation``."""

    generation: int
    worker_id: int


class Metrics(_Msg, tag="metrics"):
    """Prometheus samples as (family, label values, value) rows
    (:meth:`edge.entrypoints.metrics.Samples.rows`; a histogram's value is its bucket
    counts then their sum): a worker's own, or the supervisor's sum of all of them."""

    rows: list[tuple[str, list[str], float | list[float]]]


class Unopened(_Msg, tag="unopened"):
    """The run-time entry points worker ``worker_id`` could not bind, name -> why (all of
    them: it replaces the worker's last word; empty once every one is open)."""

    worker_id: int
    errors: dict[str, str]


class Origins(_Msg, tag="origins"):
    """Per source (a provider), what it opens each run-time entry point for
    (:meth:`edge.entrypoints.opened.OpenedEntryPoints.name_origins`), all of them."""

    origins: dict[str, dict[str, list[str]]]


ToWorker = Start | Apply | Ready | Metrics | Origins
ToSupervisor = Started | Ack | Metrics | Unopened
Message = Start | Apply | Ready | Started | Ack | Metrics | Unopened | Origins

_ENCODER = msgspec.msgpack.Encoder(enc_hook=enc_hook)


def encode(msg: Message) -> bytes:
    """One frame: header and payload."""
    buf = bytearray(HEADER.size)
    _ENCODER.encode_into(msg, buf, HEADER.size)
    size = len(buf) - HEADER.size
    if size > MAX_FRAME:
        raise IPCError(
            f"{type(msg).__name__} message of {size} bytes exceeds the {MAX_FRAME}-byte frame limit"
        )
    HEADER.pack_into(buf, 0, size)
    return bytes(buf)


class FrameDecoder:
    """Bytes in (any chunking), messages out: :meth:`feed` returns every complete one."""

    def __init__(self, type_: object = Message, *, max_frame: int = MAX_FRAME) -> None:
        self._decoder = msgspec.msgpack.Decoder(type_, dec_hook=dec_hook)
        self._buffer = bytearray()
        self._max = max_frame

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list:
        """Take ``data``; the messages it completes, in order. Raises :class:`IPCError`."""
        buf = self._buffer
        buf += data
        out = []
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:  # released before the buffer is resized below
            while end - pos >= HEADER.size:
                (size,) = HEADER.unpack_from(view, pos)
                if size > self._max:
                    raise IPCError(f"frame of {size} bytes exceeds the {self._max}-byte limit")
                start = pos + HEADER.size
                if end - start < size:
                    break
                try:
                    out.append(self._decoder.decode(view[start : start + size]))
                except (msgspec.DecodeError, ValueError) as exc:
                    raise IPCError(f"undecodable frame: {exc}") from None
                pos = start + size
        if pos:
            del buf[:pos]
        return out
