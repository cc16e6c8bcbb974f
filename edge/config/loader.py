"""Reading configuration files and turning them into models, with errors a user can act on.

Owns file format detection (by extension: ``.yml``/``.yaml``, ``.toml``, ``.json``),
syntax errors with line and column, and the translation of msgspec validation errors
into :class:`~edge.errors.ConfigError` whose ``path`` is the full key path, dictionary
keys included (msgspec itself writes ``$.entryPoints[...]``; we say
``$.entryPoints.web.adress``). Invariant: every failure to load leaves as a
``ConfigError`` carrying ``source`` (the file) and, when the content is at fault, ``path``.

An empty file is an empty configuration.

Traefik options edge does not implement are named as such, not as typos
(:data:`TRAEFIK_KEYS`): decoding takes them out, so the rest is still checked, and
reports each with its key path as an :class:`Unsupported`. In a dynamic configuration
one inside an element (router, service, middleware, serversTransport, TLS options)
goes into that element's ``unsupported`` and validation disables the element, so no
route is served without what its user asked for; an option that only adds something
beside the traffic (the API, metrics, tracing, log rotation, other providers) is
*ignored*: edge runs without it and says so. Callers passing ``notices`` report
them; otherwise an ignored one is logged and any other fails the load.

Read as Traefik's parser reads files, in one walk of the document against the models
(:class:`_Walk`, once per load, never per request): keys that are configuration field
names match case-insensitively (``entrypoints``, ``ENTRYPOINTS``: ``entryPoints``),
while user-chosen names (the keys of routers, services, headers...) keep their case;
errors name the key path as written, and one key written twice in two casings is an
error naming both. A list may be written as one comma-separated string
(``entryPoints: "web,websecure"``, ``sourceRange: "10.0.0.0/8,192.168.0.0/16"``), in
files as in Traefik's labels. Each element is decoded on its own, so a caller passing
``errors`` gets a key error in one element disabling that element only (see
:func:`decode_dynamic`). Traefik's single-file layout, a static configuration whose
file provider reads that very file, is read as two halves (:func:`reads_itself`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from edge.config import dynamic as dyn
from edge.config import static as sta
from edge.config.durations import dec_hook
from edge.config.dynamic import UNSUPPORTED, Configuration, Element
from edge.config.merge import DEFAULT_TLS
from edge.config.static import StaticConfig
from edge.errors import ConfigError

__all__ = [
    "EXTENSIONS",
    "TRAEFIK_KEYS",
    "Unsupported",
    "decode_dynamic",
    "decode_static",
    "load_dynamic",
    "load_static",
    "read_document",
    "reads_itself",
]

EXTENSIONS = (".yml", ".yaml", ".toml", ".json")
"""File extensions the loader (and the file provider's directory mode) reads."""

T = TypeVar("T")

log = logging.getLogger(__name__)

_JSON = msgspec.json.Decoder()  # untyped: JSON -> Python objects, then msgspec.convert
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _YAMLLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (libyaml's where there is one), refusing a key written twice in one
    mapping, as Traefik's YAML decoder (go-yaml v3) does: PyYAML keeps the last value in
    silence, so a router pasted twice under one name lost one of them with nothing said.
    Keys a ``<<`` merge brings in may be overridden, as YAML allows."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)  # kept: constructed once
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable: the base class names it
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        first.start_mark,
                        f"key {key!r} is defined again",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


_YAML_LOADER = _YAMLLoader
_AT = re.compile(r"^(?P<message>.*?)(?: - at (?P<key>`key` in )?`(?P<path>\$[^`]*)`)?$", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_JSON_BYTE = re.compile(r"\(byte (\d+)\)$")


# --- public API -------------------------------------------------------------------


Notices = list["Unsupported"]


def load_static(path: str | os.PathLike[str], notices: Notices | None = None) -> StaticConfig:
    """Read and decode a static configuration file; raises ``ConfigError``."""
    source = os.fspath(path)
    with _undecodable(source):
        return decode_static(read_document(source), source=source, notices=notices)


def load_dynamic(
    path: str | os.PathLike[str],
    notices: Notices | None = None,
    errors: list[ConfigError] | None = None,
) -> Configuration:
    """Read and decode one dynamic configuration file; raises ``ConfigError``.

    ``errors``: each element's key error goes there, the element disabled or left
    out (see :func:`decode_dynamic`); without it the first one raises.
    """
    source = os.fspath(path)
    with _undecodable(source):
        return decode_dynamic(read_document(source), source=source, notices=notices, errors=errors)


@contextlib.contextmanager
def _undecodable(source: str) -> Iterator[None]:
    """What the parsers raise on content no configuration holds (JSON or TOML nested
    deeper than the interpreter's stack, an integer of more than 4,300 digits) is a
    ``ConfigError`` naming the file, like any other bad content, not an exception that
    ends the file provider's watch and every later reload of its other files."""
    try:
        yield
    except ConfigError:
        raise
    except (RecursionError, ValueError, OverflowError) as exc:
        raise ConfigError(f"cannot be decoded: {exc}", source=source) from None


def decode_static(
    obj: object, *, source: str | None = None, notices: Notices | None = None
) -> StaticConfig:
    """A :class:`StaticConfig` from plain Python data (``None`` is empty).

    Traefik options edge lacks go to ``notices`` when given (see the module doc). The
    dynamic sections (``http``, ``tcp``, ``udp``, ``tls``) of a file that is also the
    file provider's (the single-file layout, see :func:`reads_itself`) are left to it;
    in any other static file they are an error, since nothing would read them.
    """
    if isinstance(obj, Mapping):
        dynamic = [k for k in obj if _root_key(k, Configuration) is not None]
        if dynamic:
            if not reads_itself(obj, source):
                raise ConfigError(
                    "dynamic configuration in the static file, which the file provider does "
                    "not read: set providers.file.filename to this file (Traefik's single-file "
                    "layout) or move it to the file provider's file",
                    path="$" + _render_key(dynamic[0]),
                    source=source,
                )
            obj = {k: v for k, v in obj.items() if k not in dynamic}
    walked, walk = _walk(obj, StaticConfig, source, notices)
    return _convert(walked, StaticConfig, source, walk.spelling)


def decode_dynamic(
    obj: object,
    *,
    source: str | None = None,
    notices: Notices | None = None,
    errors: list[ConfigError] | None = None,
) -> Configuration:
    """A dynamic :class:`Configuration` from plain Python data (``None`` is empty).

    Element names must be non-empty and free of ``@`` (which qualifies names by provider).
    Traefik options edge lacks go into their element's ``unsupported``, or, outside any
    element, to ``notices`` when given (see the module doc).

    Each element (router, service, middleware, serversTransport, TLS options, TLS
    store, certificate) is decoded on its own. Without ``errors`` a key error in one
    fails the whole; with it, the error goes there (key path as written, and whether
    the element was disabled or left out) and the rest decodes: an element (router,
    service, middleware, serversTransport, TLS options) is replaced by a stand-in
    whose ``problems`` hold it (validation disables it, and what uses it: the routers
    and services naming it, each with its reason); TLS stores and certificates are
    left out. An error outside any element, or in the ``default`` TLS options or
    store (which every TLS router uses unless it names others), fails the whole.

    In the single-file layout (see :func:`reads_itself`) the static keys at the root
    are the static configuration's, left to it.
    """
    if isinstance(obj, Mapping) and any(_root_key(k, Configuration) is None for k in obj):
        static = [k for k in obj if _root_key(k, StaticConfig) is not None]
        if static and reads_itself(obj, source):
            obj = {k: v for k, v in obj.items() if k not in static}
    walked, walk = _walk(obj, Configuration, source, notices, errors)
    return _convert(walked, Configuration, source, walk.spelling)


def reads_itself(doc: Mapping[Any, Any], source: str | None) -> bool:
    """Whether ``doc``, read from ``source``, is Traefik's single-file layout: a static
    configuration whose file provider reads ``source`` itself (``providers.file.filename``
    names it, or ``directory`` holds it; relative paths from the file's folder, as
    ``edge run`` resolves them). Keys match case-insensitively."""
    if source is None:
        return False
    file = _get(_get(doc, "providers"), "file")
    here = os.path.realpath(source)
    base = os.path.dirname(here)
    filename, directory = _get(file, "filename"), _get(file, "directory")
    if isinstance(filename, str) and filename:
        return os.path.realpath(os.path.join(base, filename)) == here
    if isinstance(directory, str) and directory:
        return here.startswith(os.path.join(os.path.realpath(os.path.join(base, directory)), ""))
    return False


def _get(doc: object, key: str) -> object:
    """``doc[key]``, the key matched case-insensitively; None when absent."""
    if not isinstance(doc, Mapping):
        return None
    for k, v in doc.items():
        if isinstance(k, str) and k.lower() == key:
            return v
    return None


def _root_key(key: object, tp: type) -> str | None:
    """The root key of ``tp`` that ``key`` writes, matched case-insensitively."""
    return _model(tp).folded.get(key.lower()) if isinstance(key, str) else None


def read_document(path: str | os.PathLike[str]) -> object:
    """The Python data in a YAML, TOML or JSON file; ``None`` for an empty file.

    Raises ``ConfigError`` for an unreadable file, an unknown extension, or a syntax
    error (with line and column).
    """
    source = os.fspath(path)
    ext = Path(source).suffix.lower()
    if ext not in EXTENSIONS:
        raise ConfigError(
            f"unsupported file extension {ext or '(none)'!r}: expected one of {', '.join(EXTENSIONS)}",
            source=source,
        )
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", source=source) from None
    if not data.strip():
        return None
    if ext == ".toml":
        return _parse_toml(data, source)
    if ext == ".json":
        return _parse_json(data, source)
    return _parse_yaml(data, source)


# --- parsing --------------------------------------------------------------------------


def _parse_yaml(data: bytes, source: str) -> object:
    try:
        return yaml.load(data, Loader=_YAML_LOADER)
    except yaml.MarkedYAMLError as exc:
        # The parser's own positions: where the construct it was reading began (an
        # unterminated quote's opening), then where it found the problem, which for a
        # construct that runs off the end is the end of the file, not a line of it.
        first = exc.context_mark or exc.problem_mark
        message = "invalid YAML"
        if first is not None:
            message += f" at {_yaml_mark(first, data)}"
        if exc.context:
            message += f" ({exc.context})"
        message += f": {exc.problem or 'syntax error'}"
        then = exc.problem_mark
        if then is not None and first is not None and then.index != first.index:
            message += f" (at {_yaml_mark(then, data)})"
        raise ConfigError(message, source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


def _yaml_mark(mark: Any, data: bytes) -> str:
    if mark.index >= len(data.rstrip()):
        return "the end of the file"
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _parse_toml(data: bytes, source: str) -> object:
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"invalid TOML: not UTF-8 ({exc.reason} at byte {exc.start})", source=source
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source=source) from None


def _parse_json(data: bytes, source: str) -> object:
    try:
        return _JSON.decode(data)
    except msgspec.DecodeError as exc:
        message = str(exc)
        m = _JSON_BYTE.search(message)
        if m is not None:
            offset = int(m.group(1))
            before = data[:offset]
            line = before.count(b"\n") + 1
            column = offset - (before.rfind(b"\n") + 1) + 1
            message = f"{message[: m.start()].rstrip()} at line {line}, column {column}"
        message = message.removeprefix("JSON is malformed: ")
        raise ConfigError(f"invalid JSON: {message}", source=source) from None


# --- Traefik options edge does not implement ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A Traefik option this version of edge does not implement, where it was found.

    ``ignored``: edge runs without it (it only adds something beside the traffic);
    otherwise what holds it must not run without it.
    """

    path: str
    ignored: bool
    source: str | None = None

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.path}: {UNSUPPORTED} ({'ignored' if self.ignored else 'refused'})"


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ = ""  # no key of this kind
TRAEFIK_KEYS: dict[type, tuple[frozenset[str], frozenset[str]]] = {
    cls: (_keys(refused), _keys(ignored))
    for cls, refused, ignored in (
        # -- dynamic configuration --
        (dyn.Router, "parentRefs", _),
        (
            dyn.Middleware,
            "encodedCharacters plugin",
            _,
        ),
        (
            dyn.Headers,
            "featurePolicy sslForceHost sslHost sslRedirect sslTemporaryRedirect",
            _,
        ),
        (dyn.StripPrefix, "forceSlash", _),
        (dyn.ErrorPage, "errorRequestHeaders", _),
        (dyn.Server, "preservePath", _),
        (dyn.Failover, "errors", _),
        (dyn.ServersTransport, "spiffe", _),
        (dyn.TCPMiddleware, "inFlightReq ipWhiteList rateLimit streamCompress", _),
        (dyn.TCPLoadBalancer, "healthCheck", _),
        (dyn.TLSClientConfig, "spiffe", _),
        (dyn.TLSOptions, "preferServerCipherSuites", _),
        (dyn.TLSStore, _, "defaultGeneratedCert"),
        # -- static configuration --
        (
            StaticConfig,
            "certificatesResolvers experimental hostResolver ocsp spiffe",
            "global hub pilot",
        ),
        (sta.TracingOTLP, _, "grpc"),
        (sta.EntryPoint, "allowACMEByPass http3", _),
        (
            sta.EntryPointHTTP,
            "encodeQuerySemicolons encodedCharacters underscoreHeadersStrategy",
            _,
        ),
        (sta.ForwardedHeaders, "addXForwardedSchemeHeaders connection", _),
        (sta.Transport, "keepAliveMaxRequests keepAliveMaxTime", _),
        (sta.Log, _, "compress maxAge maxBackups maxSize noColor otlp"),
        (sta.AccessLog, _, "otlp"),
        (sta.Ping, _, "terminatingStatusCode"),
        (sta.Api, _, "debug disableDashboardAd"),
        (sta.Metrics, _, "datadog influxDB2 otlp statsD"),
        (
            sta.Providers,
            _,
            "consul consulCatalog docker ecs etcd http nomad plugin redis rest swarm zooKeeper",
        ),
        (sta.FileProviderConfig, _, "debugLogGeneratedTemplate"),
        (
            sta.KubernetesIngressConfig,
            "disableClusterScopeResources disableIngressClassLookup nativeLBByDefault "
            "strictPrefixMatching",
            _,
        ),
        (sta.KubernetesGatewayConfig, "nativeLBByDefault", _),
    )
}
"""Per model: the Traefik keys edge does not implement, (refused, ignored). A key the
model declares is never one of them (it is implemented, however partly)."""


class _Bad(Exception):
    """A key error the walk finds itself (a key written twice in two casings, a key
    only edge writes): its message and key path."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


_INTERNAL = frozenset({"unsupported", "problems"})
"""Element fields edge fills itself (see :class:`~edge.config.dynamic.Element`): a
file writing one is an unknown key."""


@dataclass(frozen=True, slots=True)
class _Model:
    """What the walk needs of one Struct type, made once per type.

    ``folded``: every key of the type (its fields and the Traefik keys edge lacks)
    lower-cased, to the spelling the model uses; ``leaves``: the fields whose values
    hold nothing to walk (no Struct, mapping or list), copied as they are."""

    fields: dict[str, Any]
    folded: dict[str, str]
    refused: frozenset[str]
    ignored: frozenset[str]
    leaves: frozenset[str]
    element: bool


@functools.cache
def _model(tp: type) -> _Model:
    refused, ignored = TRAEFIK_KEYS.get(tp, (frozenset(), frozenset()))
    fields = {
        f.encode_name: f.type
        for f in msgspec.structs.fields(tp)
        if f.encode_name not in _INTERNAL or not issubclass(tp, Element)
    }
    folded = {key.lower(): key for key in (*refused, *ignored, *fields)}
    leaves = frozenset(key for key, t in fields.items() if not _walked(t) and key not in ignored)
    return _Model(fields, folded, refused, ignored, leaves, issubclass(tp, Element))


def _walked(tp: Any) -> bool:
    """Whether a value of type ``tp`` may hold something the walk changes: a Struct
    (keys to fold), a mapping of them, or a list (written as one string)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _walked(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_walked(a) for a in typing.get_args(tp))
    if origin in (dict, list, tuple):
        return True
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


_ALONE = (Element, dyn.TLSStore, dyn.CertAndStores)
"""What is decoded alone, so that a key error in it leaves out only it: the elements,
TLS stores and certificates."""

_LEFT_OUT = (dyn.TLSStore, dyn.CertAndStores)
"""What a key error leaves out rather than standing in for: TLS stores and certificates
are no :class:`~edge.config.dynamic.Element`, with no ``problems`` to carry. Every
element stands in: validation disables it and what uses it (a serversTransport's
services, a TLS options' routers), and nothing is built from it (:mod:`edge.tls.certs`)."""

_DEFAULTS = (dyn.TLSOptions, dyn.TLSStore)
"""What, named ``default``, a key error fails the whole file for: every TLS router
uses it unless it names others, so the stand-in would disable them all, and a store
left out would have edge's built-in one serve the generated certificate."""

_ROUTER_KEYS = ("rule", "service", "entryPoints")
"""What a router's stand-in keeps of what the user wrote, where it is well formed."""


class _Walk:
    """One walk of a raw document against its model, before msgspec converts it.

    On the way: keys that are field names match case-insensitively, as Traefik's
    parser matches them (user-chosen names, the keys of mappings, keep their case);
    a string where the model has a list of strings or numbers is a comma-separated
    list, as Traefik's parser reads it in files too (its ``setSlice``); Traefik
    options edge lacks are taken out and reported (see the module doc); each
    element (``_ALONE``) is converted on its own, so that, with ``errors``, a key
    error in it disables or leaves out only that element (see :func:`decode_dynamic`).

    ``spelling``: for each mapping the walk made in which a key was renamed, the
    key as the user wrote it, so errors name the path as written; ``renamed`` keeps
    those mappings alive while the walk is, so no other takes their ``id``.
    """

    __slots__ = ("errors", "found", "renamed", "source", "spelling")

    def __init__(self, source: str | None, errors: list[ConfigError] | None) -> None:
        self.source = source
        self.errors = errors
        self.found: Notices = []
        self.spelling: _Spelling = {}
        self.renamed: list[dict[Any, object]] = []

    def value(self, obj: object, tp: Any, path: str) -> object:
        tp = _unwrap(tp, obj)
        if isinstance(obj, Mapping):
            if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
                return self.struct(obj, tp, path)
            if typing.get_origin(tp) is dict:
                value_type = _dict_value_type(tp)
                if isinstance(value_type, type) and issubclass(value_type, _ALONE):
                    named = ((k, self.element(v, value_type, path, k)) for k, v in obj.items())
                    return {k: v for k, v in named if v is not None}
                return {k: self.value(v, value_type, path + _render_key(k)) for k, v in obj.items()}
        elif isinstance(obj, list):
            if typing.get_origin(tp) in (list, tuple):
                item_type = _item_type(tp)
                if isinstance(item_type, type) and issubclass(item_type, _ALONE):
                    items = (self.element(v, item_type, path, i) for i, v in enumerate(obj))
                    return [v for v in items if v is not None]
                return [self.value(v, item_type, f"{path}[{i}]") for i, v in enumerate(obj)]
        elif isinstance(obj, str | int | float) and typing.get_origin(tp) in (list, tuple):
            if isinstance(obj, str):
                return _comma_list(obj, _item_type(tp))
            return [obj]  # one value where a list goes: Traefik's parser reads a list of one
        return obj

    def struct(self, obj: Mapping[Any, Any], tp: type, path: str) -> dict[Any, object]:
        m = _model(tp)
        found = self.found
        start = len(found)
        out: dict[Any, object] = {}
        renamed: dict[str, str] | None = None  # the model's key -> the user's
        for key, value in obj.items():
            if key in m.fields:
                name = key
                if renamed is not None and name in out:
                    raise _Bad(_twice(renamed.get(name, name), key), path + _render_key(key))
            else:
                folded = m.folded.get(key.lower()) if isinstance(key, str) else None
                if folded is None:
                    if isinstance(key, str) and m.element and key.lower() in _INTERNAL:
                        raise _Bad("unknown key", path + _render_key(key))
                    out[key] = value  # conversion names it: an unknown key
                    continue
                name = folded
                if renamed is None:
                    renamed = {}
                if name in out or name in renamed:
                    raise _Bad(_twice(renamed.get(name, name), key), path + _render_key(key))
                renamed[name] = key
            if name in m.leaves:
                out[name] = value
                continue
            where = path + _render_key(key)
            if name in m.fields:
                if name in m.ignored:
                    found.append(Unsupported(where, True, self.source))
                out[name] = self.value(value, m.fields[name], where)
            else:
                found.append(Unsupported(where, name in m.ignored, self.source))
        if renamed is not None:
            self.spelling[id(out)] = renamed
            self.renamed.append(out)
        if m.element:
            mine = [n.path for n in found[start:] if not n.ignored]
            if mine:  # the element holds them; validation disables it
                found[start:] = [n for n in found[start:] if n.ignored]
                out["unsupported"] = mine
        return out

    def element(self, raw: object, tp: type, path: str, key: str | int) -> Any:
        """``raw`` converted to ``tp`` (an ``_ALONE`` type) at ``path``'s ``key``; on a
        key error, with ``errors``, its stand-in or None (left out), else the error."""
        where = f"{path}[{key}]" if isinstance(key, int) else path + _render_key(key)
        start = len(self.found)
        walked: object = None
        try:
            if isinstance(key, str) and (not key.strip() or "@" in key):
                raise _Bad(
                    "empty name"
                    if not key.strip()
                    else "a name must not contain '@' (it separates a name from its provider)",
                    where,
                )
            walked = self.value(raw, tp, where)
            return msgspec.convert(walked, tp, dec_hook=dec_hook)
        except _Bad as bad:
            message, at = bad.message, bad.path
        except msgspec.ValidationError as exc:
            message, at = translate_error(exc, walked, tp, self.spelling)
            at = where + at[1:]
        del self.found[start:]  # what the walk found in it: the element is disabled anyway
        if self.errors is None or (key == DEFAULT_TLS and issubclass(tp, _DEFAULTS)):
            raise ConfigError(message, path=at, source=self.source)
        stand_in = None
        if isinstance(key, str) and key.strip() and "@" not in key:
            stand_in = _stand_in(tp, raw, f"{at}: {message}")
        what = "disabled" if stand_in is not None else "left out"
        self.errors.append(ConfigError(f"{message} ({what})", path=at, source=self.source))
        return stand_in


def _twice(first: str, second: str) -> str:
    return f"{first!r} and {second!r} are one key written twice (keys match case-insensitively)"


def _comma_list(text: str, item_type: Any) -> list[object]:
    """A list written as one string, as Traefik reads it: split at commas, each item
    trimmed, numbers read as the model's numbers; ``""`` is the empty list."""
    if not text:
        return []
    items = [item.strip() for item in text.split(",")]
    number = _unwrap(item_type, None)
    if number is not int and number is not float:
        return list(items)
    read: list[object] = []
    for item in items:
        try:
            read.append(number(item))
        except ValueError:
            read.append(item)  # conversion names it, a string where a number goes
    return read


def _stand_in(tp: type, raw: object, problem: str) -> Any:
    """What stands in for an element of type ``tp`` that did not decode (``raw``, as
    written): disabled by validation with ``problem``, so the API and ``edge check``
    show it; None for what is left out instead (``_LEFT_OUT``)."""
    if not issubclass(tp, Element) or issubclass(tp, _LEFT_OUT):
        return None
    m = _model(tp)
    kept: dict[str, object] = {"problems": [problem]}
    if "rule" in m.fields or "service" in m.fields:  # a router: what it was, where readable
        written = {m.folded.get(str(k).lower()): v for k, v in _items(raw)}
        for key in _ROUTER_KEYS:
            if key not in m.fields:
                continue
            value = written.get(key)
            if key == "entryPoints" and isinstance(value, str):
                value = _comma_list(value, str)
            if key == "entryPoints":
                ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
                kept[key] = value if ok else []
            else:
                kept[key] = value if isinstance(value, str) else ""
    # A service or middleware with problems needs no kind: its problem disables it.
    try:
        return msgspec.convert(kept, tp, dec_hook=dec_hook)
    except msgspec.ValidationError:
        return None


def _items(raw: object) -> list[tuple[Any, object]]:
    return list(raw.items()) if isinstance(raw, Mapping) else []


def _walk(
    obj: object,
    type_: Any,
    source: str | None,
    notices: Notices | None,
    errors: list[ConfigError] | None = None,
) -> tuple[object, _Walk]:
    """``obj`` walked against ``type_`` (see :class:`_Walk`); the Traefik keys edge
    lacks found outside any element reported as the module doc says."""
    walk = _Walk(source, errors)
    try:
        obj = walk.value(obj, type_, "$")
    except _Bad as bad:  # outside any element
        raise ConfigError(bad.message, path=bad.path, source=source) from None
    found = walk.found
    if notices is not None:
        notices.extend(found)
        return obj, walk
    refused = [n.path for n in found if not n.ignored]
    if refused:
        raise ConfigError(f"{UNSUPPORTED}: {', '.join(refused)}", source=source)
    for notice in found:
        log.warning("%s", notice)
    return obj, walk


# --- decoding and error translation ------------------------------------------------------


def _convert(
    obj: object, type_: type[T], source: str | None, spelling: _Spelling | None = None
) -> T:
    if obj is None:
        obj = {}
    try:
        return msgspec.convert(obj, type_, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        message, path = translate_error(exc, obj, type_, spelling)
        raise ConfigError(message, path=path, source=source) from None


_Spelling = dict[int, dict[str, str]]
"""For a mapping the walk made (by ``id``), the keys it renamed: the model's -> the user's."""


def translate_error(
    exc: msgspec.ValidationError, obj: object, type_: Any, spelling: _Spelling | None = None
) -> tuple[str, str]:
    """``(message, path)`` for a msgspec error raised while converting ``obj`` to ``type_``.

    Dictionary keys that msgspec elides as ``[...]`` are recovered by finding, in order,
    the first entry that fails on its own (msgspec stops at the first failing entry).
    Keys the walk renamed (``spelling``) are named as the user wrote them.
    """
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any string
    message, raw_path = m.group("message"), m.group("path") or "$"
    path, leaf_type, leaf = _locate(obj, type_, raw_path, spelling or {})
    if m.group("key"):  # a dictionary key itself is wrong (YAML: a number as a name)
        key = _failing_key(leaf, None) if isinstance(leaf, Mapping) else None
        text = message[0].lower() + message[1:]
        return f"invalid key: {text.replace('`', '')}", path + (
            _render_key(key) if key is not None else ""
        )

    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", message)
    if unknown:
        return "unknown key", path + _render_key(unknown.group(1))
    missing = re.fullmatch(r"Object missing required field `(.*)`", message)
    if missing:
        return "missing required key", path + _render_key(missing.group(1))
    enum = re.fullmatch(r"Invalid enum value (.*)", message)
    if enum:
        choices = _literal_choices(leaf_type)
        text = f"invalid value {enum.group(1)}"
        if choices:
            text += f": expected one of {', '.join(repr(c) for c in choices)}"
        return text, path
    if message.startswith(("Expected ", "Invalid ")):
        message = message[0].lower() + message[1:]
        message = message.replace("`", "")
    return message, path


def _locate(obj: object, type_: Any, raw_path: str, spelling: _Spelling) -> tuple[str, Any, object]:
    """The path with ``[...]`` replaced by real keys, and the type and value at its end."""
    out = "$"
    tp: Any = type_
    pos = 1
    while pos < len(raw_path):
        m = _SEGMENT.match(raw_path, pos)
        if m is None:  # unexpected shape: keep msgspec's text for the rest
            return out + raw_path[pos:], None, None
        pos = m.end()
        tp = _unwrap(tp, obj)
        field, index = m.group(1), m.group(2)
        if field is not None:
            written = spelling.get(id(obj))
            out += _render_key(written.get(field, field) if written else field)
            tp = _field_type(tp, field)
            obj = obj.get(field) if isinstance(obj, Mapping) else None
        elif index == "...":
            value_type = _dict_value_type(tp)
            key = _failing_key(obj, value_type) if isinstance(obj, Mapping) else None
            if key is None:
                out += "[...]"
                obj = None
            else:
                out += _render_key(key)
                obj = obj[key]  # type: ignore[index]
            tp = value_type
        else:
            i = int(index)
            out += f"[{i}]"
            tp = _item_type(tp)
            obj = obj[i] if isinstance(obj, list) and i < len(obj) else None
    return out, _unwrap(tp, obj), obj


def _failing_key(obj: Mapping[Any, Any], value_type: Any) -> Any:
    for key, value in obj.items():
        if not isinstance(key, str):
            return key
        if value_type is None:
            continue
        try:
            msgspec.convert(value, value_type, dec_hook=dec_hook)
        except msgspec.ValidationError:
            return key
    return None


def _render_key(key: object) -> str:
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f".{key}"
    return f"[{msgspec.json.encode(key if isinstance(key, str) else repr(key)).decode()}]"


def _unwrap(tp: Any, obj: object) -> Any:
    """Strip ``Annotated`` and pick the member of an ``X | None`` union that ``obj`` is for."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is typing.Union or origin is types.UnionType:
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if obj is None and len(members) != 1:
                return tp
            structs = [a for a in members if isinstance(a, type) and issubclass(a, msgspec.Struct)]
            if isinstance(obj, Mapping) and len(structs) == 1:
                tp = structs[0]
            elif len(members) == 1:
                tp = members[0]
            else:
                return tp
        else:
            return tp


def _field_type(tp: Any, name: str) -> Any:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        for f in msgspec.structs.fields(tp):
            if f.encode_name == name:
                return f.type
    return None


def _dict_value_type(tp: Any) -> Any:
    if typing.get_origin(tp) is dict:
        args = typing.get_args(tp)
        return args[1] if len(args) == 2 else None
    return None


def _item_type(tp: Any) -> Any:
    if typing.get_origin(tp) in (list, tuple):
        args = typing.get_args(tp)
        return args[0] if args else None
    return None


def _literal_choices(tp: Any) -> list[object]:
    if typing.get_origin(tp) is typing.Literal:
        return list(typing.get_args(tp))
    choices: list[object] = []
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            choices.extend(_literal_choices(member))
    return choices
