"""Kubernetes Events on the objects edge refuses: one recorder per cluster, every source's.

When a source's conversion leaves part of an object out (an Ingress path whose Service
is missing, an IngressRoute naming an unknown Middleware, an HTTPRoute whose backend
is refused), the problem goes to the log, the API and ``edge check``; here it also
becomes an Event on that object, so ``kubectl describe ingress x`` says why it is not
served, and ``Warning`` Events can be watched, exported and alerted on.

Owns the pure part (a :class:`Refusal`, the Event's name, the bodies written, the
bookkeeping that turns each round's refusals into :class:`Observation` s, and the rule
that decides whether an observation counts on an Event that exists) and the
:class:`EventRecorder`: one per :class:`~edge.providers.kubernetes.client.KubeCore`
(``core.events``), fed by every source on that core from its converter thread
(:meth:`EventRecorder.submit` only queues) and writing from its own thread.

Which API: core ``v1`` Events. ``kubectl describe`` finds an object's Events through
``/api/v1`` with a field selector on ``involvedObject`` (name, namespace, kind, uid)
and shows ``count`` and the first and last timestamps as ``(x3 over 10m)``; core v1
lets a patch bump ``count`` and ``lastTimestamp``, where ``events.k8s.io/v1`` makes
them immutable (it counts in ``series``, which the API server shows in the core view
too, but a repeat there is written by the same rule). The API server keeps one kind
and serves it through both groups, so ``kubectl events`` and readers of
``events.k8s.io`` see these as well. Least privilege is one rule either way
(``create`` and ``patch`` on ``events``, group ``""`` here): no ``get``, ``list`` or
``watch``. An Event is read with an empty JSON merge patch, which the API server
answers with the object and, the object being unchanged, writes nothing.

One Event per distinct refusal, whatever the number of edge pods (a DaemonSet):

- An Event's name is its object's name and a digest of the object's uid, the type,
  the reason and the message (:func:`event_name`). Every pod computes the same name
  for the same refusal, so the Events never multiply: a pod whose create finds the
  Event made by another (409 AlreadyExists) reads it and maybe counts on it. An object
  deleted and made again (a new uid) starts its own Events, as ``kubectl describe``
  would not show the old ones.
- ``count`` counts what happened, not how many pods saw it. A refusal is observed
  (:class:`Tracker`) when it appears in a pod's rounds, first or again after it went
  away (a recurrence), or when its object's ``metadata.generation`` grew while it
  stayed (the object was changed and is still refused). The Event holds the generation
  it has counted up to (annotation :data:`GENERATION`), when it was last seen
  (``lastTimestamp``) and who counted it last (``reportingInstance``). An observation
  counts (:func:`counts`) when its generation is above the Event's; at the same
  generation only when it is a recurrence and the Event was counted last by this pod,
  or by another at least :attr:`Limits.window` seconds away from this sighting
  (closer, it is that pod's sighting of the same recurrence). So N pods seeing one
  change count it once, a pod's restart counts nothing, and an object that flaps
  counts each time it comes back. A patch carries the ``resourceVersion`` it read
  (409 Conflict when another pod wrote meanwhile: read again, decide again).
- An object that becomes valid gets no more warnings (its observations still queued
  are withdrawn) and one ``Normal`` Event, reason :data:`RESOLVED`, counted by the same
  rules.

What it costs the API server: a refusal new to the cluster is a read (404) and a
create from the first pod and a read from each other pod; a restart reads each
refusal once; all within a token bucket per pod (:class:`Limits`: ``rate`` writes a
second after a ``burst``). What is waiting is bounded (``pending``; beyond, new
observations are dropped, counted and logged), coalesced per Event (the newest
observation wins) and dropped at stop.

Invariants: nothing here blocks a source: :meth:`EventRecorder.submit` takes a lock
and returns. An unreachable API server or a refused write (403, an admission webhook)
never holds up configuration or serving: the write is retried with a backoff of its
own (1 s doubling to 60 s), after the others, and a run of failures pauses the
recorder with the same backoff. The recorder's thread is the only one that writes
Events; its requests carry a short timeout (:data:`REQUEST_TIMEOUT`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
import threading
import time
from calendar import timegm
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote

import msgspec
from kubernetes import client as k8s

from edge.providers.kubernetes.client import (
    ApiStatusError,
    Backoff,
    KubeCore,
    KubernetesError,
    Resource,
    Timing,
    request,
)

__all__ = [
    "CONTROLLER",
    "EVENTS",
    "GENERATION",
    "NORMAL",
    "REFUSED",
    "RESOLVED",
    "WARNING",
    "EventRecorder",
    "EventState",
    "Limits",
    "ObjectRef",
    "Observation",
    "Refusal",
    "TokenBucket",
    "Tracker",
    "bump_patch",
    "counts",
    "create_body",
    "event_name",
    "generation_in",
    "reason_code",
    "refusals_of",
    "resolved",
]

log = logging.getLogger(__name__)

EVENTS = Resource("Event", "", "v1", "events")
CONTROLLER = "edge.dev/edge"
"""``reportingComponent`` (events.k8s.io's ``reportingController``) and
``source.component``: what ``kubectl describe`` shows under From."""
GENERATION = "edge.dev/generation"
"""The Event's annotation: the object's ``metadata.generation`` it has counted up to."""
ACTION = "Route"  # what edge was doing with the object (events.k8s.io's ``action``)
WARNING = "Warning"
NORMAL = "Normal"
RESOLVED = "Resolved"
REFUSED = "Refused"  # the reason of a source's problem that names no kind of its own
RESOLVED_MESSAGE = "edge reports no problem with it any more"
DEFAULT_NAMESPACE = (
    "default"  # where the Events of cluster-scoped objects go, as client-go puts them
)
NAME_MAX = 253  # an Event's name is a DNS subdomain
DIGEST = 16  # hex digits of the digest in an Event's name
MESSAGE_MAX = 1024  # events.k8s.io's limit on a note; core v1 has none, a reader has one
INSTANCE_MAX = 128  # the API server's limit on reportingInstance
REQUEST_TIMEOUT = 10.0  # seconds, at most, for one Event write (a stop waits for it)
BACKOFF = (1.0, 60.0)  # base and cap, seconds, of a failed write's retries and of pauses
FAILURE_RUN = 3  # failures in a row that pause the recorder (the API server is the trouble)
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Limits:
    """How much the recorder may write: ``rate`` requests a second on average after a
    ``burst``; at most ``pending`` observations waiting; ``window`` seconds within which
    another pod's count of a recurrence is taken for this pod's (see the module doc);
    the state of at most ``known`` Events remembered (beyond, the oldest is read again
    when needed)."""

    rate: float = 2.0
    burst: int = 20
    pending: int = 4096
    window: float = 60.0
    known: int = 10_000


# --- what is recorded (pure) ------------------------------------------------------------


class ObjectRef(NamedTuple):
    """The object an Event is about (its ``involvedObject``); ``namespace`` is ``""``
    for a cluster-scoped one."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str

    @property
    def label(self) -> str:
        return f"{self.kind} {f'{self.namespace}/' if self.namespace else ''}{self.name}"

    @property
    def event_namespace(self) -> str:
        return self.namespace or DEFAULT_NAMESPACE


class Refusal(NamedTuple):
    """One Event's worth: ``object`` at ``generation``, with ``type`` (:data:`WARNING`
    or :data:`NORMAL`), ``reason`` (UpperCamelCase, short) and ``message``."""

    object: ObjectRef
    generation: int
    type: str
    reason: str
    message: str

    @property
    def event(self) -> str:
        return event_name(self.object, self.type, self.reason, self.message)


class Observation(NamedTuple):
    """A refusal seen at ``seen`` (seconds since the epoch), ``again`` when it had gone
    away in this process and is back; ``name``: its Event's."""

    refusal: Refusal
    name: str
    seen: float
    again: bool


def reason_code(kind: str) -> str:
    """An Event reason from a problem kind: ``service-not-found`` -> ``ServiceNotFound``."""
    return "".join(part[:1].upper() + part[1:] for part in kind.replace("_", "-").split("-"))


def resolved(ref: ObjectRef, generation: int) -> Refusal:
    """The Normal Event of an object that had refusals and has none left."""
    return Refusal(ref, generation, NORMAL, RESOLVED, RESOLVED_MESSAGE)


def event_name(ref: ObjectRef, type_: str, reason: str, message: str) -> str:
    """``<object name>.<digest>``: the same for every pod that sees the same refusal of
    the same object (uid), different for another reason or message; a DNS subdomain of
    at most :data:`NAME_MAX` characters (a long object name is cut)."""
    text = "\0".join((ref.uid, ref.kind, type_, reason, message))
    digest = hashlib.sha256(text.encode()).hexdigest()[:DIGEST]
    base = ref.name[: NAME_MAX - DIGEST - 1].rstrip(".-")
    return f"{base}.{digest}" if base else digest


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC, second precision (``firstTimestamp``, ``lastTimestamp``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _seconds(text: str | None) -> float:
    """The time of an RFC 3339 timestamp (second precision); 0 when absent or unread."""
    if not text:
        return 0.0
    try:
        return float(timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return 0.0


def _message(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def create_body(obs: Observation, instance: str, host: str) -> dict[str, Any]:
    """The Event to create for a first observation."""
    r = obs.refusal
    ref = r.object
    involved = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}
    if ref.namespace:
        involved["namespace"] = ref.namespace
    source = {"component": CONTROLLER, **({"host": host} if host else {})}
    at = timestamp(obs.seen)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": obs.name,
            "namespace": ref.event_namespace,
            "annotations": {GENERATION: str(r.generation)},
        },
        "involvedObject": involved,
        "type": r.type,
        "reason": r.reason,
        "message": _message(r.message),
        "count": 1,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": source,
        "reportingComponent": CONTROLLER,
        "reportingInstance": instance,
        "action": ACTION,
    }


def bump_patch(state: EventState, obs: Observation, instance: str, host: str) -> dict[str, Any]:
    """The merge patch that counts ``obs`` on the Event read as ``state``; it fails (409)
    if the Event was written since."""
    last = max(obs.seen, state.last)
    generation = max(obs.refusal.generation, state.generation)
    return {
        "metadata": {
            "resourceVersion": state.metadata.resource_version,
            "annotations": {GENERATION: str(generation)},
        },
        "count": state.count + 1,
        "lastTimestamp": timestamp(last),
        "reportingInstance": instance,
        "source": {"component": CONTROLLER, "host": host or None},
    }


class _EventMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    annotations: dict[str, str] = {}


class EventState(msgspec.Struct, rename="camel"):
    """What the recorder reads of an Event (the answer to a create, read or patch)."""

    metadata: _EventMeta = msgspec.field(default_factory=_EventMeta)
    count: int = 0
    last_timestamp: str | None = None
    reporting_instance: str = ""

    @property
    def generation(self) -> int:
        try:
            return int(self.metadata.annotations.get(GENERATION, "0"))
        except ValueError:
            return 0

    @property
    def last(self) -> float:
        return _seconds(self.last_timestamp)


_STATE = msgspec.json.Decoder(EventState)


def counts(obs: Observation, state: EventState, instance: str, window: float) -> bool:
    """Whether ``obs`` counts on the Event read as ``state`` (see the module doc), or
    was counted already (by another pod, or by this one before a restart)."""
    generation, held = obs.refusal.generation, state.generation
    if generation != held:
        return generation > held
    if not obs.again:
        return False
    return state.reporting_instance == instance or abs(obs.seen - state.last) >= window


class Tracker:
    """One source's refusals from round to round (its converter thread's, no lock): which
    are new, back, or still there on a newer generation of their object, and which
    objects have none left. ``known`` bounds the Events remembered as seen (for
    recurrences), oldest forgotten first."""

    def __init__(self, known: int = Limits.known) -> None:
        self.limit = known
        self.active: dict[str, Refusal] = {}  # event name -> refusal, last round
        self.known: dict[str, str] = {}  # event name -> object uid, seen in this process

    def round(
        self,
        refusals: Iterable[Refusal],
        generation: Callable[[ObjectRef], int | None],
        now: float,
    ) -> tuple[list[Observation], list[str]]:
        """The observations of this round's ``refusals`` and the Events whose queued
        observations are withdrawn (refusals gone; Normal ones of objects refused
        again). ``generation`` gives an object's generation now, or None when it is gone
        (or is another object of the same name)."""
        current: dict[str, Refusal] = {}
        for r in refusals:
            current.setdefault(r.event, r)
        out: list[Observation] = []
        for name, r in current.items():
            before = self.active.get(name)
            if before is None:
                out.append(Observation(r, name, now, name in self.known))
            elif r.generation > before.generation:
                out.append(Observation(r, name, now, False))
        withdrawn = [name for name in self.active if name not in current]
        refused_now = {r.object for r in current.values()}
        refused_before = {r.object for r in self.active.values()}
        for ref in refused_now - refused_before:  # a Resolved still queued is stale
            withdrawn.append(event_name(ref, NORMAL, RESOLVED, RESOLVED_MESSAGE))
        for ref in sorted(refused_before - refused_now):
            found = generation(ref)
            if found is None:  # gone: so are its Events' use
                self.known = {k: v for k, v in self.known.items() if v != ref.uid}
                continue
            ok = resolved(ref, found)
            out.append(Observation(ok, ok.event, now, ok.event in self.known))
            self._know(ok.event, ref.uid)
        for name, r in current.items():
            self._know(name, r.object.uid)
        self.active = current
        return out, withdrawn

    def _know(self, name: str, uid: str) -> None:
        self.known.pop(name, None)  # to the end: the newest
        self.known[name] = uid
        while len(self.known) > self.limit:
            del self.known[next(iter(self.known))]


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; :meth:`take` one."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.clock = clock
        self.tokens = float(self.burst)
        self.at = clock()

    def take(self) -> float:
        """0 when a token was taken; else the seconds until one will be there."""
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


# --- the recorder -----------------------------------------------------------------------


class _Stopping(Exception):
    """The recorder stops while it waits for a token."""


class _Waiting(NamedTuple):
    obs: Observation
    at: float  # monotonic: not before
    backoff: Backoff


class EventRecorder:
    """The Events of every source on one core (see the module doc).

    ``instance`` (``reportingInstance``: the pod's name) and ``host`` (``source.host``:
    the node's, may be empty) say who writes; they and ``limits`` may be changed until
    :meth:`start`. Counters: ``created``, ``counted`` (patches that bumped a count),
    ``adopted`` (observations another pod, or this one before, had counted),
    ``requests``, ``failures``, ``dropped``.
    """

    name = "kube-events"

    def __init__(
        self, core: KubeCore, *, instance: str, host: str = "", limits: Limits | None = None
    ) -> None:
        self.core = core
        self.instance = instance[:INSTANCE_MAX]
        self.host = host
        self.limits = limits or Limits()
        self.created = 0
        self.counted = 0
        self.adopted = 0
        self.requests = 0
        self.failures = 0
        self.dropped = 0
        self._cond = threading.Condition()
        self._ready: dict[str, Observation] = {}  # oldest first
        self._later: dict[str, _Waiting] = {}  # failed, waiting for their backoff
        self._writing = ""  # the Event being written, and whether it was withdrawn since
        self._withdrawn = False
        self._states: dict[str, EventState] = {}  # the recorder thread's alone
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._api: k8s.ApiClient | None = None
        self._timing = Timing()
        self._bucket = TokenBucket(self.limits.rate, self.limits.burst)
        self._logged = ""  # the kind of the last failure logged at WARNING

    # --- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (with the core's reflectors); idempotent."""
        with self._cond:
            if self._thread is not None or self._stopping:
                return
            configuration = copy.deepcopy(self.core.configuration)
            configuration.retries = 0
            self._api = k8s.ApiClient(configuration)
            timing = self.core.timing or Timing()
            self._timing = dataclasses.replace(
                timing, request_timeout=min(timing.request_timeout, REQUEST_TIMEOUT)
            )
            self._bucket = TokenBucket(self.limits.rate, self.limits.burst)
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        log.debug("kubernetes: events: recording as %s", self.instance)

    def stop(self, timeout: float = 2.0) -> bool:
        """Drop what waits and end the thread (blocking, about ``timeout``: a write in
        flight ends within :data:`REQUEST_TIMEOUT`); True when it ended. Idempotent."""
        with self._cond:
            self._stopping = True
            self._ready.clear()
            self._later.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        ended = thread is None or not thread.is_alive()
        if ended and self._api is not None:
            self._api.close()
            self._api = None
        return ended

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- what the sources call --------------------------------------------------------

    def submit(self, observations: Sequence[Observation], withdrawn: Iterable[str] = ()) -> None:
        """Queue ``observations`` (the newest of an Event replaces one still waiting)
        and withdraw the waiting ones of ``withdrawn``. Never waits (a lock)."""
        dropped = 0
        with self._cond:
            if self._stopping:
                return
            for name in withdrawn:
                self._ready.pop(name, None)
                self._later.pop(name, None)
                if name == self._writing:
                    self._withdrawn = True
            for obs in observations:
                self._later.pop(obs.name, None)
                if obs.name in self._ready or len(self._ready) < self.limits.pending:
                    self._ready[obs.name] = obs
                    if obs.name == self._writing:
                        self._withdrawn = True  # this one is newer
                else:
                    dropped += 1
            self.dropped += dropped
            if observations:
                self._cond.notify_all()
        if dropped:
            log.warning(
                "kubernetes: events: %d waiting already; %d observations dropped",
                self.limits.pending,
                dropped,
            )

    def waiting(self) -> int:
        """Observations not written yet (those retrying included)."""
        with self._cond:
            return len(self._ready) + len(self._later)

    # --- the writer thread ------------------------------------------------------------

    def _run(self) -> None:
        pause = Backoff(*BACKOFF)
        run = 0  # failures in a row
        resume = 0.0  # monotonic: the pause after a run of failures ends
        while True:
            with self._cond:
                obs = self._next(resume)
                if obs is None:
                    return
                self._writing, self._withdrawn = obs.name, False
            error: KubernetesError | None = None
            try:
                error = self._write(obs)
            except _Stopping:
                return
            except Exception:  # a bug: this observation is lost, the thread goes on
                log.exception("kubernetes: events: writing %s failed", obs.name)
            with self._cond:
                self._writing = ""
                if error is not None and not self._withdrawn and not self._stopping:
                    self._retry(obs)
            if error is None:
                run = 0
                pause.reset()
                if self._logged:
                    log.info("kubernetes: events: written again")
                    self._logged = ""
                continue
            self.failures += 1
            run += 1
            self._log_failure(error)
            if run >= FAILURE_RUN:
                delay = pause.next()
                resume = time.monotonic() + delay
                run = 0
                log.debug(
                    "kubernetes: events: %d failures in a row; pausing %.1f s (%d waiting)",
                    FAILURE_RUN,
                    delay,
                    self.waiting(),
                )

    def _log_failure(self, error: KubernetesError) -> None:
        """At WARNING when its kind (the HTTP status and reason; no answer) is new since
        the last success, at DEBUG after: one missing grant is one line, not one per
        object."""
        kind = f"{error.code} {error.reason}" if isinstance(error, ApiStatusError) else "none"
        if kind == self._logged:
            log.debug("kubernetes: events: %s", error)
            return
        self._logged = kind
        hint = ""
        if isinstance(error, ApiStatusError) and error.code == 403:
            hint = " (edge's ServiceAccount needs create and patch on events: k8s/rbac.yaml)"
        log.warning("kubernetes: events: %s; retrying with backoff%s", error, hint)

    def _next(self, resume: float) -> Observation | None:
        """Under the lock: the next observation to write (the oldest ready one, else a
        retry whose time has come), waiting for one; None when stopping."""
        while not self._stopping:
            now = time.monotonic()
            if now >= resume:
                for name, waiting in list(self._later.items()):
                    if waiting.at <= now:
                        del self._later[name]
                        self._ready.setdefault(name, waiting.obs)
                if self._ready:
                    name = next(iter(self._ready))
                    return self._ready.pop(name)
            due = [w.at for w in self._later.values()]
            if now < resume:
                due.append(resume)
            self._cond.wait(max(0.01, min(due) - now) if due else None)
        return None

    def _retry(self, obs: Observation) -> None:
        """Under the lock: ``obs`` failed; again after its own backoff, unless a newer
        observation of its Event came meanwhile."""
        if obs.name in self._ready:
            return
        waiting = self._later.get(obs.name)
        backoff = waiting.backoff if waiting is not None else Backoff(*BACKOFF)
        self._later[obs.name] = _Waiting(obs, time.monotonic() + backoff.next(), backoff)

    def _wait_token(self) -> None:
        with self._cond:
            while True:
                if self._stopping:
                    raise _Stopping
                wait = self._bucket.take()
                if wait <= 0:
                    return
                self._cond.wait(wait)

    def _call(self, what: str, method: str, path: str, body: Any) -> EventState:
        """One request within the rate; the Event it answers with."""
        self._wait_token()
        api = self._api
        if api is None:
            raise _Stopping
        self.requests += 1
        content_type = MERGE_PATCH if method == "PATCH" else "application/json"
        answer = request(api, self._timing, what, method, path, body, content_type)
        try:
            return _STATE.decode(answer)
        except msgspec.MsgspecError as e:
            raise KubernetesError(f"{what}: the answer is not an Event: {e}") from e

    def _write(self, obs: Observation) -> KubernetesError | None:
        """Create, count or adopt ``obs``'s Event; what failed (None if nothing)."""
        ref = obs.refusal.object
        namespace = ref.event_namespace
        what = f"Event {namespace}/{obs.name} ({obs.refusal.reason} on {ref.label})"
        collection = EVENTS.path(namespace)
        path = f"{collection}/{quote(obs.name, safe='')}"
        state = self._states.get(obs.name)
        try:
            for _ in range(4):  # a create that collides, patches that conflict: bounded
                if state is None:
                    try:
                        state = self._call(what, "PATCH", path, {})  # a read: see the doc
                    except ApiStatusError as e:
                        if e.code != 404:
                            raise
                        try:
                            made = self._call(
                                what, "POST", collection, create_body(obs, self.instance, self.host)
                            )
                        except ApiStatusError as e2:
                            if e2.code == 409:  # another pod made it meanwhile: read it
                                continue
                            raise
                        self.created += 1
                        self._remember(obs.name, made)
                        log.debug("kubernetes: events: %s: created", what)
                        return None
                if not counts(obs, state, self.instance, self.limits.window):
                    self.adopted += 1
                    self._remember(obs.name, state)
                    log.debug("kubernetes: events: %s: counted already", what)
                    return None
                try:
                    state = self._call(
                        what, "PATCH", path, bump_patch(state, obs, self.instance, self.host)
                    )
                except ApiStatusError as e:
                    if e.code not in (404, 409):  # 409: written since; 404: expired (TTL)
                        raise
                    self._states.pop(obs.name, None)
                    state = None
                    continue
                self.counted += 1
                self._remember(obs.name, state)
                log.debug("kubernetes: events: %s: counted: %d", what, state.count)
                return None
            return KubernetesError(f"{what}: written by others at every try")
        except KubernetesError as e:
            return e

    def _remember(self, name: str, state: EventState) -> None:
        self._states.pop(name, None)
        self._states[name] = state
        while len(self._states) > self.limits.known:
            del self._states[next(iter(self._states))]


def refusals_of(
    problems: Iterable[Any],
    subject: Callable[[Any], tuple[str, tuple[str, str], str, str] | None],
    snapshot: Mapping[str, Mapping[tuple[str, str], Any]],
    api_versions: Mapping[str, str],
) -> list[Refusal]:
    """The Warning refusals of a source's ``problems``: ``subject`` says which object a
    problem is about and why (kind, key, reason, message), or None; the object's uid and
    generation come from ``snapshot``. A problem whose object is not there (or has no
    uid, or a kind not in ``api_versions``) has no Event."""
    out: list[Refusal] = []
    for problem in problems:
        found = subject(problem)
        if found is None:
            continue
        kind, key, reason, message = found
        api_version = api_versions.get(kind)
        obj = snapshot.get(kind, {}).get(key)
        if api_version is None or obj is None or not obj.metadata.uid:
            continue
        ref = ObjectRef(api_version, kind, key[0], key[1], obj.metadata.uid)
        out.append(Refusal(ref, obj.metadata.generation, WARNING, reason, message))
    return out


def generation_in(
    snapshot: Mapping[str, Mapping[tuple[str, str], Any]],
) -> Callable[[ObjectRef], int | None]:
    """For :meth:`Tracker.round`: an object's generation in ``snapshot``, None when it
    is not there or another object (another uid) has its name."""

    def generation(ref: ObjectRef) -> int | None:
        obj = snapshot.get(ref.kind, {}).get((ref.namespace, ref.name))
        if obj is None or obj.metadata.uid != ref.uid:
            return None
        return int(obj.metadata.generation)

    return generation
