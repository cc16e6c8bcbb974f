"""Logging set-up and the access log.

``log.format: json`` writes one orjson object per line; ``common`` a plain line.
The access log is buffered: lines are formatted only when it is enabled, kept
in memory and written in one call per flush (every 100 ms, or when
``bufferingSize`` lines are waiting), so a request costs no syscall.

The access log's ``common`` format is Traefik's CLF, field for field::

    <client> - - [<time>] "<method> <path> <protocol>" <status> <size> "<referer>"
    "<user agent>" <requests since start> "<router>" "<server URL>" <duration>ms

(one line): ``<size>`` is the body bytes sent, the referer and user agent are the
client's (``"-"`` without one, ``"`` escaped), the count is this process's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import IO

import orjson

from edge.config.static import AccessLog, Log


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class LogFile(logging.StreamHandler):
    """The handler of ``log.filePath``: :meth:`reopen` opens the path again (SIGUSR1)."""

    def __init__(self, path: str) -> None:
        super().__init__(open(path, "a", buffering=1))  # noqa: SIM115
        self.path = path

    def reopen(self) -> None:
        old = self.setStream(open(self.path, "a", buffering=1))  # noqa: SIM115
        if old is not None:
            old.close()


def reopen_logs(access_log: AccessLogger | None = None) -> None:
    """Traefik's SIGUSR1: close the log files and open them again by their paths, so a
    log rotated away (logrotate moves it, then signals) is written anew where it was.
    A file that cannot be opened keeps the old one, and the log says why."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, LogFile):
            try:
                handler.reopen()
            except OSError as exc:
                logging.getLogger("edge").error("cannot reopen the log %s: %s", handler.path, exc)
    if access_log is not None:
        access_log.reopen()
    logging.getLogger("edge").info("SIGUSR1: log files reopened")


def setup_logging(config: Log) -> None:
    handler = LogFile(config.file_path) if config.file_path else logging.StreamHandler(sys.stderr)
    if config.format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(config.python_level)
    sys.unraisablehook = log_unraisable


_unraisable_log = logging.getLogger("edge.unraisable")


def log_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook``: what Python could not raise goes to the log, not stderr.

    The one a client can cause at will is CPython's SNI callback failing to decode
    a server name that is not ASCII (no host name is): OpenSSL refuses that
    handshake with an alert, and a line per connection at WARNING would let a
    client flood the log, so it is DEBUG. Anything else is a defect: ERROR, with
    its traceback.
    """
    name = unraisable.object
    if unraisable.exc_type is UnicodeDecodeError and isinstance(
        name, bytes
    ):  # CPython's SNI callback
        _unraisable_log.debug(
            "TLS handshake refused: a server name that is not ASCII: %r", name[:255]
        )
        return
    exc_info = (unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
    # typeshed's exc_info has no (type, None, traceback), which exc_value None would
    # give; logging takes it all the same and prints the traceback.
    _unraisable_log.error(
        "%s: %r",
        unraisable.err_msg or "Exception ignored in",
        unraisable.object,
        exc_info=exc_info,  # type: ignore[arg-type]
    )


class AccessLogger:
    """Formats one line per finished request into a buffer flushed periodically."""

    FLUSH_INTERVAL = 0.1

    def __init__(self, config: AccessLog, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.json = config.format == "json"
        self.stream: IO[bytes] = (
            open(config.file_path, "ab")  # noqa: SIM115
            if config.file_path
            else sys.stdout.buffer
        )
        self.lines: list[bytes] = []
        self.limit = max(config.buffering_size, 1)
        self._timer: asyncio.TimerHandle | None = None
        self.count = 0  # requests logged since start (Traefik's RequestCount)

    def __call__(self, ex, duration: float) -> None:
        """One line for a finished :class:`~edge.http.server.exchange.Exchange`."""
        head = ex.head
        route = ex.route
        backend = ex.backend
        conn = ex.conn
        self.count += 1
        if self.json:
            line = orjson.dumps(
                {
                    "ClientHost": conn.client_ip,
                    "RequestMethod": head.method.decode("latin-1"),
                    "RequestPath": head.target.decode("latin-1"),
                    "RequestProtocol": "HTTP/" + head.version.decode(),
                    "DownstreamStatus": ex.status,
                    "DownstreamContentSize": ex.sent,
                    "RouterName": route.name if route else "",
                    "ServiceURL": backend.server.url if backend else "",
                    "EntryPointName": conn.ctx.name,
                    "Duration": int(duration * 1e9),
                    "RequestCount": self.count,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
        else:
            referer, agent = _quoted(head.headers)
            line = b'%s - - [%s] "%s %s HTTP/%s" %d %d %s %s %d "%s" "%s" %dms\n' % (
                conn.client_ip.encode(),
                time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()).encode(),
                head.method,
                head.target,
                head.version,
                ex.status,
                ex.sent,
                referer,
                agent,
                self.count,
                (route.name if route else "-").encode(),
                (backend.server.url if backend else "-").encode(),
                int(duration * 1000),
            )
        self.lines.append(line)
        if len(self.lines) >= self.limit and self.config.buffering_size:
            self.flush()
        elif self._timer is None:
            self._timer = self.loop.call_later(self.FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.lines:
            data = b"".join(self.lines)
            self.lines.clear()
            try:
                self.stream.write(data)
                self.stream.flush()
            except OSError as exc:
                logging.getLogger("edge.accesslog").error("access log write failed: %s", exc)

    def reopen(self) -> None:
        """Write what waits, then go on in a file opened again at ``filePath`` (SIGUSR1)."""
        self.flush()
        if not self.config.file_path:
            return
        try:
            stream = open(self.config.file_path, "ab")  # noqa: SIM115
        except OSError as exc:
            logging.getLogger("edge.accesslog").error("cannot reopen the access log: %s", exc)
            return
        self.stream, old = stream, self.stream
        old.close()

    def close(self) -> None:
        self.flush()


def _quoted(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    """The request's Referer and User-Agent as CLF writes them (values joined by ``,``)."""
    found: dict[bytes, list[bytes]] = {b"referer": [], b"user-agent": []}
    for name, value in headers:
        values = found.get(name.lower())
        if values is not None:
            values.append(value.strip(b" \t"))
    referer, agent = (b",".join(v) for v in found.values())
    return (
        b'"%s"' % referer.replace(b'"', b'\\"') if referer else b'"-"',
        b'"%s"' % agent.replace(b'"', b'\\"') if agent else b'"-"',
    )
