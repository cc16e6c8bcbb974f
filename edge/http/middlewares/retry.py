"""Traefik v3's ``retry``: send a request again when its server could not be reached,
or answered with a status the configuration names.

The middleware hands its policy to the request (``fwd.retry``); the exchange
(:mod:`edge.http.server.exchange`) asks it (:meth:`Retry.again`) after each try
that went wrong, since only the exchange knows what reached the server and the
client. Another try goes to the server the service picks next, and only while no
byte of the response has reached the client. Two reasons for one, as Traefik 3.7's:

- **A network failure** (connection refused or unreachable, closed before any
  byte of the response), unless ``disableRetryOnNetworkError``. A failure after
  the request went out is retried only for a request that can be sent twice
  without harm (:func:`replayable`) and whose body, if any, edge holds (it keeps
  none it streamed); a dial that failed sent nothing, so any request goes again,
  with the body edge holds for it meanwhile. A response header timeout or an
  invalid response is no network failure: a 504 or a 502, retried only by status.
- **A status** in ``status`` (``"500-599"``, ``"429"``): the server's answer, or
  edge's own 502 or 504 for a try that failed, goes to no client and the request
  goes again. Only for a request :func:`replayable` says may be sent twice, or any
  request with ``retryNonIdempotentMethod`` (Traefik retries every method but POST,
  PATCH and LOCK; edge keeps its one rule of what may be sent twice, so PUT and
  DELETE need the key too, or an ``Idempotency-Key``). Its body is held before it
  goes (:attr:`Forward.spool`, as Traefik reads it first) when its Content-Length
  is at most ``maxRequestBodyBytes`` (2 MiB by default; negative: no limit); a
  bigger one, or a chunked one (edge cannot stop holding a body half way), goes
  as it comes and is not retried by status.

``attempts`` counts every try, the first included (1: no retry); the last try's
answer goes to the client whatever it is. ``timeout`` (0: none) bounds the time
from the first try within which another may start; past it the answer goes as it
is. Between tries the exchange waits :meth:`Retry.backoff`: Traefik's exponential
backoff (cenkalti's ``ExponentialBackOff`` with ``initialInterval``, a
randomisation factor of 0.5 and a multiplier of ``2 ** (1 / (attempts - 1))``, so
the last wait is about twice the first); no wait when ``initialInterval`` is 0.
Not as Traefik: a response that edge itself answers before the service (another
middleware's refusal, a 503 for a service with no server) is never retried.

Invariant: built once per configuration; it holds the count of retries made
(``retries``, for the API and tests) and no per-request state.
"""

from __future__ import annotations

import random

from edge.config.dynamic import Retry as RetryConfig
from edge.config.dynamic import http_code_ranges
from edge.http.codec import RequestHead
from edge.http.middlewares import Answer, Forward, Middleware
from edge.http.middlewares.buffering import Spool

__all__ = ["DEFAULT_MAX_BODY", "IDEMPOTENT", "RANDOMIZATION", "Retry", "replayable", "retry"]

RANDOMIZATION = 0.5
"""The backoff's randomisation factor (cenkalti/backoff's default, which Traefik keeps)."""

MAX_INTERVAL = 60.0
"""The longest wait between two tries, in seconds (cenkalti/backoff's default)."""

DEFAULT_MAX_BODY = 2 * 1024 * 1024
"""``maxRequestBodyBytes`` unless set: the largest body held for a retry by status
(Traefik's ``RetryDefaultMaxRequestBodyBytes``)."""

IDEMPOTENT = frozenset((b"GET", b"HEAD", b"OPTIONS", b"TRACE"))
"""The methods :func:`replayable` says may go twice (Go's ``isReplayable``)."""

_KEYS = (b"idempotency-key", b"x-idempotency-key")


def replayable(head: RequestHead) -> bool:
    """A request that may go out again after it may have reached its server: Go's
    ``Request.isReplayable``, which Traefik's transport follows (a safe method, or
    one carrying ``Idempotency-Key`` / ``X-Idempotency-Key``)."""
    if head.method in IDEMPOTENT:
        return True
    return any(name.lower() in _KEYS for name, _ in head.headers)


