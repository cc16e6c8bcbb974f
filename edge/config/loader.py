"""Reading configuration files and turning them into models, with errors a user can act on.

Owns file format detection (by extension: ``.yml``/``.yaml``, ``.toml``, ``.json``),
syntax errors with line and column, and the translation of msgspec validation errors
into :class:`~edge.errors.ConfigError` whose ``path`` is the full key path, dictionary
keys included (msgspec itself writes ``$.entryPoints[...]``; we say
``$.entryPoints.web.adress``). Invariant: every failure to load leaves as a
``ConfigError`` carrying ``source`` (the file) and, when the content is at fault, ``path``.

An empty file is an empty configuration.
"""

from __future__ import annotations

import os
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from edge.config.durations import dec_hook
from edge.config.dynamic import Configuration
from edge.config.static import StaticConfig
from edge.errors import ConfigError

__all__ = [
    "EXTENSIONS",
    "decode_dynamic",
    "decode_static",
    "load_dynamic",
    "load_static",
    "read_document",
]

EXTENSIONS = (".yml", ".yaml", ".toml", ".json")
"""File extensions the loader (and the file provider's directory mode) reads."""

T = TypeVar("T")

_JSON = msgspec.json.Decoder()  # untyped: JSON -> Python objects, then msgspec.convert
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_AT = re.compile(r"^(?P<message>.*?)(?: - at (?P<key>`key` in )?`(?P<path>\$[^`]*)`)?$", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_JSON_BYTE = re.compile(r"\(byte (\d+)\)$")


# --- public API -------------------------------------------------------------------


def load_static(path: str | os.PathLike[str]) -> StaticConfig:
    """Read and decode a static configuration file; raises ``ConfigError``."""
    source = os.fspath(path)
    return decode_static(read_document(source), source=source)


def load_dynamic(path: str | os.PathLike[str]) -> Configuration:
    """Read and decode one dynamic configuration file; raises ``ConfigError``."""
    source = os.fspath(path)
    return decode_dynamic(read_document(source), source=source)


def decode_static(obj: object, *, source: str | None = None) -> StaticConfig:
    """A :class:`StaticConfig` from plain Python data (``None`` is empty)."""
    return _convert(obj, StaticConfig, source)


def decode_dynamic(obj: object, *, source: str | None = None) -> Configuration:
    """A dynamic :class:`Configuration` from plain Python data (``None`` is empty).

    Element names must be non-empty and free of ``@`` (which qualifies names by provider).
    """
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
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "syntax error"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"invalid YAML{where}: {problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


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
