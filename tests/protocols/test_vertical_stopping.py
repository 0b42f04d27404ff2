"""Vertical ADMM stops when done (issue 37 item 2): the coordinator's residual test on released values, every
round, monitored or not; randomized-response label fits stop too and their ε does not depend on the rounds."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm import VerticalLogisticRegression


def _data(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 8))
    y = (X @ rng.normal(size=8) + 0.5 * rng.normal(size=n) > 0).astype(int)
    return [X[:, :4], X[:, 4:]], y


def test_a_non_private_fit_stops_at_the_same_round_monitored_or_not():
    B, y = _data()
    watched = VerticalLogisticRegression(max_iter=100, monitor=True).fit(B, y)
    blind = VerticalLogisticRegression(max_iter=100, monitor=False).fit(B, y)
    assert watched.converged_ and watched.n_iter_ < 100
    assert blind.n_iter_ == watched.n_iter_ and blind.converged_
    np.testing.assert_allclose(blind.coef_, watched.coef_, rtol=1e-12)


def test_tol_zero_or_none_runs_every_round():
    B, y = _data()
    for tol in (0, None):
        m = VerticalLogisticRegression(max_iter=30, tol=tol, monitor=False).fit(B, y)
        assert m.n_iter_ == 30 and not m.converged_


def test_a_tighter_tol_runs_longer_and_lands_closer_to_the_optimum():
    B, y = _data()
    opt = VerticalLogisticRegression(max_iter=400, tol=1e-9).fit(B, y)
    loose = VerticalLogisticRegression(max_iter=400, tol=1e-2).fit(B, y)
    tight = VerticalLogisticRegression(max_iter=400, tol=1e-4).fit(B, y)
    assert loose.n_iter_ < tight.n_iter_ < opt.n_iter_
    assert (np.linalg.norm(tight.coef_ - opt.coef_) < np.linalg.norm(loose.coef_ - opt.coef_))


def test_a_randomized_response_fit_stops_early_and_its_epsilon_is_the_release():
    B, y = _data()
    stopped = VerticalLogisticRegression(label_epsilon=1.0, random_state=0).fit(B, y)
    full = VerticalLogisticRegression(label_epsilon=1.0, tol=0, random_state=0).fit(B, y)
    assert stopped.converged_ and stopped.n_iter_ < full.n_iter_ == 100
    # the one randomized-response release is the whole label cost, whatever the number of rounds
    assert stopped.privacy_.label["epsilon"] == pytest.approx(1.0)
    assert full.privacy_.label["epsilon"] == pytest.approx(1.0)


def test_the_gaussian_label_protocol_runs_its_declared_rounds():
    B, y = _data()
    m = VerticalLogisticRegression(label_epsilon=1.0, label_mechanism="gaussian", max_iter=6, tol=0.5,
                                   random_state=0).fit(B, y)
    assert m.n_iter_ == 6
