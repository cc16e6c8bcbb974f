"""Review of the Kubernetes provider (issue 10): one test per defect found, each failing on
the commit before its fix, against the API server emulator and the real official client.

What was tried and held is listed in the issue's closing note, not here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from edge.providers.kubernetes.client import (
    INGRESSES,
    KubeClient,
    Timing,
    WatchSpec,
    load_api_config,
)
from tests.kube import models as m
from tests.kube import objects as o
from tests.kube.emulator import Emulator

TOKEN = "t0ken"
ING_PATH = "/apis/networking.k8s.io/v1/ingresses"


def wait_until(pred: Callable[[], object], timeout: float = 5.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


@pytest.fixture
def emu():
    with Emulator(token=TOKEN, bookmark_interval=None) as e:
        yield e


@pytest.fixture
def make_client(emu):
    clients: list[KubeClient] = []

    def make(watches, *, timing: Timing) -> KubeClient:
        c = KubeClient(load_api_config(endpoint=emu.url, token=TOKEN), watches, timing=timing)
        clients.append(c)
        c.start()
        return c

    yield make
    for c in clients:
        c.stop()


# --- watches that end at once --------------------------------------------------------------


def test_watches_that_end_at_once_are_retried_with_backoff(emu, make_client):
    """A proxy or an API server that ends every watch cleanly at once (no event, no
    bookmark) must not make the reflector spin: before, a clean end reset the backoff and
    watched again at once, hundreds of requests a second and a core busy; now a watch
    shorter than a second that delivered nothing backs off as a failure does (client-go's
    "very short watch"), and a change still arrives through the next LIST-less watch."""
    emu.watch_limit = 0.0
    c = make_client(
        [WatchSpec(INGRESSES, m.Named)], timing=Timing(backoff_base=0.2, backoff_cap=1.0)
    )
    assert c.wait_synced(5)
    t0 = time.monotonic()
    cpu0 = time.process_time()
    time.sleep(2.0)
    watches = emu.count(ING_PATH, since=t0, watch=True)
    assert 1 <= watches <= 8, watches  # 0.1-0.2, 0.2-0.4, 0.4-0.8, 0.5-1 s apart
    assert time.process_time() - cpu0 < 1.0
    emu.create(o.ingress("late"))
    assert wait_until(lambda: c.get("Ingress", "default", "late") is not None, timeout=5)
    assert emu.count(ING_PATH, since=t0, watch=False) == 0  # resumed by watch, no re-LIST
