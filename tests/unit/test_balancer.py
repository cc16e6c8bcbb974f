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


# --- power of two choices ------------------------------------------------------------

import random  # noqa: E402

from edge.balancer import PowerOfTwoChoices  # noqa: E402


def test_p2c_with_equal_loads_spreads_picks_evenly_and_repeatably():
    members = ["a", "b", "c", "d"]
    first = PowerOfTwoChoices(members, random.Random(7))
    seq = [first.pick(lambda m: 0) for _ in range(4000)]
    again = PowerOfTwoChoices(members, random.Random(7))
    assert seq == [again.pick(lambda m: 0) for _ in range(4000)]
    counts = Counter(seq)
    # Each member is the first draw 1/4 of the time (ties keep the first draw):
    # 1,000 expected, a binomial sd of ~27, so bounds of 6 sd.
    for m in members:
        assert 840 <= counts[m] <= 1160, counts


def test_p2c_never_draws_one_member_twice_and_takes_the_less_loaded():
    load = {"busy": 5, "idle": 0}
    b = PowerOfTwoChoices(list(load), random.Random(1))
    assert {b.pick(load.__getitem__) for _ in range(200)} == {"idle"}


def test_p2c_a_loaded_member_gets_fewer_picks():
    """The simulation p2c is for: a slow server holds its requests longer, so its
    count in flight stays higher and it is picked less."""
    rng = random.Random(3)
    b = PowerOfTwoChoices(["slow", "fast1", "fast2"], rng)
    inflight = Counter()
    finishing: list[tuple[int, str]] = []
    picked = Counter()
    for tick in range(3000):
        while finishing and finishing[0][0] <= tick:
            inflight[finishing.pop(0)[1]] -= 1
        m = b.pick(inflight.__getitem__)
        picked[m] += 1
        inflight[m] += 1
        finishing.append((tick + (20 if m == "slow" else 2), m))
        finishing.sort()
    assert picked["slow"] < picked["fast1"] / 3, picked
    assert picked["slow"] < picked["fast2"] / 3, picked


def test_p2c_skips_members_down_and_ignores_weights():
    b = PowerOfTwoChoices(["a", "b", "c"], random.Random(5))
    picks = Counter(b.pick(lambda m: 0, lambda m: m != "b") for _ in range(300))
    assert set(picks) == {"a", "c"}
    assert b.pick(lambda m: 0, lambda m: m == "c") == "c"
    assert b.pick(lambda m: 0, lambda m: False) is None
    assert PowerOfTwoChoices([], random.Random()).pick(lambda m: 0) is None
    assert PowerOfTwoChoices(["x"]).single == "x"
