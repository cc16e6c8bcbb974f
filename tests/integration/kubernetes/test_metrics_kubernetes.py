"""The Kubernetes core's counters on ``/metrics``: watches begun again (by why) and
objects left out, read from real reflector threads talking to the API server emulator."""

from __future__ import annotations

import time
from types import SimpleNamespace

from edge.config.static import Prometheus
from edge.entrypoints.metrics import Registry, watch_kubernetes
from edge.providers.kubernetes.client import (
    ENDPOINT_SLICES,
    INGRESSES,
    KubeCore,
    Timing,
    WatchSpec,
    load_api_config,
)
from tests.kube import models as m
from tests.kube import objects as o
from tests.kube.emulator import Emulator

TOKEN = "t0ken"
RESTARTS = "edge_kubernetes_watch_restarts_total"
SKIPPED = "edge_kubernetes_objects_skipped_total"


def wait_for(read, want, timeout: float = 15.0):
    """``read()`` once it satisfies ``want`` (the last value when ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if want(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_watch_restarts_by_reason_and_skipped_objects():
    with Emulator(token=TOKEN, bookmark_interval=None) as emu:
        broken = o.endpoint_slice("broken")
        del broken["addressType"]  # required by the decoded type: left out
        emu.create(broken)
        emu.create(o.endpoint_slice("good"))
        emu.create(o.ingress("a"))
        core = KubeCore(
            load_api_config(endpoint=emu.url, token=TOKEN),
            timing=Timing(backoff_base=0.2, backoff_cap=1.0),
        )
        sub = core.subscribe(
            "test",
            [WatchSpec(ENDPOINT_SLICES, m.EndpointSlice), WatchSpec(INGRESSES, m.Ingress)],
        )
        reg = Registry(Prometheus())
        watch_kubernetes(reg, [SimpleNamespace(core=core), SimpleNamespace(core=core), object()])
        sub.open()
        try:
            assert wait_for(lambda: sub.synced, bool)
            assert emu.wait_watches(2)

            def restarts(kind: str, reason: str) -> int:
                return reg.collect().get(RESTARTS, kind=kind, reason=reason) or 0

            assert reg.collect().get(SKIPPED, kind="EndpointSlice") == 1
            assert reg.collect().get(SKIPPED, kind="Ingress") is None
            # 410 Gone: the history moved on while the watch heard nothing.
            assert emu.stall_watches() == 2
            emu.create(o.ingress("b"))
            emu.compact()
            emu.drop_watches()
            assert wait_for(lambda: restarts("Ingress", "expired"), bool) == 1
            assert wait_for(lambda: restarts("EndpointSlice", "expired"), bool) == 1
            # The API server failing: each failed try is one restart after an error.
            emu.fail_for(1.0)
            emu.drop_watches()
            assert wait_for(lambda: restarts("Ingress", "error"), lambda n: n >= 2) >= 2
            # Watches the API server ends cleanly after their time.
            emu.watch_limit = 1.0
            assert emu.wait_watches(2, timeout=10)
            emu.drop_watches()  # the open ones go; the next ones last 1 s and end
            assert wait_for(lambda: restarts("Ingress", "ended"), lambda n: n >= 2) >= 2
            # The LIST after the 410 read the broken one again: left out again. One
            # core, however many sources name it, is counted once.
            assert reg.collect().get(SKIPPED, kind="EndpointSlice") == 2
        finally:
            sub.close()
            core.stop()
