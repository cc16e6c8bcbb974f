"""Instructions per unit of work, counted by callgrind: the loadtest scripts' shared counter.

A script runs itself under valgrind's callgrind twice, at two unit counts, and
the difference of the totals divided by the difference of the counts is the
cost of one unit: start-up and warm-up cancel out, and the count is the same
from run to run where timings on a shared machine move by 5-10 %.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["per_unit"]


def per_unit(script: str, count_flag: str, flags: list[str], small: int, large: int) -> float:
    """Instructions per unit of ``script`` run as ``script count_flag N *flags``."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("--instructions needs valgrind")
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (small, large):
            out = Path(tmp) / f"callgrind.{n}"
            done = subprocess.run(
                [
                    valgrind,
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    script,
                    count_flag,
                    str(n),
                    *flags,
                ],
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONHASHSEED="0"),
            )
            if done.returncode != 0:
                raise SystemExit(f"callgrind run of {n} failed:\n{done.stderr[-3000:]}")
            m = re.search(r"^(?:totals|summary): (\d+)", out.read_text(), re.M)
            assert m, "no totals in the callgrind output"
            totals.append(int(m.group(1)))
    return (totals[1] - totals[0]) / (large - small)
