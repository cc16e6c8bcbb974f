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


def load_dynamic(path: str | os.PathLike[str], notices: Notices | None = None) -> Configuration:
    """Read and decode one dynamic configuration file; raises ``ConfigError``."""
    source = os.fspath(path)
    with _undecodable(source):
        return decode_dynamic(read_document(source), source=source, notices=notices)


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

    Traefik options edge lacks go to ``notices`` when given (see the module doc).
    """
    return _convert(_without_unsupported(obj, StaticConfig, source, notices), StaticConfig, source)


def decode_dynamic(
    obj: object, *, source: str | None = None, notices: Notices | None = None
) -> Configuration:
    """A dynamic :class:`Configuration` from plain Python data (``None`` is empty).

    Element names must be non-empty and free of ``@`` (which qualifies names by provider).
    Traefik options edge lacks go into their element's ``unsupported``, or, outside any
    element, to ``notices`` when given (see the module doc).
    """
    obj = _without_unsupported(obj, Configuration, source, notices)
    conf = _convert(obj, Configuration, source)
    _check_names(conf, source)
    return conf


def _check_names(conf: Configuration, source: str | None) -> None:
    sections: list[tuple[str, Mapping[str, object]]] = []
    if conf.http is not None:
        sections += [
            ("http.routers", conf.http.routers),
            ("http.services", conf.http.services),
            ("http.middlewares", conf.http.middlewares),
            ("http.serversTransports", conf.http.servers_transports),
        ]
    if conf.tcp is not None:
        sections += [
            ("tcp.routers", conf.tcp.routers),
            ("tcp.services", conf.tcp.services),
            ("tcp.middlewares", conf.tcp.middlewares),
            ("tcp.serversTransports", conf.tcp.servers_transports),
        ]
    if conf.udp is not None:
        sections += [("udp.routers", conf.udp.routers), ("udp.services", conf.udp.services)]
    if conf.tls is not None:
        sections += [("tls.options", conf.tls.options), ("tls.stores", conf.tls.stores)]
    for where, elements in sections:
        for name in elements:
            if not name.strip():
                raise ConfigError("empty name", path=f"$.{where}{_render_key(name)}", source=source)
            if "@" in name:
                raise ConfigError(
                    "a name must not contain '@' (it separates a name from its provider)",
                    path=f"$.{where}{_render_key(name)}",
                    source=source,
                )


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
        (dyn.Router, "parentRefs", "observability"),
        (
            dyn.Middleware,
            "basicAuth buffering chain circuitBreaker compress contentType digestAuth "
            "encodedCharacters errors forwardAuth grpcWeb inFlightReq ipAllowList ipWhiteList "
            "passTLSClientCert plugin rateLimit redirectRegex replacePath replacePathRegex "
            "retry stripPrefixRegex",
            _,
        ),
        (
            dyn.Headers,
            "accessControlAllowCredentials accessControlAllowHeaders accessControlAllowMethods "
            "accessControlAllowOriginList accessControlAllowOriginListRegex "
            "accessControlExposeHeaders accessControlMaxAge addVaryHeader allowedHosts "
            "browserXssFilter contentSecurityPolicy contentSecurityPolicyReportOnly "
            "contentTypeNosniff customBrowserXSSValue customFrameOptionsValue featurePolicy "
            "forceSTSHeader frameDeny hostsProxyHeaders isDevelopment permissionsPolicy "
            "publicKey referrerPolicy sslForceHost sslHost sslProxyHeaders sslRedirect "
            "sslTemporaryRedirect stsIncludeSubdomains stsPreload stsSeconds",
            _,
        ),
        (dyn.StripPrefix, "forceSlash", _),
        (dyn.Service, "failover highestRandomWeight mirroring", _),
        (
            dyn.LoadBalancer,
            "healthCheck passiveHealthCheck responseForwarding sticky strategy",
            _,
        ),
        (dyn.Server, "preservePath", _),
        (dyn.Weighted, "healthCheck sticky", _),
        (
            dyn.ServersTransport,
            "cipherSuites disableHTTP2 maxVersion minVersion peerCertURI spiffe",
            _,
        ),
        (dyn.ForwardingTimeouts, "pingTimeout readIdleTimeout", _),
        (dyn.TCPMiddleware, "inFlightReq ipWhiteList rateLimit streamCompress", _),
        (dyn.TCPLoadBalancer, "healthCheck", _),
        (dyn.TLSClientConfig, "peerCertSANs peerCertURI spiffe", _),
        (dyn.TLSOptions, "preferServerCipherSuites", _),
        (dyn.TLSStore, _, "defaultGeneratedCert"),
        # -- static configuration --
        (
            StaticConfig,
            "certificatesResolvers experimental hostResolver ocsp serversTransport spiffe "
            "tcpServersTransport",
            "global hub metrics pilot tracing",  # metrics: read, and unused
        ),
        (
            sta.EntryPoint,
            "allowACMEByPass asDefault http2 http3 reusePort",
            "observability",
        ),
        (
            sta.EntryPointHTTP,
            "encodeQuerySemicolons encodedCharacters middlewares underscoreHeadersStrategy",
            _,
        ),
        (sta.ForwardedHeaders, "addXForwardedSchemeHeaders connection", _),
        (sta.Transport, "keepAliveMaxRequests keepAliveMaxTime", _),
        (sta.Log, _, "compress maxAge maxBackups maxSize noColor otlp"),
        (sta.AccessLog, _, "addInternals fields filters otlp"),
        (sta.Ping, _, "terminatingStatusCode"),
        (sta.Api, _, "basePath dashboard debug disableDashboardAd"),
        (sta.Metrics, _, "addInternals datadog influxDB2 otlp statsD"),
        (sta.Prometheus, _, "headerLabels"),
        (
            sta.Providers,
            _,
            "consul consulCatalog docker ecs etcd http kubernetesIngressNGINX "
            "nomad plugin redis rest swarm zooKeeper",
        ),
        (sta.FileProviderConfig, _, "debugLogGeneratedTemplate"),
        (
            sta.KubernetesIngressConfig,
            "disableClusterScopeResources disableIngressClassLookup nativeLBByDefault "
            "strictPrefixMatching",
            _,
        ),
        (sta.KubernetesCRDConfig, "disableClusterScopeResources", _),
        (sta.KubernetesGatewayConfig, "nativeLBByDefault", "statusAddress"),
    )
}
"""Per model: the Traefik keys edge does not implement, (refused, ignored). A key the
model declares is never one of them (it is implemented, however partly), except the
ignored keys a model reads but edge does nothing with (``metrics``)."""


def _without_unsupported(
    obj: object, type_: Any, source: str | None, notices: Notices | None
) -> object:
    """``obj`` without the Traefik keys edge lacks; each reported as the module doc says."""
    found: Notices = []
    obj = _strip(obj, type_, "$", found, source)
    if notices is not None:
        notices.extend(found)
        return obj
    refused = [n.path for n in found if not n.ignored]
    if refused:
        raise ConfigError(f"{UNSUPPORTED}: {', '.join(refused)}", source=source)
    for notice in found:
        log.warning("%s", notice)
    return obj


@functools.cache
def _struct_fields(tp: type) -> dict[str, Any]:
    return {f.encode_name: f.type for f in msgspec.structs.fields(tp)}


def _strip(obj: object, tp: Any, path: str, found: Notices, source: str | None) -> object:
    tp = _unwrap(tp, obj)
    if isinstance(obj, Mapping):
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            refused, ignored = TRAEFIK_KEYS.get(tp, (frozenset(), frozenset()))
            fields = _struct_fields(tp)
            start = len(found)
            out: dict[Any, object] = {}
            for key, value in obj.items():
                where = path + _render_key(key)
                if key in fields:
                    if key in ignored:
                        found.append(Unsupported(where, True, source))
                    out[key] = _strip(value, fields[key], where, found, source)
                elif key in refused or key in ignored:
                    found.append(Unsupported(where, key in ignored, source))
                else:
                    out[key] = value  # conversion names it: an unknown key
            if issubclass(tp, Element):
                mine = [n.path for n in found[start:] if not n.ignored]
                if mine:  # the element holds them; validation disables it
                    found[start:] = [n for n in found[start:] if n.ignored]
                    out["unsupported"] = mine
            return out
        if typing.get_origin(tp) is dict:
            value_type = _dict_value_type(tp)
            return {
                k: _strip(v, value_type, path + _render_key(k), found, source)
                for k, v in obj.items()
            }
    if isinstance(obj, list) and typing.get_origin(tp) in (list, tuple):
        item_type = _item_type(tp)
        return [_strip(v, item_type, f"{path}[{i}]", found, source) for i, v in enumerate(obj)]
    return obj


# --- decoding and error translation ------------------------------------------------------


def _convert(obj: object, type_: type[T], source: str | None) -> T:
    if obj is None:
        obj = {}
    try:
        return msgspec.convert(obj, type_, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        message, path = translate_error(exc, obj, type_)
        raise ConfigError(message, path=path, source=source) from None


def translate_error(exc: msgspec.ValidationError, obj: object, type_: Any) -> tuple[str, str]:
    """``(message, path)`` for a msgspec error raised while converting ``obj`` to ``type_``.

    Dictionary keys that msgspec elides as ``[...]`` are recovered by finding, in order,
    the first entry that fails on its own (msgspec stops at the first failing entry).
    """
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any string
    message, raw_path = m.group("message"), m.group("path") or "$"
    path, leaf_type, leaf = _locate(obj, type_, raw_path)
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


def _locate(obj: object, type_: Any, raw_path: str) -> tuple[str, Any, object]:
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
            out += f".{field}"
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
