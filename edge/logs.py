"""Logging set-up: edge's own log (``log``), and SIGUSR1's reopening of the log files.

``log.format: json`` writes one orjson object per line; ``common`` a plain line. The
access log (``accessLog``) is :mod:`edge.entrypoints.accesslog`'s.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import orjson

from edge.config.static import Log

if TYPE_CHECKING:
    from edge.entrypoints.accesslog import AccessLogger


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
