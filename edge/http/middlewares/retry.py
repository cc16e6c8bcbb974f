"""Traefik v3's ``retry``: send a request again when its server could not be reached.

The middleware itself only hands its policy to the request (``fwd.retry``); the
exchange (:mod:`edge.http.server.exchange`) applies it, since only it knows what
reached the server and the client. A request is attempted again, on the server its
service picks next, after a network failure (connection refused or unreachable,
the connection closed before any byte of the response) and only while no byte of
the response has reached the client, as Traefik's retry does (it stops at the
first answer, whatever its status; a response header timeout or an invalid
response is an answer here: a 504 or a 502, not retried). A failure after the
request went out is retried only for a request that can be sent twice without
harm (:func:`edge.http.server.exchange.replayable`) and has no body (edge keeps
none once sent); a dial that failed sent nothing, so any request goes again, with
the body edge holds for it meanwhile.

``attempts`` counts every try, the first included (1: no retry). Between tries the
exchange waits :meth:`Retry.backoff`: Traefik's exponential backoff (cenkalti's
``ExponentialBackOff`` with ``initialInterval``, a randomisation factor of 0.5 and
a multiplier of ``2 ** (1 / (attempts - 1))``, so the last wait is about twice
the first); no wait when ``initialInterval`` is 0.

Invariant: built once per configuration; it holds the count of retries made
(``retries``, for the API and tests) and no per-request state.
"""

from __future__ import annotations

import random

from edge.http.middlewares import Answer, Forward, Middleware

__all__ = ["RANDOMIZATION", "Retry"]

RANDOMIZATION = 0.5
"""The backoff's randomisation factor (cenkalti/backoff's default, which Traefik keeps)."""

MAX_INTERVAL = 60.0
"""The longest wait between two tries, in seconds (cenkalti/backoff's default)."""


class Retry(Middleware):
    """Up to ``attempts`` tries of a request, ``initial_interval`` seconds of backoff."""

    __slots__ = ("attempts", "initial_interval", "multiplier", "retries")

    def __init__(self, name: str, attempts: int, initial_interval: float = 0.0) -> None:
        super().__init__(name)
        if attempts < 1:
            raise ValueError(f"middleware {name}: retry.attempts must be at least 1")
        self.attempts = attempts
        self.initial_interval = max(0.0, initial_interval)
        self.multiplier = 2 ** (1 / (attempts - 1)) if attempts > 1 else 1.0
        self.retries = 0  # tries after the first, over every request

    def request(self, fwd: Forward) -> Answer | None:
        if self.attempts > 1:
            fwd.retry = self
        return None

    def backoff(self, attempt: int, rand: float | None = None) -> float:
        """Seconds to wait before try ``attempt`` (2 for the first retry); ``rand`` in
        [0, 1) stands for the random draw (tests)."""
        if self.initial_interval <= 0:
            return 0.0
        interval = min(self.initial_interval * self.multiplier ** (attempt - 2), MAX_INTERVAL)
        r = random.random() if rand is None else rand
        delta = RANDOMIZATION * interval
        return (interval - delta) + r * (2 * delta)
