"""Reading Prometheus' text format back in the observability tests: a scrape as a dict."""

from __future__ import annotations

import re
import subprocess

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of ``text``: (name, frozenset of (label, value)) -> value."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m is not None, f"not a sample line: {line!r}"
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["curl", "-sS", "--max-time", "10", *args], capture_output=True, timeout=20, check=True
    )


def scrape(port: int) -> tuple[dict, str]:
    """(samples, content type) of ``/metrics`` on ``port``, read with curl."""
    out = curl("-w", "\n%{content_type}", f"http://127.0.0.1:{port}/metrics").stdout.decode()
    text, _, content_type = out.rpartition("\n")
    return parse(text), content_type
