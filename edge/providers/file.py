"""The file provider: dynamic configuration from one file or a directory of files.

Owns reading ``providers.file``: one file, or every ``*.yml``/``*.yaml``/``*.toml``/
``*.json`` under a directory (recursively, hidden entries skipped, in sorted order),
merged into one configuration in which every element name is unique (a name defined in
two files is an error naming both). With ``watch``, changes are found by polling
``os.stat`` (inode, mtime_ns, size) of every file and the listing itself; no new
dependency, no thread.

Invariants: a configuration is published only when the result differs from the
last one published; a source that does not decode at all (syntax, a key error
outside any element) is logged once per change (file and key path) and the last
good configuration stays in force. A key error inside an element (router, service,
middleware, serversTransport, TLS options, store or certificate) costs only that
element, as in Traefik: it is logged with its key path and disabled (the API and
``edge check`` show it, and the routers using it, each with its reason) or left out,
and the rest of the file is served (see :func:`edge.config.loader.decode_dynamic`).
In a directory each file stands alone: one that does not decode is left out with its
error, or keeps its last good version, and the other files are served; an element
whose name an earlier file (in sorted order) defines is left out with an error
naming both files, and the rest of its file is served (Traefik keeps the first too). A file caught mid-rewrite cannot be published
half-written: a change is read only once its stat has been stable for one poll
interval (or is older than that, or the source has kept changing for MAX_SETTLE), a
file that has just become empty only once it stayed so for EMPTY_SETTLE, and a read
during which the stat changed is discarded and retried at the next poll.
Traefik options edge lacks that belong to no element are logged with the errors
(see :mod:`edge.config.loader`); those inside an element disable it at validation.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from edge.config.dynamic import (
    CertAndStores,
    Configuration,
    HTTPConfiguration,
    TCPConfiguration,
    TLSConfiguration,
    UDPConfiguration,
)
from edge.config.loader import EXTENSIONS, Unsupported, load_dynamic
from edge.errors import ConfigError
from edge.providers.base import Message, Publish

__all__ = ["FileProvider", "load_file_provider"]

log = logging.getLogger(__name__)

MAX_SETTLE = 0.5  # seconds a continuously changing source waits at most before it is read
EMPTY_SETTLE = 2.0  # seconds a file that has just become empty waits before it is read
OFFLOAD_BYTES = 64 * 1024  # a source this large is decoded in a thread (about 300 routers, 20 ms)
_Stat = tuple[tuple[str, int, int, int], ...]  # (path, inode, mtime_ns, size) per file
# what a read found: the configuration (or why there is none), each file's part, the
# errors of files left out or kept at their last good version, the notices
_Loaded = tuple[
    Configuration | ConfigError, dict[str, Configuration], list[ConfigError], list[Unsupported]
]


def load_file_provider(
    filename: str | None = None,
    directory: str | None = None,
    *,
    errors: list[ConfigError] | None = None,
    notices: list[Unsupported] | None = None,
) -> Configuration:
    """Read the provider's source once; raises ``ConfigError`` naming the file at fault.

    With ``errors``, an element with a key error is disabled or left out and a
    directory's files that cannot be served are left out, each error appended there
    (see :func:`read_directory`); without it the first one raises.
    ``notices``: as for :func:`edge.config.loader.load_dynamic`.
    """
    if (filename is None) == (directory is None):
        raise ValueError("set exactly one of filename, directory")
    if filename is not None:
        return load_dynamic(filename, notices, errors)
    assert directory is not None
    failed: list[ConfigError] = [] if errors is None else errors
    conf, _ = read_directory(directory, failed, notices)
    if errors is None and failed:
        raise failed[0]
    return conf


def read_directory(
    directory: str,
    errors: list[ConfigError],
    notices: list[Unsupported] | None = None,
    previous: Mapping[str, Configuration] | None = None,
) -> tuple[Configuration, dict[str, Configuration]]:
    """Every file of ``directory`` merged, and what each file contributed.

    A file that does not decode is left out, or, when ``previous`` (what each file
    contributed to the last read) has it, keeps that version; an element with a key
    error is disabled or left out, the rest of its file kept. An element whose name
    an earlier file (in sorted order) defines is left out, the rest of its file kept.
    Each error is appended to ``errors``, saying what was left out or kept. Raises ``ConfigError`` only when
    ``directory`` is not one.
    """
    if not os.path.isdir(directory):
        raise ConfigError("not a directory", source=directory)
    used: dict[str, Configuration] = {}
    seen: dict[tuple[str, str], str] = {}  # (table, name) -> file
    for path in _files(directory):
        elements: list[ConfigError] = []  # kept only when the file decodes
        try:
            conf = load_dynamic(path, notices, elements)
            errors += elements
        except ConfigError as exc:
            last = previous.get(path) if previous is not None else None
            if last is None:
                errors.append(_noted(exc, "left out"))
                continue
            errors.append(_noted(exc, "its last good version is kept"))
            conf = last
        names = [(table, name) for table, elements in _tables(conf) for name in elements]
        clashes = [key for key in names if key in seen]
        for table, name in clashes:
            message = f"{table} {name!r} is defined in both {seen[table, name]} and {path}"
            errors.append(ConfigError(f"{message} (the one in {path} is left out)", source=path))
        if clashes:
            # As Traefik: the first definition (in sorted order) is kept and only the
            # repeated element is left out; the file's other elements are served.
            conf = _without(conf, set(clashes))
        seen.update((key, path) for key in names if key not in seen)
        used[path] = conf
    return merge_files(list(used.items())), used


def _without(conf: Configuration, drop: set[tuple[str, str]]) -> Configuration:
    """``conf`` less the elements ``drop`` names, as (table, name) of :func:`_tables`."""
    sections: dict[str, Any] = {}
    for label in ("http", "tcp", "udp", "tls"):
        section = getattr(conf, label)
        if section is None:
            continue
        tables = {}
        for field in msgspec.structs.fields(section):
            table, elements = f"{label}.{field.encode_name}", getattr(section, field.name)
            if isinstance(elements, dict) and any((table, name) in drop for name in elements):
                tables[field.name] = {k: v for k, v in elements.items() if (table, k) not in drop}
        if tables:
            sections[label] = msgspec.structs.replace(section, **tables)
    return msgspec.structs.replace(conf, **sections)


def _noted(exc: ConfigError, what: str) -> ConfigError:
    return ConfigError(f"{exc.message} ({what})", path=exc.path, source=exc.source)


def _tables(conf: Configuration) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each named table of ``conf`` with Traefik's key name (``http.routers``, ...)."""
    for section, label in ((conf.http, "http"), (conf.tcp, "tcp"), (conf.udp, "udp")):
        if section is not None:
            for field in msgspec.structs.fields(section):
                yield f"{label}.{field.encode_name}", getattr(section, field.name)
    if conf.tls is not None:
        yield "tls.options", conf.tls.options
        yield "tls.stores", conf.tls.stores


