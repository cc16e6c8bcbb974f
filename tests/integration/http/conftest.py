"""Fixtures of the HTTP integration tests."""

from __future__ import annotations

import pytest

from tests.integration.http.servers import H11Backend


@pytest.fixture
def backend():
    b = H11Backend(after_body=True)
    yield b
    b.stop()


@pytest.fixture(scope="module")
def echo():
    """grpcio's server of the test service (``grpcpeers.Echo``), over h2c."""
    from tests.integration.http.grpcpeers import Echo  # grpcio only where it is used

    e = Echo()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def echo_tls(certs):
    """The same over TLS (h2 by ALPN), with good.test's certificate."""
    from tests.integration.http.grpcpeers import Echo

    crt, key = certs["files"]["good.test"]
    with open(crt, "rb") as c, open(key, "rb") as k:
        e = Echo(tls=(c.read(), k.read()))
    yield e
    e.stop()
