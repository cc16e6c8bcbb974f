from collections import Counter

import pytest

from edge.balancer import SmoothWeightedRoundRobin


def picks(members, n):
    b = SmoothWeightedRoundRobin(members)
    return [b.pick() for _ in range(n)]


def test_nginx_sequence_is_smooth():
    # The sequence nginx documents for weights 5, 1, 1.
    assert "".join(picks([("a", 5), ("b", 1), ("c", 1)], 7)) == "aabacaa"


@pytest.mark.parametrize(
    "weights",
    [[1], [1, 1], [3, 1], [5, 1, 1], [2, 3, 5], [10, 0, 1], [7, 7, 7, 1]],
)
def test_every_window_honours_weights(weights):
    members = [(f"s{i}", w) for i, w in enumerate(weights)]
    total = sum(weights)
    seq = picks(members, total * 20)
    for k in range(20):
        window = Counter(seq[k * total : (k + 1) * total])
        assert window == Counter({f"s{i}": w for i, w in enumerate(weights) if w})


def test_deterministic():
    members = [("a", 3), ("b", 2), ("c", 4)]
    assert picks(members, 50) == picks(members, 50)


def test_no_member_or_zero_weights():
    assert SmoothWeightedRoundRobin([]).pick() is None
    assert SmoothWeightedRoundRobin([("a", 0)]).pick() is None
    assert len(SmoothWeightedRoundRobin([("a", 0), ("b", 2)])) == 1


def test_no_burst_for_heavy_member():
    seq = picks([("a", 1), ("b", 1), ("c", 1), ("d", 3)], 600)
    # the heavy member never runs more than twice in a row
    run = longest = 0
    for x in seq:
        run = run + 1 if x == "d" else 0
        longest = max(longest, run)
    assert longest <= 2