def merge_files(files: list[tuple[str, Configuration]]) -> Configuration:
    """One configuration from several files of one provider; duplicate names are errors."""
    if len(files) == 1:
        return files[0][1]
    seen: dict[tuple[str, str], str] = {}  # (table, name) -> file

    def add(table: str, target: dict[str, Any], source: Mapping[str, Any], path: str) -> None:
        for name, value in source.items():
            first = seen.setdefault((table, name), path)
            if first != path:
                raise ConfigError(
                    f"{table} {name!r} is defined in both {first} and {path}", source=path
                )
            target[name] = value

    http: dict[str, dict[str, Any]] = {}
    tcp: dict[str, dict[str, Any]] = {}
    udp: dict[str, dict[str, Any]] = {}
    tls: dict[str, dict[str, Any]] = {}
    certificates: list[CertAndStores] = []
    for path, conf in files:
        for section, store, label in (
            (conf.http, http, "http"),
            (conf.tcp, tcp, "tcp"),
            (conf.udp, udp, "udp"),
        ):
            if section is None:
                continue
            for field in msgspec.structs.fields(section):
                add(
                    f"{label}.{field.encode_name}",
                    store.setdefault(field.name, {}),
                    getattr(section, field.name),
                    path,
                )
        if conf.tls is not None:
            certificates.extend(conf.tls.certificates)
            add("tls.options", tls.setdefault("options", {}), conf.tls.options, path)
            add("tls.stores", tls.setdefault("stores", {}), conf.tls.stores, path)
    has_tls = any(conf.tls is not None for _, conf in files)
    return Configuration(
        http=HTTPConfiguration(**http) if any(c.http is not None for _, c in files) else None,
        tcp=TCPConfiguration(**tcp) if any(c.tcp is not None for _, c in files) else None,
        udp=UDPConfiguration(**udp) if any(c.udp is not None for _, c in files) else None,
        tls=TLSConfiguration(certificates=certificates, **tls) if has_tls else None,
    )


def _files(directory: str) -> Iterator[str]:
    """Configuration files under ``directory``, recursively, sorted, hidden ones skipped.

    Raises ``ConfigError`` when a folder cannot be listed (permissions, EMFILE, a stale
    NFS handle): its files are unknown, not gone, so no configuration may be made
    without them (``os.walk`` alone skips such a folder in silence)."""

    def unlisted(exc: OSError) -> None:
        where = exc.filename or directory
        raise ConfigError(f"cannot list {where}: {exc.strerror or exc}", source=directory)

    for root, dirs, names in os.walk(directory, onerror=unlisted):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith(".") and Path(name).suffix.lower() in EXTENSIONS:
                yield os.path.join(root, name)


