"""An in-memory Kubernetes API server for tests, served over a real socket.

Owns an object store for the kinds edge reads (see ``KINDS``) and serves it over
HTTP/1.1 on 127.0.0.1 (port 0) the way the API server does, so the official
``kubernetes`` client and edge's reflector talk to it unchanged: LIST with paging
and selectors, chunked WATCH streams, object reads and writes, the status
subresource. Tests write objects in-process (``create``, ``update``, ``patch``,
``delete``) and turn fault knobs (``drop_watches``, ``tear_watches``, ``stall_watches``,
``fail_for``, ``latency``, ``compact``, ``watch_limit``, ``watch_error``); every
request is recorded (``count``), and with an ``authorizer`` set each is checked as
RBAC would (``Access``: verb, group, resource, namespace), a refusal answered 403
Forbidden.

Invariants, as in etcd and the API server:

- One global resourceVersion counter; every write takes the next value, and the
  object written (a deleted one included) carries it.
- ``_history`` holds every write after ``_compacted`` in order; a watch or a LIST
  snapshot (``continue`` token, ``resourceVersionMatch=Exact``) that needs a
  version at or below the compaction point answers 410 Gone (reason Expired):
  a watch as an ERROR event carrying a Status, a LIST as an HTTP 410.
- A watch delivers every write after its start version, in order, exactly once,
  filtered by namespace and selectors (an object that stops matching is DELETED,
  one that starts matching is ADDED, as the API server's watch cache does).
- A LIST with ``resourceVersion=0`` (and no ``continue``) is answered whole,
  ignoring ``limit``, as the API server's watch cache answers it (kubernetes#70735);
  any other LIST pages by ``limit``.
- All state is guarded by one condition; no socket is written while holding it.
  Stored objects are never changed in place (a write stores a new dict).

Not served (not needed by edge): json-patch, server-side apply, finalizers,
admission, discovery beyond ``/version``, watch of a single object by name
other than through ``fieldSelector``. Field selectors accept any dotted path
(``metadata.name``, ``type``, ``spec.nodeName``), compared as strings; the real
server allows only a list per kind.

``ApiError`` (derives from :class:`edge.errors.EdgeError`) is the error the
in-process API raises and the HTTP side answers as a Status object.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import itertools
import logging
import math
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlsplit

import orjson

from edge.errors import EdgeError

__all__ = ["KINDS", "Access", "ApiError", "Emulator", "Kind", "ListAnswer", "RequestRecord"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    status: bool  # has a status subresource

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


GW = "gateway.networking.k8s.io"

KINDS = (
    Kind("Service", "", "v1", "services", namespaced=True, status=True),
    Kind("Secret", "", "v1", "secrets", namespaced=True, status=False),
    Kind("ConfigMap", "", "v1", "configmaps", namespaced=True, status=False),
    Kind("Pod", "", "v1", "pods", namespaced=True, status=True),
    Kind("Node", "", "v1", "nodes", namespaced=False, status=True),
    Kind(
        "EndpointSlice", "discovery.k8s.io", "v1", "endpointslices", namespaced=True, status=False
    ),
    Kind("Ingress", "networking.k8s.io", "v1", "ingresses", namespaced=True, status=True),
    Kind(
        "IngressClass", "networking.k8s.io", "v1", "ingressclasses", namespaced=False, status=False
    ),
    # Traefik's kinds, which the kubernetesCRD provider reads (edge's k8s/crds/ defines them)
    *(
        Kind(kind, "traefik.io", "v1alpha1", f"{kind.lower()}s", namespaced=True, status=False)
        for kind in (
            "IngressRoute",
            "IngressRouteTCP",
            "IngressRouteUDP",
            "Middleware",
            "MiddlewareTCP",
            "TLSOption",
            "TLSStore",
            "TraefikService",
            "ServersTransport",
            "ServersTransportTCP",
        )
    ),
    # The Gateway API (gateway.networking.k8s.io), which the kubernetesGateway provider reads
    Kind("Namespace", "", "v1", "namespaces", namespaced=False, status=True),
    Kind("GatewayClass", GW, "v1", "gatewayclasses", namespaced=False, status=True),
    Kind("Gateway", GW, "v1", "gateways", namespaced=True, status=True),
    Kind("HTTPRoute", GW, "v1", "httproutes", namespaced=True, status=True),
    Kind("GRPCRoute", GW, "v1", "grpcroutes", namespaced=True, status=True),
    Kind("TLSRoute", GW, "v1", "tlsroutes", namespaced=True, status=True),
    Kind("TCPRoute", GW, "v1", "tcproutes", namespaced=True, status=True),
    Kind("UDPRoute", GW, "v1", "udproutes", namespaced=True, status=True),
    Kind("ReferenceGrant", GW, "v1beta1", "referencegrants", namespaced=True, status=False),
    # core v1 Events, which edge posts on the objects it refuses
    Kind("Event", "", "v1", "events", namespaced=True, status=False),
    # the CRDs themselves, which the Gateway provider reads for the bundle version
    Kind(
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        namespaced=False,
        status=True,
    ),
)


class ApiError(EdgeError):
    """A request the emulator refuses; becomes a Status object with ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str, message: str):
        self.code = code
        self.reason = reason
        self.message = message
        super().__init__(f"{code} {reason}: {message}")

    def status(self) -> Obj:
        return status_object(self.code, self.reason, self.message)


