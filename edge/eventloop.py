"""The event loop edge runs on: uvloop, imported so that its transport table costs no
Python call per connection.

uvloop files every transport it makes under its file descriptor (``Loop._transports``),
and reads that table only to refuse ``add_reader``/``add_writer`` on a descriptor a live
transport owns. The table is a ``weakref.WeakValueDictionary``, whose ``__setitem__`` is
Python code: each new connection costs three to four Python calls in ``weakref.py``
(``__setitem__``, ``KeyedRef.__new__`` and ``__init__``, and, for about a third of the
entries, the removal callback when a transport dies before its descriptor is reused).
That was 6,231 of the 62,425 instructions of a proxied request on a new connection
(callgrind, ``loadtest/bench_hotpath.py --live edge --new-connection``), and it is as
much of every TLS handshake's Python.

uvloop binds the class when its extension module is imported (a module global of
Cython's), so :func:`import_uvloop` imports it with ``weakref.WeakValueDictionary`` set to
:class:`TransportTable` for that one import, a plain dict, set and read in C. Every
module uvloop imports is imported first, so nothing else can bind the stand-in; the
real class is back before the import returns.

The trade: the table holds each transport strongly until a new transport takes its
descriptor, instead of weakly. Descriptors are reused lowest first, so it would hold as
many transports as were ever open at once (each about 1.9 KB with its libuv handle: 17
MB of RSS after a burst of 10,000 connections, kept). So :func:`prune` drops the
closed ones, off the hot path (the entrypoints' sweep calls it every ``PRUNE_EVERY``
seconds, 10 unless ``EDGE_PRUNE_EVERY`` in the environment says otherwise): one pass
over the table, about 2 ms at 20,000 entries, and a ``malloc_trim`` after a burst.
Measured after 10,000 connections: RSS 53.7 -> 73.1 MB, back to 63.6 MB at the next
prune (without the trim, freed memory stayed with glibc: 75.3 MB); what stays is
CPython's object arenas, returned only once every object in one is freed, and reused
by the next burst (64.0 MB after a second one). Where uvloop was imported before (a
test's loop), its table stays as it was; only the cost differs.
"""

from __future__ import annotations

import gc
import importlib
import logging
import math
import os
import sys
import weakref
from collections.abc import Coroutine, Mapping
from types import ModuleType
from typing import Any

from edge import allocator, descriptors

__all__ = ["TransportTable", "import_uvloop", "prune", "prune_every", "run", "transport_table"]

PRUNE_ENV = "EDGE_PRUNE_EVERY"  # seconds between two prunes where set (tests: a shorter wait)
DEFAULT_PRUNE_EVERY = 10.0


def prune_every(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds between two prunes of the transport table: ``EDGE_PRUNE_EVERY`` where
    the process's environment sets it (a test waits for a prune in a second, not ten),
    else 10. Anything but a positive finite number of seconds is a ``ValueError``."""
    raw = environ.get(PRUNE_ENV, "").strip()
    if not raw:
        return DEFAULT_PRUNE_EVERY
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise ValueError(f"{PRUNE_ENV}={raw!r}: not a positive number of seconds")
    return seconds


PRUNE_EVERY = prune_every()  # read once, as the process starts (module doc)
TRIM_AFTER = 1000  # closed transports dropped in one prune that make it trim the heap

# What uvloop's extension module imports (uvloop/includes/stdlib.pxi, and the package's
# __init__): all in sys.modules before the stand-in is set, so none of them can create
# a module-level WeakValueDictionary that is not one (logging's _handlers is one).
UVLOOP_IMPORTS = (
    "asyncio", "asyncio.log", "asyncio.base_events", "asyncio.sslproto", "asyncio.coroutines",
    "asyncio.futures", "asyncio.transports", "collections", "collections.abc",
    "concurrent.futures", "errno", "functools", "gc", "inspect", "itertools", "logging", "os",
    "signal", "socket", "ssl", "stat", "subprocess", "sys", "threading", "time", "traceback",
    "typing", "warnings", "weakref",
)  # fmt: skip

log = logging.getLogger("edge")


class TransportTable(dict):
    """uvloop's descriptor -> transport table, stored strongly (see the module doc)."""

    __slots__ = ()


def transport_table(loop: object) -> TransportTable | None:
    """``loop``'s transport table where it is a :class:`TransportTable` (found among the
    objects the loop refers to: uvloop does not expose it), else None."""
    for obj in gc.get_referents(loop):
        if type(obj) is TransportTable:
            return obj
    return None


def prune(table: TransportTable) -> int:
    """Drop the transports that closed from ``table`` (what a weak table would have
    dropped); the number dropped. After a burst (``TRIM_AFTER`` or more), the heap's
    free pages go back to the system too (:func:`edge.allocator.trim`)."""
    closed = [fd for fd, transport in table.items() if transport.is_closing()]
    for fd in closed:
        table.pop(fd, None)
    if len(closed) >= TRIM_AFTER:
        allocator.trim()
    return len(closed)


def import_uvloop() -> ModuleType:
    """uvloop, with :class:`TransportTable` as its transport table where this is the
    process's first import of it."""
    if "uvloop.loop" in sys.modules:
        import uvloop

        return uvloop
    for name in UVLOOP_IMPORTS:
        importlib.import_module(name)
    original = weakref.WeakValueDictionary
    # The stand-in is the point (module doc): a plain dict where uvloop expects the weak one.
    weakref.WeakValueDictionary = TransportTable  # type: ignore[misc, assignment]
    try:
        import uvloop
    finally:
        weakref.WeakValueDictionary = original  # type: ignore[misc]
    return uvloop


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """``uvloop.run(coro)`` on :func:`import_uvloop`'s uvloop, in a process whose
    allocator keeps its large buffers (:func:`edge.allocator.tune`) and whose open file
    limit is its hard limit (:func:`edge.descriptors.raise_limit`, logged)."""
    allocator.tune()
    before, now = descriptors.raise_limit()
    if now != before:
        log.info("open file limit: %d descriptors (raised from %d to the hard limit)", now, before)
    else:
        log.info("open file limit: %d descriptors", now)
    return import_uvloop().run(coro)