class FileProvider:
    """Provider reading ``filename`` or ``directory``; polls for changes when ``watch``."""

    def __init__(
        self,
        filename: str | None = None,
        directory: str | None = None,
        watch: bool = False,
        name: str = "file",
        poll_interval: float = 0.25,
    ) -> None:
        if (filename is None) == (directory is None):
            raise ValueError("FileProvider: set exactly one of filename, directory")
        self.filename = filename
        self.directory = directory
        self.watch = watch
        self.name = name
        self.throttle: float | None = None
        self.poll_interval = poll_interval
        self._publish: Publish | None = None
        self._published: Configuration | None = None
        self._seen: _Stat | None = None  # stat of the last content read (good or bad)
        self._previous_poll: _Stat | None = None
        self._changing_since: float | None = None
        self._files: dict[str, Configuration] = {}  # a directory: each file's last good part

    @property
    def source(self) -> str:
        return self.filename if self.filename is not None else str(self.directory)

    async def run(self, publish: Publish) -> None:
        """Publish the configuration; with ``watch``, poll for changes until cancelled.

        A large source (OFFLOAD_BYTES and more) is read and decoded in a thread, so it
        does not stall serving while it is parsed (10,000 routers: 0.7 s of YAML); what
        was read is judged and published on the loop. A small one is read at once: in a
        thread that waits for the GIL behind a busy loop its read took long enough for
        a file rewritten every 85 ms to change under it, and be read again, most times."""
        self._publish = publish
        await self._read_soon(self._stat())
        if not self.watch:
            return
        while True:
            await asyncio.sleep(self.poll_interval)
            due = self._due()
            if due is not None:
                await self._read_soon(due)

    def reload(self) -> None:
        """Re-read now (SIGHUP); publishes if the configuration changed."""
        self._read(self._stat())

    def poll(self) -> None:
        """One polling step: read the source if it changed and has settled."""
        due = self._due()
        if due is not None:
            self._read(due)

    def _due(self) -> _Stat | None:
        """The stat to read the source at, when it changed and has settled; else None."""
        current = self._stat()
        if current == self._seen:
            self._previous_poll = current
            self._changing_since = None
            return None
        now = time.monotonic()
        if self._changing_since is None:
            self._changing_since = now
        settled = current == self._previous_poll or self._older_than_poll(current)
        # A source rewritten without pause (a generator, a busy CI job) is read
        # anyway once MAX_SETTLE has passed, so changes are never starved.
        overdue = now - self._changing_since >= MAX_SETTLE
        self._previous_poll = current
        # A file that has just become empty is most often being written (a shell
        # redirection, `curl ... > file`, truncates first, then waits for its data):
        # it is read as empty only once it stayed so for EMPTY_SETTLE. An empty file
        # is still an empty configuration (design.md), only later.
        seen = set(self._seen or ())
        emptied = any(entry[3] == 0 and entry not in seen for entry in current)
        if emptied and now - self._changing_since < EMPTY_SETTLE:
            return None
        if settled or overdue:
            self._changing_since = None
            return current
        return None

    # -- internals -------------------------------------------------------------------------

    def _older_than_poll(self, stat: _Stat) -> bool:
        newest = max((mtime for _, _, mtime, _ in stat), default=0)
        return time.time_ns() - newest >= self.poll_interval * 1e9

    def _stat(self) -> _Stat:
        if self.filename is not None:
            paths = [self.filename]
        else:
            try:
                paths = list(_files(str(self.directory)))
            except ConfigError:  # unknown: a state of its own, which the read reports
                return ((str(self.directory), -1, -1, -1),)
        out = []
        for path in paths:
            assert path is not None
            try:
                st = os.stat(path)
            except OSError:
                out.append((path, -1, -1, -1))
            else:
                out.append((path, st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _read(self, before: _Stat) -> None:
        """Read the source; publish it if valid, changed and not modified while reading."""
        self._judge(before, self._load(before))

    async def _read_soon(self, before: _Stat) -> None:
        """:meth:`_read`, the files read and decoded in a thread when they are large."""
        if sum(max(size, 0) for _, _, _, size in before) < OFFLOAD_BYTES:
            self._read(before)
            return
        self._judge(before, await asyncio.to_thread(self._load, before))

    def _load(self, before: _Stat) -> _Loaded:
        """Read and decode the source (any thread): it changes nothing here."""
        errors: list[ConfigError] = []
        notices: list[Unsupported] = []
        try:
            if self.filename is not None:
                conf = load_dynamic(self.filename, notices, errors)
                return conf, self._files, errors, notices
            conf, files = read_directory(str(self.directory), errors, notices, self._files)
        except ConfigError as exc:
            return exc, self._files, errors, notices
        return conf, files, errors, notices

    def _judge(self, before: _Stat, loaded: _Loaded) -> None:
        """On the loop: publish what :meth:`_load` read from ``before`` if it is valid,
        changed, and still what the source holds (a read of a source modified since,
        a SIGHUP's meanwhile included, is judged again at the next poll)."""
        self._seen = before
        conf, files, errors, notices = loaded
        if self._stat() != before:  # changed under us: judge the next version instead
            self._seen = None
            return
        if isinstance(conf, ConfigError):
            log.error("file provider %s: %s (keeping the last good configuration)", self.name, conf)
            return
        for exc in errors:
            log.error("file provider %s: %s", self.name, exc)
        for notice in notices:
            log.warning("file provider %s: %s", self.name, notice)
        self._files = files
        if conf == self._published:
            log.debug("file provider %s: %s unchanged", self.name, self.source)
            return
        self._published = conf
        if self._publish is not None:
            log.info("file provider %s: configuration read from %s", self.name, self.source)
            self._publish(Message(self.name, conf))
