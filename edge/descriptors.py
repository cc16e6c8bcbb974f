"""The process's file descriptor budget: the open file limit raised at start, and the
descriptors the data plane leaves to everything else.

Every connection, upstream connection, UDP session, configuration file read and DNS
lookup takes a descriptor from one table, capped by the soft ``RLIMIT_NOFILE``. Once
it is full, each of them fails with EMFILE: a route with no pooled connection answers
502, the file provider cannot list its folder, and libuv, which owns every listening
socket, accepts each new connection and closes it at once (its "EMFILE trick": it
keeps one spare descriptor, gives it up to accept the waiting connections, closes
them and takes the spare back). So a full table sheds connections without spinning,
the listener stays, and nothing is logged; ``/ping`` is shed with the rest.

:func:`raise_limit` sets the soft limit to the hard one at start, as Go's runtime does
for Traefik (and nginx's ``worker_rlimit_nofile``); ``eventloop.run`` calls it in
every edge process and logs the figure.

:class:`Budget` keeps :data:`RESERVE` descriptors out of the data plane's reach: an
entry point :meth:`~Budget.admit`\\ s each accepted connection and closes it at once
when fewer than the reserve would be left (a connection may dial an upstream too, so
room for one connection is two descriptors), and UDP sessions are capped below the
limit (``edge.entrypoints.udp``). The entry point answering ``/ping``, ``/ready`` and
the API is held to a quarter of the reserve only, so it keeps answering while the data
plane is full, and the last quarter is left to the providers, the watcher and
certificate reads. Nothing here is scheduled: the entry point counts what it shed and
its sweep logs the count once per burst.

Counting is cheap where it is frequent. Open descriptors are counted by listing
``/proc/self/fd`` (25 ms at 20,000, so never per connection); a count grants
*credits*, a third of the room left above the reserve, and each admitted connection
spends one (client, upstream, and a third for whatever the live connections open
meanwhile). Only when the credits are spent is the table counted again, so the cost
per connection is a decrement while the table is far from full, and a recount per
third of the room left as it fills. While the table is full, a shed costs one clock
read: it is counted again at most every :data:`BACKOFF` seconds, and connections
are admitted again as soon as one recount finds room. The limit is read at each
recount, so a limit lowered or raised while edge runs (``prlimit --pid``) holds.

Invariant: between two counts, the admitted connections never outnumber the
credits the first granted, so the data plane's accepts alone never take the table
past ``limit - reserve``.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable

__all__ = ["BACKOFF", "INTERNAL_RESERVE", "RESERVE", "Budget", "count_open", "raise_limit"]

RESERVE = 64  # descriptors the data plane leaves (the internal entry point may use 48)
INTERNAL_RESERVE = RESERVE // 4  # what even the internal entry point leaves: providers, files
BACKOFF = 0.25  # seconds between two counts while the table is full
PER_CONNECTION = 3  # descriptors one admitted connection is budgeted (client, upstream, slack)
_FD_DIRS = ("/proc/self/fd", "/dev/fd")


def raise_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; (soft before, soft now).

    An unlimited hard limit (root may have one) is left as it is: the soft one stays,
    since an unlimited table cannot be allocated by every program edge starts."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # a sandbox that refuses: keep the soft limit
        return soft, soft
    return soft, hard


def soft_limit() -> int:
    """The soft RLIMIT_NOFILE (0: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 0 if soft == resource.RLIM_INFINITY else soft


def count_open() -> int:
    """Descriptors open in this process (-1 where the platform cannot list them)."""
    for path in _FD_DIRS:
        try:
            return len(os.listdir(path)) - 1  # listdir's own descriptor is listed too
        except OSError:
            continue
    return -1


class Budget:
    """Admission of new connections against the descriptor table (see the module doc).

    ``limit``, ``count`` and ``clock`` are :func:`soft_limit`, :func:`count_open` and
    ``time.monotonic`` unless a test gives others. ``in_use`` is the last count.

    The internal entry point (``internal=True``) spends the data plane's credits while
    there are any, then credits of its own, granted above :data:`INTERNAL_RESERVE`:
    the room between the two reserves is its alone once the data plane is full.
    """

    __slots__ = (
        "_full_until",
        "_internal_credits",
        "_internal_full_until",
        "clock",
        "count",
        "credits",
        "in_use",
        "internal_reserve",
        "limit",
        "reserve",
    )

    def __init__(
        self,
        *,
        reserve: int = RESERVE,
        internal_reserve: int = INTERNAL_RESERVE,
        limit: Callable[[], int] = soft_limit,
        count: Callable[[], int] = count_open,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= internal_reserve <= reserve:
            raise ValueError(
                f"descriptor reserves: internal {internal_reserve} must be within 0..{reserve}"
            )
        self.reserve = reserve
        self.internal_reserve = internal_reserve
        self.limit = limit
        self.count = count
        self.clock = clock
        self.credits = 0
        self._internal_credits = 0
        self._full_until = 0.0  # while the data plane is full: when to count again
        self._internal_full_until = 0.0
        self.in_use = 0

    def admit(self, internal: bool = False) -> bool:
        """May one more connection be served? False: close it at once."""
        if self.credits > 0:
            self.credits -= 1
            return True
        if internal:
            if self._internal_credits > 0:
                self._internal_credits -= 1
                return True
            granted = self._grant(self.internal_reserve, "_internal_full_until")
            if granted > 0:
                # At most its own region's worth: the data plane's credits, granted from
                # the same room, do not count these.
                region = (self.reserve - self.internal_reserve) // PER_CONNECTION
                self._internal_credits = min(granted, region) - 1
                return True
            return False
        granted = self._grant(self.reserve, "_full_until")
        if granted > 0:
            self.credits = granted - 1
            return True
        return False

    def _grant(self, reserve: int, until: str) -> int:
        """Count the table (at most every BACKOFF while it stays full): how many
        connections fit above ``reserve``; 0 sheds this one."""
        now = self.clock()
        if now < getattr(self, until):
            return 0
        granted = self.room(reserve) // PER_CONNECTION
        if granted > 0:
            setattr(self, until, 0.0)
            return granted
        setattr(self, until, now + BACKOFF)
        return 0

    def room(self, reserve: int) -> int:
        """Descriptors free now above ``reserve`` (a count of the table); very large
        where there is no limit or no way to count."""
        limit = self.limit()
        in_use = self.count()
        if limit <= 0 or in_use < 0:
            return 1 << 30
        self.in_use = in_use
        return limit - reserve - in_use
