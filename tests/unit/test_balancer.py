import math
from collections import Counter

import pytest

from edge.balancer import HighestRandomWeight, SmoothWeightedRoundRobin, fnv1a_64, mix64


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


# -- highestRandomWeight ------------------------------------------------------------


def test_fnv1a_64_is_the_standard_hash():
    assert fnv1a_64(b"") == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_mix64_is_splitmix64s_finalizer():
    # splitmix64's first output for seed 0 is mix64 of its first state, the golden gamma.
    assert mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF


def test_hrw_scores_are_traefiks_formula_over_the_mixed_hash():
    h = mix64(fnv1a_64(b"10.0.0.1" + b"blue")) / 2.0**64
    assert HighestRandomWeight.score(b"10.0.0.1", b"blue", 3) == 3 / -math.log(h)


@pytest.mark.parametrize("names", [("appv1", "appv2"), ("a", "b"), ("blue", "green")])
def test_hrw_same_key_same_member_and_weights_share_keys(names):
    # Names that differ in their last byte only took every key for the heavier member
    # under FNV-1a alone (Traefik's hash).
    light, heavy = names
    hrw = HighestRandomWeight([(light, light, 1), (heavy, heavy, 3), ("zero", "zero", 0)])
    keys = [f"10.{i // 256}.{i % 256}.7" for i in range(4000)]
    first = [hrw.pick(k) for k in keys]
    assert first == [hrw.pick(k) for k in keys]  # again, remembered or not
    share = first.count(heavy) / len(first)
    assert 0.70 < share < 0.80, share  # 3/4 of the keys
    assert "zero" not in first
    assert len(hrw) == 2


def test_hrw_removing_a_member_moves_only_its_keys():
    three = HighestRandomWeight([(m, m, 1) for m in "abc"])
    two = HighestRandomWeight([(m, m, 1) for m in "ab"])
    for i in range(500):
        key = f"192.168.1.{i}"
        before = three.pick(key)
        if before != "c":
            assert two.pick(key) == before
        assert three.ranked(key)[1:] == tuple(m for m in three.ranked(key) if m != before)


def test_hrw_without_members_picks_none():
    assert HighestRandomWeight([("a", "a", 0)]).pick("k") is None
