"""Secrets in the configuration, and the one way configuration is shown without them.

Owns :data:`Secret`, the mark a configuration model puts on a field that holds a
credential (a password, a token, htpasswd lines, a private key as a path or PEM, the
headers that authenticate an export), :data:`HeaderValue`, the mark of header values
that hold one when the header's name says so (``Authorization``, ``X-Api-Key``...),
and :class:`Redactor`, which turns a configuration value into the builtins (dicts,
lists, strings) the API, ``edge check`` and logs show, with every marked value
replaced by :data:`MASK`.

Invariants: redacting never touches the value it reads (what edge serves keeps the real
values: the output is a new tree of builtins); a marked field is masked wherever its
Struct sits (in a list, a dict, an optional or a union); an empty value stays empty
(so "no password" still shows); a dict's keys stay (a header's name, not its value, is
the secret) and a list keeps its length. Marked or not, a string that holds a PEM
private key is masked (a key pasted into ``certFile``), and so is the password of a URL
(``https://user:password@auth.test``, in a forwardAuth address or a collector's URL).

The mark is ``msgspec.Meta(extra={"secret": ...})`` on the field's type (``True``, or
``"header"`` for :data:`HeaderValue`), so it is read with msgspec's own introspection,
once per Struct class and :class:`Redactor`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlsplit

import msgspec
import msgspec.inspect as mi

from edge.config.durations import enc_hook

__all__ = [
    "MASK",
    "HeaderValue",
    "Redactor",
    "Secret",
    "credential_header",
    "field_marks",
    "is_secret",
    "mark_of",
    "redacted",
    "secret_fields",
]

MASK = "xxxx"
"""What a secret shows as: Traefik's mask (``pkg/redactor``), so tools that know it read it."""

SECRET_MARK = "secret"
BY_NAME = "header"  # the mark's value for HeaderValue
Secret = Annotated[str, msgspec.Meta(extra={SECRET_MARK: True})]
"""A string field holding a credential; ``list[Secret]`` and ``dict[str, Secret]`` mark
each item or value."""
HeaderValue = Annotated[str, msgspec.Meta(extra={SECRET_MARK: BY_NAME})]
"""The value of a header edge sends, in ``dict[str, HeaderValue]``: masked where the
header's name says it carries a credential (:func:`credential_header`), shown else."""

# Names of headers that carry credentials: Authorization and Proxy-Authorization,
# cookies, X-Api-Key, X-Auth-Token, X-Amz-Security-Token, X-Hub-Signature...
_CREDENTIAL_HEADER = re.compile(
    r"auth|cookie|token|secret|passw|api-?key|session|credential|signature", re.IGNORECASE
)

PRIVATE_KEY = "PRIVATE KEY-----"  # the end of a PEM private key's BEGIN line, any algorithm


