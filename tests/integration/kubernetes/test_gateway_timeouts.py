"""HTTPRoute ``timeouts`` through edge (GEP-1742): ``request`` and ``backendRequest``
bound a request to a backend slower than them with 504; ``0s`` is no bound. The
scenarios follow the upstream conformance suite's HTTPRouteRequestTimeout and
HTTPRouteBackendRequestTimeout (written anew here), against ``edge whoami``, whose
``?delay=`` holds its answer. Every wait is bounded.
"""

from __future__ import annotations

import time

from tests.harness import Whoami
from tests.integration.kubernetes import test_gateway_provider as TG
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_gateway_provider import (
    ACCEPTED,
    Ports,
    backends,
    gateway,
    gateway_class,
    http_route,
    path,
    route_conditions,
    to,
    who,
)

# The Gateway provider tests' fixtures: the emulator, an edge on given ports, the client.
emu, start_edge, api = TG.emu, TG.start_edge, TG.api


def rule(prefix: str, **timeouts: str) -> dict:
    return {"matches": [path(prefix)], "backendRefs": [to("v1")], "timeouts": timeouts}


def timed(port: int, target: str) -> tuple[str, float]:
    start = time.monotonic()
    answer = who(port, target, "timeouts.test")
    return answer, time.monotonic() - start


def test_request_and_backend_request_timeouts_answer_504(
    emu, start_edge, api, whoami: Whoami
) -> None:
    ports = Ports()
    emu.create(gateway_class())
    emu.create(gateway([{"name": "http", "port": ports.web, "protocol": "HTTP"}]))
    backends(emu, v1=whoami)
    emu.create(http_route("timeouts", [
        rule("/request-timeout", request="500ms"),
        rule("/disable-request-timeout", request="0s"),
        rule("/backend-request-timeout", request="5s", backendRequest="500ms"),
    ], ["timeouts.test"]))  # fmt: skip
    start_edge(ports)
    port = ports.web

    assert KP.until(lambda: who(port, "/request-timeout", "timeouts.test") == "w1")
    answer, took = timed(port, "/request-timeout?delay=2")
    assert answer == "504" and took < 1.8, (answer, took)
    answer, took = timed(port, "/backend-request-timeout?delay=2")
    assert answer == "504" and took < 1.8, (answer, took)
    assert timed(port, "/disable-request-timeout?delay=1")[0] == "w1"
    assert timed(port, "/backend-request-timeout?delay=0.1")[0] == "w1"
    assert KP.until(lambda: route_conditions(api, "timeouts") == ACCEPTED)
