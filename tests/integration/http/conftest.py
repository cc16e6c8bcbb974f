"""Fixtures of the HTTP integration tests."""

from __future__ import annotations

import pytest

from tests.integration.http.servers import H11Backend


@pytest.fixture
def backend():
    b = H11Backend(after_body=True)
    yield b
    b.stop()
