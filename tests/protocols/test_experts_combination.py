"""Issue 38, item 5: the label party's combination uses another party's expert when its columns help, and keeps its
own model otherwise — chosen by K-fold cross-validation on its own held-out rows at every size (no size below which
the choice is skipped)."""

from __future__ import annotations

import math

import numpy as np

from dpadmm import VerticalExpertsClassifier
from dpadmm.algorithms.experts import calibrate as xc
from dpadmm.algorithms.experts.alone import label_party_alone_proba


def _table(n, rng, own_coef, other_coef):
    """A label party with one column, party 2 with three; logit = own_coef·x0 + other_coef·Σ x_j (standard
    normal columns, raw units: party 2's scaled by 50 and shifted by 1,000 as a file would hold them)."""
    a = rng.standard_normal((n, 1))
    b = rng.standard_normal((n, 3))
    p = 1.0 / (1.0 + np.exp(-(own_coef * a[:, 0] + other_coef * b.sum(axis=1))))
    y = np.where(rng.random(n) < p, 1, 0)
    return [a, 1000.0 + 50.0 * b], y


def _row_losses(p, y):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return -np.where(y > 0, np.log(p), np.log1p(-p))


def test_the_combination_weights_the_other_expert_when_its_columns_carry_the_signal():
    rng = np.random.default_rng(0)
    train, y = _table(2000, rng, 0.3, 1.0)
    test, yt = _table(4000, rng, 0.3, 1.0)
    m = VerticalExpertsClassifier(epsilon=200.0, random_state=1).fit(train, y)  # ≈ no noise
    assert m.calibration_.kind == "stacked" and m.calibration_.heldout_rows == 400
    assert m.calibration_.weights[2] > 0.5  # party 2's expert gets a weight of its own
    d = _row_losses(m.predict_proba(test)[:, 1], yt) - _row_losses(label_party_alone_proba(train[0], y, test[0],
                                                                                          1e-3), yt)
    # better than the label party alone by more than 3 standard errors of the paired per-row difference
    assert d.mean() < -3.0 * d.std(ddof=1) / math.sqrt(len(d)), d.mean()


def test_pure_noise_columns_never_make_the_final_model_worse_than_the_label_party_alone():
    kept = 0
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        train, y = _table(600, rng, 1.0, 0.0)
        test, yt = _table(4000, rng, 1.0, 0.0)
        m = VerticalExpertsClassifier(epsilon=1.0, random_state=seed).fit(train, y)
        d = _row_losses(m.predict_proba(test)[:, 1], yt) - _row_losses(label_party_alone_proba(train[0], y, test[0],
                                                                                              1e-3), yt)
        # kept: identical to the label party alone; stacked: within 2 standard errors of the paired difference
        assert d.mean() <= 2.0 * d.std(ddof=1) / math.sqrt(len(d)) + 1e-12, (seed, d.mean())
        kept += m.calibration_.kind == "own model"
    assert kept >= 4  # a two-standard-error rule keeps the own model on most draws when the other party is noise


def test_the_safety_net_works_at_100_rows():
    rng = np.random.default_rng(7)
    train, y = _table(100, rng, 1.0, 0.0)
    m = VerticalExpertsClassifier(epsilon=1.0, random_state=0).fit(train, y)
    assert m.calibration_ is not None and m.calibration_.heldout_rows == 20  # chosen, not skipped
    assert m.calibration_.kind == "own model"
    assert np.allclose(m.decision_function(train), m._own_logit(train[0]))  # the label party alone, exactly
    # too few rows for the folds (8 held out < 2·FOLDS): its own model, without a comparison
    small, ys = _table(40, rng, 1.0, 0.0)
    m = VerticalExpertsClassifier(epsilon=1.0, random_state=0).fit(small, ys)
    assert m.calibration_.kind == "own model" and m.calibration_.heldout_rows == 0


def test_the_stack_is_the_own_model_when_the_expert_column_is_noise_and_rows_are_few():
    rng = np.random.default_rng(3)
    n = 60
    own = rng.standard_normal(n)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-own)), 1.0, -1.0)
    c = xc.choose(own, rng.standard_normal(n), y, np.random.default_rng(0), shrink=True)
    assert c.kind == "own model" and c.weights == (0.0, 1.0, 0.0)
