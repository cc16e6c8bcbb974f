"""A TraefikService ``mirroring`` end to end: emulator -> kubernetesCRD provider -> edge ->
real backends.

An IngressRoute names a TraefikService mirroring Service ``main`` to Service ``shadow``
(50 %, a sized-body limit); both are recording HTTP backends on 127.0.0.1. The client
gets ``main``'s answers, ``shadow`` exactly every other request, bodies byte for byte,
and none over ``maxBodySize``; an edit of the percent to 0 stops the copies within 2 s. Fixtures
and helpers are those of ``test_crd_provider.py`` and ``test_provider.py``.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator

import pytest

from tests.integration.http.servers import H11Backend
from tests.integration.kubernetes import test_provider as KP
from tests.integration.kubernetes.test_crd_provider import _crd, _fast, endpoints, service
from tests.integration.kubernetes.test_crd_provider import static_config as crd_static
from tests.kube.emulator import Emulator


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator(token=KP.TOKEN, bookmark_interval=1.0) as e:
        yield e


@pytest.fixture
def backends() -> Iterator[tuple[H11Backend, H11Backend]]:
    made = (H11Backend(after_body=True), H11Backend(after_body=True))
    yield made
    for b in made:
        b.stop()


def mirroring(percent: int) -> dict:
    return _crd(
        "TraefikService",
        "shadowed",
        {
            "mirroring": {
                "name": "main",
                "port": 80,
                "maxBodySize": 4096,
                "mirrors": [{"name": "shadow", "port": 80, "percent": percent}],
            }
        },
    )


def post(port: int, path: str, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"Host": "m.test"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def settle(backend: H11Backend, count: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(backend.requests) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # anything more it still had to read


def test_a_traefik_service_mirroring_copies_its_share_to_the_mirror(
    emu: Emulator, backends: tuple[H11Backend, H11Backend]
) -> None:
    main, shadow = backends
    for name, backend in (("main", main), ("shadow", shadow)):
        emu.create(service(name, 80))
        emu.create(endpoints(f"{name}-1", name, backend.port))
    emu.create(mirroring(50))
    emu.create(
        _crd(
            "IngressRoute",
            "m",
            {
                "entryPoints": ["web"],
                "routes": [
                    {
                        "match": "Host(`m.test`)",
                        "kind": "Rule",
                        "services": [{"name": "shadowed", "kind": "TraefikService"}],
                    }
                ],
            },
        )
    )
    edge = KP.InProcessEdge(crd_static(emu), tweak=_fast)
    edge.start()
    try:
        assert KP.until(lambda: edge.ready() == 200, 10.0), "edge never became ready"
        port = edge.port()
        assert KP.until(lambda: post(port, "/probe", b"")[0] == 200, 5.0)
        settle(shadow, 1)
        probes = len(main.requests)
        mirrored_probes = len(shadow.requests)

        bodies = [bytes([i]) * (100 * i + 1) for i in range(20)]  # up to 1,901 bytes
        for i, body in enumerate(bodies):
            assert post(port, f"/b{i}", body) == (200, b"POST /b%d %d" % (i, len(body)))
        big = b"x" * 5000  # over maxBodySize: served, not mirrored
        assert post(port, "/big", big) == (200, b"POST /big 5000")
        settle(shadow, mirrored_probes + 10)

        assert len(main.requests) == probes + 21
        copies = shadow.requests[mirrored_probes:]
        # Traefik's counter over every request the service saw (the probes included):
        # exactly every other one.
        seen = probes + len(bodies)
        expected = (seen + 1) // 2 - (probes + 1) // 2
        assert len(copies) == expected, [c.target for c in copies]
        sent = {f"/b{i}".encode(): body for i, body in enumerate(bodies)}
        # Each copy goes from its own task: wait for the bodies still on their way.
        assert KP.until(lambda: all(len(c.body) == len(sent[c.target]) for c in copies), 10.0)
        for copy in copies:
            assert copy.body == sent[copy.target]
            assert copy.header(b"host") == [b"m.test"]
        assert all(c.target != b"/big" for c in copies)

        # An edit of the TraefikService is followed: 0 % mirrors nothing.
        emu.update(mirroring(0))

        def quiet() -> bool:
            start = len(shadow.requests)
            post(port, "/after", b"z")
            time.sleep(0.1)
            return len(shadow.requests) == start

        assert KP.until(lambda: quiet() and quiet(), 2.0)
    finally:
        KP.stop_all([edge])