def mark_of(info: mi.Type) -> object:
    """The mark a field of this msgspec type carries (True: :data:`Secret`, ``"header"``:
    :data:`HeaderValue`; None: none): on the value, on a member of its union
    (``Secret | None``), or on the items of its list or the values of its dict. A nested
    Struct's own fields are its own."""
    if isinstance(info, mi.Metadata):
        return (info.extra or {}).get(SECRET_MARK) or mark_of(info.type)
    if isinstance(info, mi.UnionType):
        return next((m for m in map(mark_of, info.types) if m), None)
    if isinstance(info, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        return mark_of(info.item_type)
    if isinstance(info, mi.DictType):
        return mark_of(info.value_type)
    return None


def is_secret(info: mi.Type) -> bool:
    """Whether a field of this msgspec type carries a mark (:func:`mark_of`)."""
    return bool(mark_of(info))


def field_marks(cls: type[msgspec.Struct]) -> dict[str, object]:
    """The marks of ``cls``'s marked fields, by attribute name."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    marks = {field.name: mark_of(field.type) for field in info.fields}
    return {name: mark for name, mark in marks.items() if mark}


def secret_fields(cls: type[msgspec.Struct]) -> frozenset[str]:
    """The attribute names of ``cls``'s marked fields."""
    return frozenset(field_marks(cls))


def credential_header(name: str) -> bool:
    """Whether a header of this name carries a credential (its value is masked)."""
    return _CREDENTIAL_HEADER.search(name) is not None


def _mask(value: Any) -> Any:
    """A marked value as shown: each string masked, the shape kept."""
    if isinstance(value, str):
        return MASK if value else value
    if isinstance(value, list):
        return [_mask(item) for item in value]
    if isinstance(value, dict):
        return {key: _mask(item) for key, item in value.items()}
    return MASK  # a value of another type (none is marked today): nothing of it shows


def _mask_by_name(headers: Any) -> Any:
    """A ``dict[str, HeaderValue]`` as shown: the values of credential headers masked."""
    if not isinstance(headers, dict):
        return _mask(headers)
    return {
        name: MASK if value and credential_header(name) else value
        for name, value in headers.items()
    }


class Redactor:
    """Shows configuration values without their secrets (see the module doc).

    Learns each Struct class's marked fields the first time it meets the class, so one
    Redactor kept by a reader (the API) pays the introspection once."""

    def __init__(self, enc_hook: Callable[[Any], Any] = enc_hook) -> None:
        self.enc_hook = enc_hook
        self._fields: dict[type, dict[str, tuple[str, object]]] = {}

    def shown(self, value: Any) -> Any:
        """``value`` (a configuration Struct, or lists and dicts of them) as builtins,
        ``msgspec.to_builtins`` with the enc_hook, every secret masked."""
        return self._walk(value, msgspec.to_builtins(value, enc_hook=self.enc_hook))

    def _learn(self, cls: type) -> dict[str, tuple[str, object]]:
        """Key as encoded -> (attribute, mark or None), per field of ``cls``."""
        marks = field_marks(cls)
        found = self._fields[cls] = {
            field.encode_name: (field.name, marks.get(field.name))
            for field in msgspec.structs.fields(cls)
        }
        return found

    def _walk(self, value: Any, out: Any) -> Any:
        """``out`` (the builtins of ``value``, fresh: changed in place) with the secrets
        of ``value`` masked. Only what the encoding holds is visited (defaults are left
        out), and a plain value's leaves are only read."""
        if isinstance(out, str):
            return _unmarked(out)
        if isinstance(out, dict):
            if isinstance(value, msgspec.Struct):
                fields = self._fields.get(type(value))
                if fields is None:
                    fields = self._learn(type(value))
                for key, shown in out.items():
                    found = fields.get(key)
                    if found is None:  # a tag
                        continue
                    name, marked = found
                    if marked:
                        out[key] = _mask_by_name(shown) if marked == BY_NAME else _mask(shown)
                    elif type(shown) is str:  # the most common leaf, without a call
                        out[key] = _unmarked(shown)
                    elif isinstance(shown, dict | list):
                        out[key] = self._walk(getattr(value, name), shown)
            elif isinstance(value, dict):
                # to_builtins keeps the order of a dict's items (and string keys as they are)
                for key, item in zip(list(out), value.values(), strict=True):
                    out[key] = self._walk(item, out[key])
            return out
        if isinstance(out, list) and isinstance(value, list | tuple):
            for i, item in enumerate(value):
                out[i] = self._walk(item, out[i])
        return out


def _unmarked(text: str) -> str:
    """A string of no marked field as shown: a private key masked, a URL's password too."""
    if PRIVATE_KEY in text:
        return MASK
    if "://" in text and "@" in text:
        try:
            password = urlsplit(text).password
        except ValueError:  # not a URL after all
            return text
        if password:
            return text.replace(f":{password}@", f":{MASK}@", 1)
    return text


def redacted(value: Any) -> Any:
    """``value``'s builtins without secrets (one :class:`Redactor`, used once: for a log
    line or ``edge check``; a reader showing many values keeps a Redactor)."""
    return Redactor().shown(value)
