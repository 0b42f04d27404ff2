"""A non-private gossip run stops on the model's change (``tol``); a private run's rounds stay those its budget
priced."""

import numpy as np
import pytest

from dpadmm import ConsensusLogisticRegression
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.exceptions import InvalidParameterError


def _data(n=600, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.where(X @ np.array([1.5, -1.0, 0.5, 0.0]) + 0.5 * rng.standard_normal(n) > 0, 1, 0)
    return X, y


def _fit(**kw):
    X, y = _data()
    return ConsensusLogisticRegression(protocol="gossip", n_nodes=4, topology="complete", random_state=0,
                                       **kw).fit(X, y)


def test_a_non_private_run_stops_once_the_broadcasts_settle_with_the_model_of_that_many_rounds():
    full = _fit(rounds=400)
    tol = 1e-3
    stopped = _fit(rounds=400, tol=tol)
    assert stopped.rounds_ < full.rounds_ == 400
    # the stopped run is the first rounds of the full one: its model is the full run's after that many rounds
    same = _fit(rounds=stopped.rounds_)
    np.testing.assert_array_equal(stopped.coefs_, same.coefs_)
    # it stopped at the first round that moved every broadcast by at most tol (the full run's history says so)
    change = np.asarray(full.history_["change"][14:], dtype=float)  # after the 14 range rounds
    assert np.flatnonzero(change <= tol)[0] + 1 == stopped.rounds_
    # and the model it hands over is near the full run's: the loss of a settled run
    X, y = _data()
    assert abs(stopped.score(X, y) - full.score(X, y)) <= 0.01


def test_tol_zero_runs_every_round():
    assert _fit(rounds=30).rounds_ == 30


def test_a_private_run_refuses_tol_and_the_estimator_keeps_its_rounds():
    with pytest.raises(InvalidParameterError, match="private run's rounds are fixed"):
        GossipParams(epsilon=1.0, tol=1e-3)
    X, y = _data()
    m = ConsensusLogisticRegression(epsilon=1.0, n_nodes=4, rounds=20, tol=1e-1, random_state=0).fit(X, y)
    assert m.rounds_ == 20
