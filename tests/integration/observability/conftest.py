"""Fixtures the tracing tests share: the OTLP/HTTP collector edge exports to, and
edge's span batches posted every 100 ms rather than every 5 s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.observability.otlp import Collector


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.stop()


@pytest.fixture
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Edge (a child of this process) posts spans every 100 ms, not every 5 s."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