def status_object(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


LISTEN_BACKLOG = 128  # connections waiting to be accepted (the kernel's default somaxconn)


class RequestRecord(NamedTuple):
    at: float  # time.monotonic()
    method: str
    path: str  # without the query
    query: dict[str, str]
    authorization: str | None


class ListAnswer(NamedTuple):
    """A LIST the emulator answered: when its request arrived and when the last byte
    of its answer was written (``time.monotonic()``), so a benchmark can tell the
    emulator's own time (encoding a 20,000-endpoint LIST) from its client's."""

    path: str
    received: float
    answered: float
    size: int


class Access(NamedTuple):
    """What RBAC decides on: ``verb`` (get list watch create update patch delete), the
    API ``group`` ("" core), ``resource`` (``ingresses``, ``ingresses/status``) and
    ``namespace`` (None: cluster-scoped, or every namespace)."""

    verb: str
    group: str
    resource: str
    namespace: str | None


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class _Event(NamedTuple):
    rv: int
    kind: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    prev: Obj | None  # the object before this write (None for ADDED)


# --- selectors -------------------------------------------------------------------

_LABEL_REQ = re.compile(
    r"""^\s*(?:
        (?P<not>!)\s*(?P<nkey>[\w./-]+)
      | (?P<skey>[\w./-]+)\s*(?P<setop>in|notin)\s*\((?P<values>[^)]*)\)
      | (?P<key>[\w./-]+)\s*(?P<op>==|=|!=)\s*(?P<value>[\w.-]*)
      | (?P<ekey>[\w./-]+)
    )\s*$""",
    re.X,
)


def _split_top(selector: str) -> list[str]:
    """Split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def parse_label_selector(selector: str) -> list[tuple[str, str, frozenset[str]]]:
    """``(key, op, values)`` requirements; op is one of = != in notin exists !exists."""
    reqs = []
    for part in _split_top(selector):
        m = _LABEL_REQ.match(part)
        if m is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement {part.strip()!r}")
        if m["not"]:
            reqs.append((m["nkey"], "!exists", frozenset()))
        elif m["skey"]:
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            reqs.append((m["skey"], m["setop"], values))
        elif m["key"]:
            reqs.append((m["key"], "!=" if m["op"] == "!=" else "=", frozenset([m["value"]])))
        else:
            reqs.append((m["ekey"], "exists", frozenset()))
    return reqs


def labels_match(reqs: list[tuple[str, str, frozenset[str]]], labels: dict[str, str]) -> bool:
    for key, op, values in reqs:
        present = key in labels
        value = labels.get(key)
        if op == "exists":
            ok = present
        elif op == "!exists":
            ok = not present
        elif op in ("=", "in"):
            ok = present and value in values
        else:  # != and notin match objects without the label too
            ok = not present or value not in values
        if not ok:
            return False
    return True


def parse_field_selector(selector: str) -> list[tuple[tuple[str, ...], bool, str]]:
    """``(path, equal, value)`` requirements from ``a.b=v,c!=w``."""
    reqs = []
    for part in _split_top(selector):
        m = re.match(r"^\s*([\w.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector {part.strip()!r}")
        reqs.append((tuple(m[1].split(".")), m[2] != "!=", m[3]))
    return reqs


def _field(obj: Any, path: tuple[str, ...]) -> str:
    for step in path:
        if not isinstance(obj, dict):
            return ""
        obj = obj.get(step)
    if obj is None:
        return ""
    if isinstance(obj, bool):
        return "true" if obj else "false"
    return str(obj)


def fields_match(reqs: list[tuple[tuple[str, ...], bool, str]], obj: Obj) -> bool:
    return all((_field(obj, path) == value) == equal for path, equal, value in reqs)


@dataclass
class _Filter:
    namespace: str | None
    labels: list[tuple[str, str, frozenset[str]]]
    fields: list[tuple[tuple[str, ...], bool, str]]

    def __call__(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return labels_match(self.labels, meta.get("labels") or {}) and fields_match(
            self.fields, obj
        )


# --- watches ---------------------------------------------------------------------


@dataclass(eq=False)
class _Watch:
    id: int
    kind: Kind
    filter: _Filter
    bookmarks: bool
    sock: socket.socket
    stalled: bool = False
    dropped: bool = False
    bookmark_now: bool = False
    torn: bool = False  # the next event goes out cut in half, then the connection drops


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _clone(obj: Obj) -> Obj:
    return orjson.loads(orjson.dumps(obj))


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Emulator:
    """The API server. ``with Emulator() as emu:`` starts it; ``emu.url`` is its address.

    ``token``: when set, every request must carry ``Authorization: Bearer <token>``
    (401 otherwise; the scheme's case does not matter). ``bookmark_interval``: seconds between BOOKMARK events on a
    watch that asked for them (None: only when ``send_bookmarks`` is called).
    """

    def __init__(self, *, token: str | None = None, bookmark_interval: float | None = 60.0):
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.latency = 0.0  # seconds added before every answer
        # seconds after which every watch ends cleanly whatever its timeoutSeconds (a
        # proxy's idle cut, an API server's short --min-request-timeout); None: no cap
        self.watch_limit: float | None = None
        # (code, reason): every watch opened answers one ERROR event carrying that Status
        # and ends (etcd trouble: "etcdserver: request timed out", 500); None: no fault
        self.watch_error: tuple[int, str] | None = None
        # RBAC: None allows everything; else each request's Access must be allowed
        self.authorizer: Callable[[Access], bool] | None = None
        self._cond = threading.Condition(threading.RLock())
        self._rv = 1
        self._compacted = 1  # every write at or below this version is forgotten
        self._objects: dict[str, dict[Key, Obj]] = {k.kind: {} for k in KINDS}
        self._history: list[_Event] = []
        self._history_rv: list[int] = []
        self._watches: set[_Watch] = set()
        self._watch_ids = itertools.count(1)
        self._conns: set[socket.socket] = set()
        self._fail_until = 0.0
        self._fail_code = 503
        self._stopping = False
        self._requests: list[RequestRecord] = []
        self._list_answers: list[ListAnswer] = []
        self._kinds = {k.kind: k for k in KINDS}
        self._routes = {(k.group, k.version, k.plural): k for k in KINDS}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> Emulator:
        emu = self

        class Server(ThreadingHTTPServer):
            daemon_threads = False
            block_on_close = True  # server_close joins every handler thread
            # socketserver's default backlog is 5: a provider starting 15 reflectors at
            # once overflowed it, and the dropped SYNs came back after TCP's 1 s
            # retransmission timeout, a second counted as the client's.
            request_queue_size = LISTEN_BACKLOG

        class Handler(_Handler):
            emulator = emu

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="apiserver-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        assert self._server is not None, "emulator not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            conns = list(self._conns)
        if self._server is not None:
            self._server.shutdown()
            for sock in conns:
                _shutdown(sock)
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- objects, in-process ----------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def kind(self, name: str) -> Kind:
        try:
            return self._kinds[name]
        except KeyError:
            raise ApiError(404, "NotFound", f"kind {name!r} is not served") from None

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A copy of the stored object, or None."""
        with self._cond:
            obj = self._objects[self.kind(kind).kind].get((namespace, name))
            return _clone(obj) if obj is not None else None

    def list(self, kind: str) -> list[Obj]:
        with self._cond:
            store = self._objects[self.kind(kind).kind]
            return [_clone(store[k]) for k in sorted(store)]

    def create(self, obj: Obj) -> Obj:
        """Store a new object (``kind`` names its kind); 409 AlreadyExists if present."""
        kind, key = self._identify(obj)
        with self._cond:
            if key in self._objects[kind.kind]:
                raise ApiError(409, "AlreadyExists", f'{kind.plural} "{key[1]}" already exists')
            new = _clone(obj)
            meta = new.setdefault("metadata", {})
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now_iso()
            meta["generation"] = 1
            return self._write(kind, key, "ADDED", new, None)

    def update(self, obj: Obj, *, check_version: bool = False) -> Obj:
        """Replace a stored object (status included); 404 if absent.

        ``check_version``: refuse (409 Conflict) when the object carries a
        resourceVersion other than the stored one, as an HTTP PUT does.
        """
        kind, key = self._identify(obj)
        with self._cond:
            old = self._objects[kind.kind].get(key)
            if old is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
            new = _clone(obj)
            meta = new.setdefault("metadata", {})
            given = meta.get("resourceVersion")
            if check_version and given and given != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind.plural} "{key[1]}": '
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                )
            for name in ("uid", "creationTimestamp"):
                meta[name] = old["metadata"][name]
            meta["generation"] = old["metadata"].get("generation", 1) + (
                new.get("spec") != old.get("spec")
            )
            return self._write(kind, key, "MODIFIED", new, old)

    def apply(self, obj: Obj) -> Obj:
        """Create or update."""
        kind, key = self._identify(obj)
        with self._cond:
            if key in self._objects[kind.kind]:
                return self.update(obj)
            return self.create(obj)

    def patch(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        """Apply a JSON merge patch to a stored object (status included)."""
        with self._cond:
            k = self.kind(kind)
            old = self._objects[k.kind].get((namespace, name))
            if old is None:
                raise ApiError(404, "NotFound", f'{k.plural} "{name}" not found')
            new = merge_patch(_clone(old), patch)
            new["metadata"]["name"], new["metadata"]["namespace"] = name, namespace
            if not k.namespaced:
                new["metadata"].pop("namespace", None)
            new["metadata"].pop("resourceVersion", None)
            return self.update(new)

    def delete(self, kind: str, namespace: str, name: str) -> Obj:
        """Remove an object; its DELETED event carries the deletion's resourceVersion."""
        with self._cond:
            k = self.kind(kind)
            key = (namespace if k.namespaced else "", name)
            old = self._objects[k.kind].get(key)
            if old is None:
                raise ApiError(404, "NotFound", f'{k.plural} "{name}" not found')
            return self._write(k, key, "DELETED", _clone(old), old)

    def compact(self, rv: int | None = None) -> int:
        """Forget history up to ``rv`` (default: now); older watches and snapshots get 410."""
        with self._cond:
            target = self._rv if rv is None else min(rv, self._rv)
            cut = bisect.bisect_right(self._history_rv, target)
            del self._history[:cut]
            del self._history_rv[:cut]
            self._compacted = max(self._compacted, target)
            self._cond.notify_all()
            return self._compacted

    def _identify(self, obj: Obj) -> tuple[Kind, Key]:
        kind = self.kind(obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{kind.kind}: metadata.name is required")
        namespace = (meta.get("namespace") or "default") if kind.namespaced else ""
        return kind, (namespace, name)

    def _write(self, kind: Kind, key: Key, type_: str, new: Obj, old: Obj | None) -> Obj:
        """Store (or delete) under the lock with the next resourceVersion; returns a copy."""
        self._rv += 1
        meta = new["metadata"]
        meta["name"] = key[1]
        if kind.namespaced:
            meta["namespace"] = key[0]
        else:
            meta.pop("namespace", None)
        meta["resourceVersion"] = str(self._rv)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        if type_ == "DELETED":
            del self._objects[kind.kind][key]
        else:
            self._objects[kind.kind][key] = new
        self._history.append(_Event(self._rv, kind.kind, type_, new, old))
        self._history_rv.append(self._rv)
        self._cond.notify_all()
        return _clone(new)

    def _state_at(self, kind: Kind, rv: int) -> dict[Key, Obj]:
        """The objects of ``kind`` as they were at ``rv`` (410 if compacted away)."""
        store = self._objects[kind.kind]
        if rv >= self._rv:
            return store
        if rv < self._compacted:
            raise ApiError(
                410,
                "Expired",
                f"too old resource version: {rv} ({self._compacted})",
            )
        state = dict(store)
        start = bisect.bisect_right(self._history_rv, rv)
        for ev in reversed(self._history[start:]):
            if ev.kind != kind.kind:
                continue
            key = (ev.obj["metadata"].get("namespace", ""), ev.obj["metadata"]["name"])
            if ev.prev is None:
                state.pop(key, None)
            else:
                state[key] = ev.prev
        return state

    # --- fault knobs ------------------------------------------------------------------

    def drop_watches(self) -> int:
        """Close every open watch connection now (no final chunk); returns how many."""
        with self._cond:
            watches = list(self._watches)
            for w in watches:
                w.dropped = True
            self._cond.notify_all()
        for w in watches:
            _shutdown(w.sock)
        return len(watches)

    def tear_watches(self) -> int:
        """Open watches send their next event cut in half (a partial JSON line, as a reset
        mid-write leaves it) and then drop the connection; returns how many."""
        with self._cond:
            for w in self._watches:
                w.torn = True
            return len(self._watches)

    def stall_watches(self) -> int:
        """Open watches stop sending anything (events, bookmarks) but stay open.

        A stalled watch ends only when the client closes it, ``drop_watches`` or
        ``stop``; watches opened later are not stalled. Returns how many stalled.
        """
        with self._cond:
            for w in self._watches:
                w.stalled = True
            self._cond.notify_all()
            return len(self._watches)

    def send_bookmarks(self) -> None:
        """Every open watch that asked for bookmarks gets one now."""
        with self._cond:
            for w in self._watches:
                w.bookmark_now = True
            self._cond.notify_all()

    def fail_for(self, seconds: float, code: int = 503) -> None:
        """Answer every request with ``code`` (a Status object) for ``seconds``.

        Open watches are left alone; ``drop_watches`` as well makes an API server
        restart."""
        with self._cond:
            self._fail_until = time.monotonic() + seconds
            self._fail_code = code

    def open_watches(self, kind: str | None = None) -> int:
        with self._cond:
            return sum(1 for w in self._watches if kind is None or w.kind.kind == kind)

    def wait_watches(self, count: int, *, kind: str | None = None, timeout: float = 5.0) -> bool:
        """Wait until at least ``count`` watches (of ``kind``) are open and unstalled."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                n = sum(
                    1
                    for w in self._watches
                    if not w.stalled and (kind is None or w.kind.kind == kind)
                )
                left = deadline - time.monotonic()
                if n >= count:
                    return True
                if left <= 0:
                    return False
                self._cond.wait(left)

    @property
    def requests(self) -> list[RequestRecord]:
        with self._cond:
            return list(self._requests)

    @property
    def list_answers(self) -> list[ListAnswer]:
        """Every LIST answered so far (2xx or not), in the order they were finished."""
        with self._cond:
            return list(self._list_answers)

    def count(
        self,
        path: str | None = None,
        *,
        since: float = 0.0,
        method: str | None = None,
        watch: bool | None = None,
    ) -> int:
        """Requests received (at or after monotonic ``since``), by path, method, watch."""
        n = 0
        for r in self.requests:
            if r.at < since or (path is not None and r.path != path):
                continue
            if method is not None and r.method != method:
                continue
            if watch is not None and (r.query.get("watch") in ("true", "1")) != watch:
                continue
            n += 1
        return n

    # --- HTTP ---------------------------------------------------------------------

    def _record(self, record: RequestRecord) -> None:
        with self._cond:
            self._requests.append(record)
            self._cond.notify_all()

    def _failing(self) -> int | None:
        with self._cond:
            return self._fail_code if time.monotonic() < self._fail_until else None

    def _route(self, path: str) -> tuple[Kind, str | None, str | None, str | None]:
        """``(kind, namespace, name, subresource)`` of an API path."""
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        kind = self._routes.get((group, version, rest[0]))
        if kind is None or (namespace is not None and not kind.namespaced):
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (sub != "status" or not kind.status):
            raise ApiError(404, "NotFound", f"no subresource {sub!r} on {kind.plural}")
        if name is not None and kind.namespaced and namespace is None:
            raise ApiError(404, "NotFound", f"the server could not find {path}")
        return kind, namespace, name, sub

    def _list(self, kind: Kind, namespace: str | None, q: dict[str, str]) -> Obj:
        flt = _Filter(
            namespace,
            parse_label_selector(q.get("labelSelector", "")),
            parse_field_selector(q.get("fieldSelector", "")),
        )
        limit = int(q.get("limit") or 0)
        after: Key | None = None
        with self._cond:
            if q.get("continue"):
                try:
                    token = orjson.loads(base64.urlsafe_b64decode(q["continue"]))
                    at, after = int(token["rv"]), (token["ns"], token["name"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
                if at < self._compacted:
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
            else:
                at = self._rv
                rv_q, match = q.get("resourceVersion", ""), q.get("resourceVersionMatch", "")
                if match == "Exact":
                    if not rv_q:
                        raise ApiError(400, "BadRequest", "resourceVersionMatch requires a version")
                    at = int(rv_q)
                elif match not in ("", "NotOlderThan"):
                    raise ApiError(400, "BadRequest", f"unknown resourceVersionMatch {match!r}")
                if rv_q and int(rv_q) > self._rv:
                    raise ApiError(504, "Timeout", f"Too large resource version: {rv_q}")
            if q.get("resourceVersion") == "0" and not q.get("continue"):
                limit = 0  # the watch cache answers rv=0 whole, whatever the limit
            state = self._state_at(kind, at)
            keys = sorted(k for k in state if after is None or k > after)
            items, remaining, last = [], 0, None
            for key in keys:
                obj = state[key]
                if not flt(obj):
                    continue
                if limit and len(items) >= limit:
                    remaining += 1
                    continue
                items.append(obj)
                last = key
            # Stored objects are never changed in place (a write stores a new one), so
            # a shallow copy without the item's kind is enough to encode outside the lock.
            body = [
                {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} for obj in items
            ]
        meta: Obj = {"resourceVersion": str(at)}
        if remaining and last is not None:
            meta["continue"] = base64.urlsafe_b64encode(
                orjson.dumps({"rv": at, "ns": last[0], "name": last[1]})
            ).decode()
            meta["remainingItemCount"] = remaining
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": body,
        }

    def _collection_write(self, kind: Kind, namespace: str | None, body: Obj) -> Obj:
        body = dict(body, kind=kind.kind)
        meta = body.setdefault("metadata", {})
        if namespace is not None:
            if meta.get("namespace", namespace) != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the object does not match")
            meta["namespace"] = namespace
        return self.create(body)

    def _object_write(
        self,
        method: str,
        kind: Kind,
        namespace: str | None,
        name: str,
        sub: str | None,
        body: Any,
        content_type: str,
    ) -> Obj:
        key = (namespace or "", name)
        with self._cond:
            old = self._objects[kind.kind].get(key)
            if method == "DELETE":
                return self.delete(kind.kind, key[0], name)
            if old is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be a JSON object")
            if method == "PATCH":
                media = content_type.split(";")[0].strip()
                if media not in (
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ):
                    raise ApiError(415, "UnsupportedMediaType", f"patch type {media!r}")
                given = (body.get("metadata") or {}).get("resourceVersion")
                new = merge_patch(_clone(old), body)
                new["metadata"]["resourceVersion"] = given or old["metadata"]["resourceVersion"]
            else:
                new = dict(body)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match")
            if sub == "status":  # only the status changes through the subresource
                status = new.get("status")
                new = _clone(old)
                new.pop("status", None)
                if status is not None:
                    new["status"] = status
                new["metadata"]["resourceVersion"] = meta.get("resourceVersion")
            elif kind.status:  # and never through the main resource
                new["status"] = old.get("status")
                if new["status"] is None:
                    new.pop("status")
            new["kind"] = kind.kind
            new["metadata"]["name"] = name
            if namespace is not None:
                new["metadata"]["namespace"] = namespace
            return self.update(new, check_version=True)

    def _watch(self, h: _Handler, kind: Kind, namespace: str | None, q: dict[str, str]) -> None:
        flt = _Filter(
            namespace,
            parse_label_selector(q.get("labelSelector", "")),
            parse_field_selector(q.get("fieldSelector", "")),
        )
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else math.inf
        if self.watch_limit is not None:
            timeout = min(timeout, self.watch_limit)
        deadline = time.monotonic() + timeout
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        rv_q = q.get("resourceVersion", "")
        start = None if rv_q in ("", "0") else int(rv_q)  # a bad number: 400, before headers
        # headers first: a watch counts as open (and can be dropped) once the client
        # has its answer, so a drop never looks like a failed request it may retry
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        if self.watch_error is not None:
            code, reason = self.watch_error
            line = _event_line("ERROR", status_object(code, reason, "the emulator fails watches"))
            h.write_chunks([line], last=True)
            return
        with self._cond:
            w = _Watch(next(self._watch_ids), kind, flt, bookmarks, h.connection)
            self._watches.add(w)
            self._cond.notify_all()
            initial: list[bytes] = []
            if start is None:  # "get state and start at most recent"
                last = self._rv
                store = self._objects[kind.kind]
                for key in sorted(store):
                    if flt(store[key]):
                        initial.append(_event_line("ADDED", store[key]))
            else:
                last = start
        try:
            if initial:
                h.write_chunks(initial)
            self._stream(h, w, last, deadline)
        except OSError:
            h.close_connection = True
        finally:
            with self._cond:
                self._watches.discard(w)
                self._cond.notify_all()

    def _stream(self, h: _Handler, w: _Watch, last: int, deadline: float) -> None:
        interval = self.bookmark_interval if w.bookmarks else None
        next_bookmark = time.monotonic() + interval if interval else math.inf
        while True:
            lines: list[bytes] = []
            end = False
            with self._cond:
                while True:
                    if self._stopping or w.dropped:
                        h.abort()
                        return
                    if w.stalled:
                        break
                    if last < self._compacted:
                        lines.append(_error_line(410, "Expired", self._compacted, last))
                        end = True
                        break
                    now = time.monotonic()
                    start = bisect.bisect_right(self._history_rv, last)
                    if start < len(self._history):
                        for ev in self._history[start:]:
                            if ev.kind == w.kind.kind:
                                line = _translate(ev, w.filter)
                                if line is not None:
                                    lines.append(line)
                        last = self._history_rv[-1]
                        if lines:
                            break
                    if now >= deadline:
                        end = True
                        break
                    if w.bookmark_now or now >= next_bookmark:
                        if w.bookmarks:
                            lines.append(_bookmark_line(w.kind, self._rv))
                        w.bookmark_now = False
                        next_bookmark = now + interval if interval else math.inf
                        break
                    if _peer_closed(w.sock):  # the client went away: end as the server does
                        h.abort()
                        return
                    self._cond.wait(min(deadline, next_bookmark, now + 0.1) - now)
            if w.stalled:
                _wait_closed(w, lambda: self._stopping)
                h.abort()
                return
            if end:  # unregistered before the client can see the end
                with self._cond:
                    self._watches.discard(w)
                    self._cond.notify_all()
                h.write_chunks(lines, last=True)
                return
            if lines and w.torn:  # a reset in the middle of a line: half of it, no end
                h.write_chunks([lines[0][: len(lines[0]) // 2]])
                h.abort()
                return
            if lines:
                h.write_chunks(lines)


def _event_line(type_: str, obj: Obj) -> bytes:
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


def _bookmark_line(kind: Kind, rv: int) -> bytes:
    return _event_line(
        "BOOKMARK",
        {
            "kind": kind.kind,
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": str(rv)},
        },
    )


def _error_line(code: int, reason: str, compacted: int, asked: int) -> bytes:
    return _event_line(
        "ERROR",
        status_object(code, reason, f"too old resource version: {asked} ({compacted})"),
    )


def _translate(ev: _Event, flt: _Filter) -> bytes | None:
    """The event a watch with ``flt`` sees for ``ev`` (selector transitions included)."""
    now = flt(ev.obj)
    if ev.type == "ADDED":
        return _event_line("ADDED", ev.obj) if now else None
    if ev.type == "DELETED":
        return _event_line("DELETED", ev.obj) if now else None
    before = flt(ev.prev)
    if now and before:
        return _event_line("MODIFIED", ev.obj)
    if now:
        return _event_line("ADDED", ev.obj)
    if before:
        return _event_line("DELETED", ev.obj)
    return None


def _peer_closed(sock: socket.socket, wait: float = 0.0) -> bool:
    """The client closed its end (EOF, or the socket is gone)."""
    try:
        readable, _, _ = select.select([sock], [], [], wait)
        return bool(readable) and not sock.recv(1, socket.MSG_PEEK)
    except (OSError, ValueError):
        return True


def _wait_closed(w: _Watch, stopping: Any) -> None:
    """Block until the client closes a stalled watch's socket, it is dropped, or stop."""
    for _ in itertools.count():
        if w.dropped or stopping() or _peer_closed(w.sock, 0.05):
            return


def _authorized(header: str | None, token: str) -> bool:
    """``Bearer <token>``; the scheme is case-insensitive (the in-cluster loader writes
    ``bearer``)."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and value == token


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    emulator: Emulator  # set by Emulator.start

    def setup(self) -> None:
        super().setup()
        with self.emulator._cond:
            self.emulator._conns.add(self.connection)

    def finish(self) -> None:
        with self.emulator._cond:
            self.emulator._conns.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("emulator: " + format, *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def write_chunks(self, lines: Iterable[bytes], *, last: bool = False) -> None:
        """Each line as one chunk, in one write; ``last`` ends the body (a clean end)."""
        parts = [b"%x\r\n%s\r\n" % (len(line), line) for line in lines]
        if last:
            parts.append(b"0\r\n\r\n")
        self.wfile.write(b"".join(parts))

    def abort(self) -> None:
        """End the connection without finishing the response (a broken stream)."""
        self.close_connection = True
        _shutdown(self.connection)

    def _send_json(self, code: int, body: Any) -> int:
        """Send ``body`` as JSON; its size in bytes."""
        data = orjson.dumps(body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return len(data)

    def _serve(self, method: str) -> None:
        emu = self.emulator
        url = urlsplit(self.path)
        q = dict(parse_qsl(url.query, keep_blank_values=True))
        received = time.monotonic()
        emu._record(RequestRecord(received, method, url.path, q, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if emu.latency:
            time.sleep(emu.latency)
        try:
            code = emu._failing()
            if code is not None:
                raise ApiError(code, "ServiceUnavailable", "the emulator is failing on purpose")
            if emu.token is not None and not _authorized(
                self.headers.get("Authorization"), emu.token
            ):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if url.path == "/version":
                self._send_json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
                return
            kind, namespace, name, sub = emu._route(url.path)
            if emu.authorizer is not None:
                if method == "GET" and name is None:
                    verb = "watch" if q.get("watch") in ("true", "1") else "list"
                else:
                    verb = _VERBS.get(method, "get")
                resource = f"{kind.plural}/{sub}" if sub else kind.plural
                if not emu.authorizer(Access(verb, kind.group, resource, namespace)):
                    where = f' in the namespace "{namespace}"' if namespace else ""
                    raise ApiError(
                        403,
                        "Forbidden",
                        f'{resource} is forbidden: cannot {verb} resource "{resource}" in API '
                        f'group "{kind.group}"{where}',
                    )
            try:
                body = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                raise ApiError(400, "BadRequest", "the body is not JSON") from None
            if name is None:
                if method == "GET" and q.get("watch") in ("true", "1"):
                    emu._watch(self, kind, namespace, q)
                    return
                if method == "GET":
                    size = self._send_json(200, emu._list(kind, namespace, q))
                    answer = ListAnswer(url.path, received, time.monotonic(), size)
                    with emu._cond:
                        emu._list_answers.append(answer)
                elif method == "POST" and isinstance(body, dict):
                    self._send_json(201, emu._collection_write(kind, namespace, body))
                else:
                    raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
                return
            if method == "GET":
                obj = emu.get(kind.kind, namespace or "", name)
                if obj is None:
                    raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
                self._send_json(200, obj)
            elif method in ("PUT", "PATCH", "DELETE"):
                ctype = self.headers.get("Content-Type", "")
                self._send_json(
                    200, emu._object_write(method, kind, namespace, name, sub, body, ctype)
                )
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} on an object")
        except ApiError as e:
            self._send_json(e.code, e.status())
        except (ValueError, TypeError) as e:
            self._send_json(400, status_object(400, "BadRequest", str(e)))
