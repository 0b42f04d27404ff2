"""The seeded simulation's per-round generator (:mod:`dpadmm.runtime.seeding`) is numpy's
``default_rng(SeedSequence(seed, spawn_key=(index, round)))`` draw for draw, and the accountant's remembered
compositions are the accountant's answers."""

import numpy as np
import pytest

from dpadmm.backends.base import party_rng
from dpadmm.privacy.accountants import gaussian as ga
from dpadmm.runtime.rounds import SeededGenerator
from dpadmm.runtime.seeding import seeded_generator

SEEDS = [0, 1, 7, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1, 2**64, 2**127 + 5, 2**128 - 1, 2**128, 2**200 + 3,
         np.int64(5), np.uint64(2**64 - 1)] + [int(s) for s in np.random.default_rng(1).integers(0, 2**63, 12)]
INDICES = [0, 1, 5, 6, 2**32 - 1, 2**32, 2**40]
ROUNDS = [0, 1, 13, 255, 256, 1000, 2**32 - 1, 2**32, 2**33 + 7]


def _numpy(seed, index, round_):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index, round_)))


@pytest.mark.parametrize("seed", SEEDS, ids=str)
def test_same_stream_as_numpy_seed_sequence(seed):
    for index in INDICES:
        for round_ in ROUNDS:
            want = _numpy(seed, index, round_)
            got = seeded_generator(seed, index, round_)
            assert np.array_equal(got.standard_normal(7), want.standard_normal(7)), (seed, index, round_)
            assert np.array_equal(got.integers(0, 2**62, 3), want.integers(0, 2**62, 3)), (seed, index, round_)


def test_every_round_of_a_block_and_the_callers():
    for round_ in range(600):  # across blocks of the hashed rounds
        want = _numpy(123456789012345, 3, round_).standard_normal(3)
        assert np.array_equal(party_rng(123456789012345, 3, round_).standard_normal(3), want), round_
        assert np.array_equal(SeededGenerator(123456789012345, (3, round_)).standard_normal(3), want), round_


def test_outside_the_fast_path_numpy_decides():
    with pytest.raises(ValueError):  # numpy refuses a negative seed, and so does the fast path's fallback
        seeded_generator(-1, 0, 0)
    want = np.random.default_rng(np.random.SeedSequence(5, spawn_key=(1, 2, 3))).standard_normal(4)
    assert np.array_equal(SeededGenerator(5, (1, 2, 3)).standard_normal(4), want)


def test_a_remembered_composition_is_the_accountants_answer():
    nms = [1.5] * 40 + [2.5] * 3
    first = ga.gaussian_epsilon(nms, 1e-5)
    ga._composed_epsilon.cache_clear()
    fresh = ga.gaussian_epsilon(list(reversed(nms)), 1e-5)  # the order of the releases does not enter
    assert first == fresh and ga.gaussian_epsilon(nms, 1e-5) == fresh
    assert ga.gaussian_epsilon(nms, 1e-6) > fresh  # another δ is another question
    assert ga.gaussian_epsilon(nms, 1e-5, "rdp") >= fresh
