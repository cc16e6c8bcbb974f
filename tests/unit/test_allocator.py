"""edge.allocator: with its thresholds, a process that allocates and frees large
buffers in turn (a proxy streaming a body) stops faulting their pages in again each
time. Each case runs in a fresh interpreter, so the allocator's state is its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from edge import allocator

pytestmark = pytest.mark.skipif(
    not allocator.is_glibc(), reason="glibc's mallopt thresholds: this C library is not glibc"
)

# Minor page faults per round of a read-sized buffer and a copy of it (a read and a
# join), after a warm-up: what each round costs the kernel.
PROBE = r"""
import sys
from edge import allocator

def minflt():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])

if sys.argv[1] == "tuned":
    print("set", ",".join(allocator.tune()))
size = int(sys.argv[2])
for _ in range(5):
    b = b"x" * size
    del b
before = minflt()
for _ in range(200):
    b = b"x" * size
    c = b + b"y"
    del b, c
print("faults", (minflt() - before) / 200)
"""


def probe(mode: str, size: int, **env: str) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(size)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=True,
    ).stdout.split("\n")
    settings = next((line[4:] for line in out if line.startswith("set ")), "")
    faults = float(next(line for line in out if line.startswith("faults "))[7:])
    return settings, faults


@pytest.mark.parametrize("size", [256 * 1024, 1024 * 1024])
def test_large_buffers_stop_faulting(size):
    _, untuned = probe("plain", size)
    settings, tuned = probe("tuned", size)
    assert settings == "MALLOC_MMAP_THRESHOLD_,MALLOC_TRIM_THRESHOLD_"
    pages = size // 4096
    assert untuned > pages / 4, (
        f"glibc's defaults kept the buffers here already ({untuned} faults a round)"
    )
    assert tuned < 8, f"{tuned} faults a round with the thresholds set"


def test_the_users_own_settings_are_kept():
    settings, _ = probe("tuned", 256 * 1024, MALLOC_TRIM_THRESHOLD_="131072")
    assert settings == "MALLOC_MMAP_THRESHOLD_"
