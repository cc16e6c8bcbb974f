"""Edge's own Redis client: asyncio.Protocol connections on the loop, a bounded pool.

Owns the connections to one Redis server for one middleware and the promise that
no caller waits longer than the configured timeouts: a command's reply within
``read_timeout`` of its sending (one timer per connection, armed for the oldest
command in flight, not one per command), a dial within ``dial_timeout``, a
paused write (the server not reading) for at most ``write_timeout``. A
connection carries any number of commands at once (pipelining: replies come in
the order sent; the commands of one loop iteration go in one write), so the pool opens a second one only when each open one has
:data:`PIPELINE_DEPTH` in flight, and at most ``max_conns``.

A connection is made when first needed (a client is built off the loop, with
each configuration), and says HELLO 3 (AUTH with it when a password is set;
AUTH alone and RESP2 on a server older than 6), then SELECT when ``db`` is set.
When a dial or a handshake fails, or a reply is late, the server is *down*:
every call fails at once with :class:`RedisUnavailable` (nothing waits on a
dead server) while a probe redials in the background after a backoff (0.1 s,
doubling to 5 s); the outage is logged once when it starts and once when it
ends. :meth:`RedisClient.evalsha` runs a :class:`Script` by its SHA1 and sends
it whole (EVAL, which also loads it) when the server answers NOSCRIPT (a
restarted or flushed server).

Invariants: callbacks never await; no reference cycle and no reference from the
loop back to a client (connections and timers hold it weakly), so a client left
behind by a reload is freed by reference counting and its connections closed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import ssl
import weakref
from collections import deque
from collections.abc import Sequence

from edge.errors import EdgeError
from edge.http.middlewares.resp import (
    NEED_DATA,
    Parser,
    Push,
    ReplyError,
    RESPError,
    bulk,
    command,
)

__all__ = [
    "PIPELINE_DEPTH",
    "RedisClient",
    "RedisTimeout",
    "RedisUnavailable",
    "ReplyError",
    "Script",
    "ScriptCall",
]

log = logging.getLogger("edge.redis")

PIPELINE_DEPTH = 64
"""Commands in flight on each open connection before the pool opens another."""

MAX_QUEUED = 4096
"""Calls waiting for the first connection at most; past it a call fails at once."""

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0


class RedisUnavailable(EdgeError):
    """The Redis server cannot answer now (refused, unreachable, closed, down)."""


class RedisTimeout(RedisUnavailable):
    """A dial or a reply took longer than its timeout."""


class Script:
    """A Lua script and its SHA1, as EVALSHA names it."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source, usedforsecurity=False).hexdigest().encode()


class ScriptCall:
    """A script with one key and fixed arguments after it: its EVALSHA and EVAL
    encoded once, all but the key (what a middleware sends per request)."""

    __slots__ = ("eval_head", "sha_head", "tail")

    def __init__(self, script: Script, args: Sequence[bytes | str | int | float]) -> None:
        count = b"*%d\r\n" % (4 + len(args))
        self.sha_head = count + bulk(b"EVALSHA") + bulk(script.sha) + bulk(1)
        self.eval_head = count + bulk(b"EVAL") + bulk(script.source) + bulk(1)
        self.tail = b"".join(bulk(arg) for arg in args)


