"""Cost of one EndpointSlice watch event: msgspec into a few fields vs the client's models.

Run: ``.venv/bin/python -m tests.kube.bench_decode [endpoints-per-slice]``. Prints
microseconds per event for

- ``msgspec small``: the envelope, then the object into ``tests.kube.models.EndpointSlice``
  (the fields edge needs), as the reflector decodes it;
- ``msgspec objects.py``: the same into edge's real model;
- ``reflector apply``: a whole event through an (unstarted) reflector: decode, cache
  update under its lock, the change callback (a no-op);
- ``client deserialize``: ``ApiClient.deserialize`` of the object into ``V1EndpointSlice``;
- ``client Watch``: ``kubernetes.watch.Watch.unmarshal_event`` on the line, which is what
  ``Watch().stream`` does per event (json.loads, json.dumps, deserialize).

Not a test: nothing here asserts speed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import msgspec
import orjson
from kubernetes import client, watch

from edge.providers.kubernetes import objects
from edge.providers.kubernetes.client import ENDPOINT_SLICES, KubeClient, WatchSpec
from tests.kube import models
from tests.kube import objects as o


def event_line(n: int) -> bytes:
    eps = o.endpoint_slice(
        "whoami-x7k2p",
        "default",
        service_name="whoami",
        addresses=[f"10.244.{i // 250}.{i % 250 + 1}" for i in range(n)],
    )
    meta = eps["metadata"]
    meta.update(
        {
            "resourceVersion": "123456",
            "uid": "6c0c6f3e-8d7a-4a4e-9d5e-0b1f1f9f2a11",
            "generation": 7,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "generateName": "whoami-",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": "whoami",
                    "uid": "0f7e4b4e-1d1c-4c4e-8b1a-7a7e6e5d4c3b",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "annotations": {
                "endpoints.kubernetes.io/last-change-trigger-time": "2024-05-01T10:00:00Z"
            },
        }
    )
    for i, ep in enumerate(eps["endpoints"]):
        ep["zone"] = "zone-a"
        ep["targetRef"]["uid"] = f"00000000-0000-0000-0000-{i:012d}"
        ep["hints"] = {"forZones": [{"name": "zone-a"}]}
    return orjson.dumps({"type": "MODIFIED", "object": eps})


class _Event(msgspec.Struct):
    type: str
    object: msgspec.Raw


def per_call_us(fn: Callable[[], object], seconds: float = 1.0) -> float:
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(100):
            fn()
        n += 100
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e6


def main(endpoints: int = 3) -> None:
    line = event_line(endpoints)
    envelope = msgspec.json.Decoder(_Event)
    small = msgspec.json.Decoder(models.EndpointSlice)
    real = msgspec.json.Decoder(objects.EndpointSlice)
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))
    obj_json = orjson.dumps(orjson.loads(line)["object"]).decode()
    w = watch.Watch()

    kube = KubeClient(
        api.configuration,
        [WatchSpec(ENDPOINT_SLICES, objects.EndpointSlice)],
        on_change=lambda change: None,
    )
    reflector = kube._reflectors[0]  # unstarted: fed by hand

    checks = [
        ("msgspec small", lambda: small.decode(envelope.decode(line).object)),
        ("msgspec objects.py", lambda: real.decode(envelope.decode(line).object)),
        ("reflector apply", lambda: reflector._events([line])),
        (
            "client deserialize",
            lambda: api.deserialize(obj_json, "V1EndpointSlice", "application/json"),
        ),
        ("client Watch", lambda: w.unmarshal_event(line.decode(), "V1EndpointSlice")),
    ]
    decoded = small.decode(envelope.decode(line).object)
    assert len(decoded.endpoints) == endpoints
    print(f"EndpointSlice event, {endpoints} endpoints, {len(line)} bytes")
    for name, fn in checks:
        print(f"  {name:20s} {per_call_us(fn):8.1f} us/event")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
