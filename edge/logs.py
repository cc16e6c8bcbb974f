"""Logging set-up and the access log.

``log.format: json`` writes one orjson object per line; ``common`` a plain line.
The access log is buffered: lines are formatted only when it is enabled, kept
in memory and written in one call per flush (every 100 ms, or when
``bufferingSize`` lines are waiting), so a request costs no syscall.
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


def setup_logging(config: Log) -> None:
    stream: IO[str] = open(config.file_path, "a", buffering=1) if config.file_path else sys.stderr  # noqa: SIM115
    handler = logging.StreamHandler(stream)
    if config.format == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(config.python_level)


class AccessLogger:
    """Formats one line per finished request into a buffer flushed periodically."""

    FLUSH_INTERVAL = 0.1

    def __init__(self, config: AccessLog, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.json = config.format == "json"
        self.stream: IO[bytes] = open(config.file_path, "ab") if config.file_path else sys.stdout.buffer  # noqa: SIM115
        self.lines: list[bytes] = []
        self.limit = max(config.buffering_size, 1)
        self._timer: asyncio.TimerHandle | None = None

    def __call__(self, ex, duration: float) -> None:
        """One line for a finished :class:`~edge.http.exchange.Exchange`."""
        head = ex.head
        route = ex.route
        backend = ex.backend
        conn = ex.conn
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
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
        else:
            line = b'%s - - [%s] "%s %s HTTP/%s" %d %d "-" "-" "%s" "%s" %dms\n' % (
                conn.client_ip.encode(),
                time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime()).encode(),
                head.method,
                head.target,
                head.version,
                ex.status,
                ex.sent,
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

    def close(self) -> None:
        self.flush()
