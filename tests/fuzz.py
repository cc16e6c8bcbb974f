"""How many examples a property test draws: a quick count by default, the full count
under ``EDGE_FUZZ=full``.

The unit tier (``scripts/check``) must stay under a minute, so its property tests
draw a fixed, smaller number of examples; each quick count was chosen so that it
still reaches the same branches of the code under test as the full count
(compared with branch coverage when it was set). CI's whole-suite run
(``.ci/run``) sets ``EDGE_FUZZ=full`` and draws the full counts.
"""

from __future__ import annotations

import os


def examples(*, full: int, quick: int) -> int:
    """``full`` under ``EDGE_FUZZ=full``, else ``quick``."""
    return full if os.environ.get("EDGE_FUZZ") == "full" else quick