class _Connection(asyncio.Protocol):
    """One connection: commands written as they come, replies matched in order."""

    __slots__ = (
        "client",
        "closed",
        "deadlines",
        "loop",
        "out",
        "parser",
        "paused",
        "pending",
        "read_timeout",
        "timer",
        "transport",
        "write_timeout",
    )

    def __init__(
        self,
        client: weakref.ref[RedisClient],
        loop: asyncio.AbstractEventLoop,
        read_timeout: float,
        write_timeout: float,
    ) -> None:
        self.client = client
        self.loop = loop
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.parser = Parser()
        self.out: list[bytes] = []  # commands not written yet (send, _flush)
        self.pending: deque[asyncio.Future[object]] = deque()
        self.deadlines: deque[float] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.paused: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport

    def send(self, payload: bytes, fut: asyncio.Future[object]) -> None:
        """Queue a command: the commands of one loop iteration go in one write."""
        out = self.out
        if not out:
            self.loop.call_soon(self._flush)
        out.append(payload)
        self.pending.append(fut)
        self.deadlines.append(self.loop.time() + self.read_timeout)
        if self.timer is None and self.read_timeout != math.inf:
            self.timer = self.loop.call_at(self.deadlines[0], self._check)

    def _flush(self) -> None:
        out = self.out
        if out and not self.closed:
            assert self.transport is not None
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        parser.feed(data)
        pending = self.pending
        while True:
            try:
                value = parser.next()
            except RESPError as exc:
                self._fail(RedisUnavailable(f"{self._name()}: {exc}"))
                return
            if value is NEED_DATA:
                return
            if type(value) is Push:
                continue  # out of band (RESP3): no command's reply
            if not pending:
                self._fail(RedisUnavailable(f"{self._name()}: a reply to no command"))
                return
            fut = pending.popleft()
            self.deadlines.popleft()
            if not fut.done():  # a caller gone (cancelled) drops its reply
                if type(value) is ReplyError:
                    fut.set_exception(value)
                else:
                    fut.set_result(value)

    def _check(self) -> None:
        """The oldest command's deadline: passed, the connection is given up (the
        replies after it queue behind it); else wait for that one's."""
        self.timer = None
        if not self.deadlines or self.closed:
            return
        if self.deadlines[0] <= self.loop.time():
            self._fail(RedisTimeout(f"{self._name()}: no reply within {self.read_timeout:g}s"))
        else:
            self.timer = self.loop.call_at(self.deadlines[0], self._check)

    def pause_writing(self) -> None:
        if self.paused is None:
            self.paused = self.loop.call_later(self.write_timeout, self._write_stuck)

    def resume_writing(self) -> None:
        if self.paused is not None:
            self.paused.cancel()
            self.paused = None

    def _write_stuck(self) -> None:
        self.paused = None
        self._fail(RedisTimeout(f"{self._name()}: not written within {self.write_timeout:g}s"))

    def _name(self) -> str:
        client = self.client()
        return client.where if client is not None else "redis"

    def _fail(self, exc: RedisUnavailable) -> None:
        """Give the connection up: its callers get ``exc``, the pool learns of it."""
        if self.transport is not None:
            self.transport.abort()
        self._lost(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(
            RedisUnavailable(f"{self._name()}: connection closed ({exc or 'by the server'})")
        )

    def _lost(self, exc: RedisUnavailable) -> None:
        if self.closed:
            return
        self.closed = True
        for timer in (self.timer, self.paused):
            if timer is not None:
                timer.cancel()
        self.timer = self.paused = None
        pending = self.pending
        self.pending = deque()
        self.deadlines.clear()
        for fut in pending:
            if not fut.done():
                fut.set_exception(exc)
        client = self.client()
        if client is not None:
            client._lost(self, exc)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()


class RedisClient:
    """The connections to one Redis server (module doc). Built anywhere; used on the
    loop only. ``where`` names it in every error: ``redis host:port``, prefixed by
    what uses it."""

    __slots__ = (
        "__weakref__",
        "backoff",
        "conns",
        "db",
        "dial_timeout",
        "dialing",
        "down",
        "down_since",
        "host",
        "loop",
        "max_conns",
        "min_conns",
        "outage",
        "password",
        "port",
        "probe",
        "queued",
        "read_timeout",
        "ssl",
        "tasks",
        "username",
        "where",
        "write_timeout",
    )

    def __init__(
        self,
        host: str,
        port: int,
        *,
        username: str = "",
        password: str = "",
        db: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        max_conns: int = 10,
        min_conns: int = 0,
        dial_timeout: float = 5.0,
        read_timeout: float = 3.0,
        write_timeout: float = 3.0,
        owner: str = "",
        outage: str = "",
    ) -> None:
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.db = db
        self.ssl = ssl_context
        self.max_conns = max(max_conns, 1)
        self.min_conns = min(min_conns, self.max_conns)
        self.dial_timeout = dial_timeout
        self.read_timeout = read_timeout  # math.inf: none
        self.write_timeout = write_timeout
        where = f"redis [{host}]:{port}" if ":" in host else f"redis {host}:{port}"
        self.where = f"{owner}: {where}" if owner else where
        self.outage = f"; {outage} meanwhile" if outage else ""  # what the log says of it
        self.loop: asyncio.AbstractEventLoop | None = None
        self.conns: list[_Connection] = []  # ready (handshake done)
        self.dialing = 0
        self.queued: deque[tuple[bytes, asyncio.Future[object]]] = deque()
        # Down: calls fail at once with this error until a probe's dial succeeds.
        self.down: RedisUnavailable | None = None
        self.down_since = 0.0
        self.backoff = 0.0
        self.probe: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task[None]] = set()  # dials under way

    # -- calls --------------------------------------------------------------------

    def call(self, *args: bytes | str | int | float) -> asyncio.Future[object]:
        """Send one command; the future holds its reply, a :class:`ReplyError`, or a
        :class:`RedisUnavailable` (at once while the server is down)."""
        return self.send(command(*args))

    def send(self, payload: bytes) -> asyncio.Future[object]:
        """:meth:`call` with the command already encoded (:func:`.resp.command`)."""
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
            weakref.finalize(self, _close_all, self.conns, self.queued).atexit = False
        fut = loop.create_future()
        conns = self.conns
        if conns:
            conn = conns[0]
            if len(conns) > 1:
                conn = min(conns, key=_load)
            if len(conn.pending) >= PIPELINE_DEPTH and not self.dialing:
                self._grow()
            conn.send(payload, fut)
        elif self.down is not None:
            fut.set_exception(self.down)
        elif len(self.queued) >= MAX_QUEUED:
            fut.set_exception(RedisUnavailable(f"{self.where}: {MAX_QUEUED} calls wait already"))
        else:
            self.queued.append((payload, fut))
            if not self.dialing:
                self._grow()
        return fut

    async def evalsha(
        self, script: Script, keys: Sequence[bytes | str], args: Sequence[bytes | str | int | float]
    ) -> object:
        """Run ``script`` by its SHA1; sent whole once when the server lacks it."""
        try:
            return await self.call(b"EVALSHA", script.sha, len(keys), *keys, *args)
        except ReplyError as exc:
            if exc.code != "NOSCRIPT":
                raise
        return await self.call(b"EVAL", script.source, len(keys), *keys, *args)

    async def run(self, call: ScriptCall, key: bytes) -> object:
        """:meth:`evalsha` of a prepared :class:`ScriptCall` on ``key``."""
        key = bulk(key)
        try:
            return await self.send(call.sha_head + key + call.tail)
        except ReplyError as exc:
            if exc.code != "NOSCRIPT":
                raise
        return await self.send(call.eval_head + key + call.tail)

    # -- the pool -----------------------------------------------------------------

    def _grow(self) -> None:
        if len(self.conns) + self.dialing >= self.max_conns:
            return
        self.dialing += 1
        assert self.loop is not None
        task = self.loop.create_task(_dial(weakref.ref(self), self._connect()))
        self.tasks.add(task)  # held until done (the loop holds tasks weakly)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self) -> _Connection:
        """A connection ready for commands: dialled, greeted, authenticated."""
        assert self.loop is not None
        loop = self.loop
        ref = weakref.ref(self)
        try:
            async with asyncio.timeout(self.dial_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(ref, loop, self.read_timeout, self.write_timeout),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
        except TimeoutError:
            raise RedisTimeout(
                f"{self.where}: not connected within {self.dial_timeout:g}s"
            ) from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise RedisUnavailable(f"{self.where}: cannot connect: {reason}") from None
        try:
            await self._hello(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _hello(self, conn: _Connection) -> None:
        assert self.loop is not None

        def ask(*args: bytes | str | int) -> asyncio.Future[object]:
            assert self.loop is not None
            fut: asyncio.Future[object] = self.loop.create_future()
            conn.send(command(*args), fut)
            return fut

        auth: tuple[str, ...] = ()
        if self.password:
            auth = ("AUTH", self.username or "default", self.password)
        try:
            try:
                await ask("HELLO", 3, *auth)
            except ReplyError as exc:
                if "unknown command" not in exc.message.lower():
                    raise
                if self.password:  # before Redis 6: RESP2, AUTH with the password alone
                    await ask("AUTH", *((self.username,) if self.username else ()), self.password)
            if self.db:
                await ask("SELECT", self.db)
        except ReplyError as exc:
            raise RedisUnavailable(f"{self.where}: {exc.message}") from None

    def _ready(self, conn: _Connection) -> None:
        self.dialing -= 1
        if conn.closed:  # lost right after its handshake: the calls waiting must not wait on
            self._failed(RedisUnavailable(f"{self.where}: connection closed at once"))
            return
        self.conns.append(conn)
        self.backoff = 0.0
        if self.down is not None:
            assert self.loop is not None
            log.warning(
                "%s: reachable again after %.1fs", self.where, self.loop.time() - self.down_since
            )
            self.down = None
        queued = self.queued
        while queued:
            payload, fut = queued.popleft()
            if not fut.done():
                conn.send(payload, fut)
        if len(self.conns) + self.dialing < self.min_conns:
            self._grow()

    def _failed(self, exc: RedisUnavailable) -> None:
        """A dial or handshake failed, or a reply was late: the server is down."""
        assert self.loop is not None
        if self.down is None:
            self.down_since = self.loop.time()
            reason = str(exc).removeprefix(f"{self.where}: ")
            log.warning("%s: unreachable (%s)%s", self.where, reason, self.outage)
        self.down = exc
        queued = self.queued
        while queued:
            _, fut = queued.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.probe is None and not self.dialing:
            self.backoff = min(max(self.backoff * 2, BACKOFF_FIRST), BACKOFF_MAX)
            self.probe = self.loop.call_later(self.backoff, _probe, weakref.ref(self))

    def _lost(self, conn: _Connection, exc: RedisUnavailable) -> None:
        if conn in self.conns:
            self.conns.remove(conn)
        if isinstance(exc, RedisTimeout):
            self._failed(exc)

    def close(self) -> None:
        """Close every connection (a client's end; also when it is freed)."""
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None
        _close_all(self.conns, self.queued)


def _load(conn: _Connection) -> int:
    return len(conn.pending)


def _close_all(
    conns: list[_Connection], queued: deque[tuple[bytes, asyncio.Future[object]]]
) -> None:
    for conn in list(conns):
        conn.close()
    conns.clear()
    while queued:
        _, fut = queued.popleft()
        if not fut.done():
            fut.cancel()


def _probe(ref: weakref.ref[RedisClient]) -> None:
    client = ref()
    if client is not None:
        client.probe = None
        if not client.dialing:
            client._grow()


async def _dial(ref: weakref.ref[RedisClient], connect: object) -> None:
    """Run a client's dial without holding the client (it may be freed meanwhile)."""
    assert asyncio.iscoroutine(connect)
    try:
        conn = await connect
    except RedisUnavailable as exc:
        client = ref()
        if client is not None:
            client.dialing -= 1
            client._failed(exc)
        return
    except Exception as exc:  # ssl and the like: the server is not usable
        client = ref()
        if client is not None:
            client.dialing -= 1
            client._failed(RedisUnavailable(f"{client.where}: {type(exc).__name__}: {exc}"))
        return
    client = ref()
    if client is None:
        conn.close()
        return
    client._ready(conn)