class Retry(Middleware):
    """Up to ``attempts`` tries of a request, ``initial_interval`` seconds of backoff;
    ``statuses``: the ranges retried by status (empty: none), ``timeout`` (seconds,
    0: none), ``max_body``, ``network`` and ``any_method`` as the module doc says."""

    __slots__ = (
        "any_method",
        "attempts",
        "initial_interval",
        "max_body",
        "multiplier",
        "network",
        "retries",
        "statuses",
        "timeout",
    )

    def __init__(
        self,
        name: str,
        attempts: int,
        initial_interval: float = 0.0,
        *,
        timeout: float = 0.0,
        statuses: tuple[tuple[int, int], ...] = (),
        max_body: int = DEFAULT_MAX_BODY,
        network: bool = True,
        any_method: bool = False,
    ) -> None:
        super().__init__(name)
        if attempts < 1:
            raise ValueError(f"middleware {name}: retry.attempts must be at least 1")
        if not network and not statuses:
            raise ValueError(
                f"middleware {name}: retry.disableRetryOnNetworkError needs retry.status"
            )
        self.attempts = attempts
        self.initial_interval = max(0.0, initial_interval)
        self.multiplier = 2 ** (1 / (attempts - 1)) if attempts > 1 else 1.0
        self.timeout = max(0.0, timeout)
        self.statuses = statuses
        self.max_body = max_body
        self.network = network
        self.any_method = any_method
        self.retries = 0  # tries after the first, over every request

    def request(self, fwd: Forward) -> Answer | None:
        if self.attempts > 1:
            fwd.retry = self
            head = fwd.head
            if (
                self.statuses
                and head is not None
                and head.content_length
                and fwd.spool is None
                and (self.max_body < 0 or head.content_length <= self.max_body)
                and (self.any_method or replayable(head))
            ):
                # Held, so a try answered with a retried status can send it again.
                fwd.spool = Spool(0, self.max_body if self.max_body > 0 else 0)
        return None

    def again(
        self,
        tries: int,
        elapsed: float,
        status: int,
        sent: bool | None,
        replayable: bool,
        streamed: bool,
    ) -> float | None:
        """The seconds to wait before another try, or None for none, after try
        ``tries`` (1: the first) ended ``elapsed`` seconds after the first began,
        answered with ``status`` (edge's own 502 or 504 for a failed try). ``sent``:
        None for an answer or a failure that is no network one (a timeout, an
        invalid response), else whether the request may have reached the server;
        ``replayable``: the request may go twice (:func:`replayable`); ``streamed``:
        it has a body edge does not hold."""
        if tries >= self.attempts or (self.timeout and elapsed >= self.timeout):
            return None
        if not (
            self._network(sent, replayable, streamed) or self._status(status, replayable, streamed)
        ):
            return None
        self.retries += 1
        return self.backoff(tries + 1)

    def _network(self, sent: bool | None, replayable: bool, streamed: bool) -> bool:
        if sent is None or not self.network:
            return False
        return not sent or (replayable and not streamed)

    def _status(self, status: int, replayable: bool, streamed: bool) -> bool:
        if streamed or not (replayable or self.any_method):
            return False
        return any(low <= status <= high for low, high in self.statuses)

    def backoff(self, attempt: int, rand: float | None = None) -> float:
        """Seconds to wait before try ``attempt`` (2 for the first retry); ``rand`` in
        [0, 1) stands for the random draw (tests)."""
        if self.initial_interval <= 0:
            return 0.0
        interval = min(self.initial_interval * self.multiplier ** (attempt - 2), MAX_INTERVAL)
        r = random.random() if rand is None else rand
        delta = RANDOMIZATION * interval
        return (interval - delta) + r * (2 * delta)


def retry(name: str, config: RetryConfig) -> Retry:
    """The retry middleware ``config`` (validated) describes."""
    c = config
    return Retry(
        name,
        c.attempts,
        c.initial_interval,
        timeout=c.timeout,
        statuses=http_code_ranges(c.status),
        max_body=c.max_request_body_bytes,
        network=not c.disable_retry_on_network_error,
        any_method=c.retry_non_idempotent_method,
    )
