"""The label party's final model after an encrypted fit (dpadmm.algorithms.encrypted.combine): post-processing of
the same fit (the releases, the weights and the privacy figures do not depend on ``combine``), its own model stacked
with the parties' scores or kept alone by the held-out comparison, the joint model below the held-out floor. On the
plaintext HE layer (the same arithmetic as sf-heu: tests/protocols/test_encrypted_audit.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from dpadmm.algorithms.encrypted import combine as ec
from dpadmm.algorithms.encrypted import he, label
from dpadmm.algorithms.encrypted.party import BLOCK_BITS
from dpadmm.algorithms.encrypted.report import OWN_MODEL
from dpadmm.data.prepare import clip_rows
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.exceptions import InvalidParameterError
from dpadmm.experiments.audit_games_encrypted import plaintext_he


def _data(n, informative: bool, seed=0):
    """Block 0 (3 columns) and block 1 (4 columns); block 1 carries signal or is independent noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 7))
    w = np.array([1.0, -0.8, 0.5, 1.2, -1.0, 0.9, 0.7]) * (1.0 if informative else np.r_[np.ones(3), np.zeros(4)])
    y = np.where(X @ w + 0.5 * rng.normal(size=n) > 0, 1, -1)
    return [X[:, :3], X[:, 3:]], y


def _fit(blocks, y, **kw):
    with plaintext_he():
        return VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, rounds=5, random_state=4,
                                           **kw).fit(blocks, y)


def test_the_combination_is_post_processing_of_the_same_fit():
    """Same seed, combine='joint' vs the default: the same weights, Platt scaling, events' ε — only the label
    party's final logit differs, and its report says its own model entered."""
    blocks, y = _data(2600, informative=True)
    joint, chosen = _fit(blocks, y, combine="joint"), _fit(blocks, y)
    for u, v in zip(joint.coefs_, chosen.coefs_):
        np.testing.assert_array_equal(u, v)
    assert joint.calibration_ == chosen.calibration_
    for side in ("features", "labels"):
        assert joint.privacy_[side]["epsilon"] == chosen.privacy_[side]["epsilon"] <= 1.0 + 1e-6
    assert joint.combination_ is None and joint.privacy_["combination"] == "joint"
    assert OWN_MODEL not in joint.privacy_["labels"]["note"]
    assert chosen.combination_.kind == "stacked" and chosen.privacy_["combination"] == "stacked"
    assert OWN_MODEL in chosen.privacy_["labels"]["note"]
    assert not np.allclose(joint.decision_function(blocks), chosen.decision_function(blocks))


def test_stacked_logit_is_own_model_plus_the_parties_scores():
    blocks, y = _data(2600, informative=True)
    m = _fit(blocks, y)
    c, a, b = m.combination_.weights
    assert b > 0  # party 2's joint score carries the signal its columns add
    own = ec.own_model(blocks[0], np.where(y > 0, 1.0, -1.0)).logit(blocks[0])
    party = np.asarray(clip_rows(blocks[1], 1.0) @ m.coefs_[1]).ravel()
    np.testing.assert_allclose(m.decision_function(blocks), c + a * own + b * party, rtol=0, atol=1e-3)


def test_uninformative_party_leaves_the_label_party_its_own_model():
    """Party 2's columns are noise: the held-out comparison keeps the label party's own model (weights (0, 1, 0))
    and the final logit is that model's, fitted on all its rows."""
    blocks, y = _data(2600, informative=False, seed=1)
    m = _fit(blocks, y)
    assert m.combination_.kind == "own model" and m.combination_.weights == (0.0, 1.0, 0.0)
    own = ec.own_model(blocks[0], np.where(y > 0, 1.0, -1.0)).logit(blocks[0])
    np.testing.assert_allclose(m.decision_function(blocks), own, rtol=0, atol=1e-12)
    forced = _fit(blocks, y, combine="stacked")
    assert forced.combination_.kind == "stacked"


def test_too_few_heldout_rows_keep_the_joint_model_platt_scaled():
    """Fewer than MIN_HELDOUT held-out rows: no stacking; the logit is the joint score Platt-scaled."""
    blocks, y = _data(600, informative=True)
    m = _fit(blocks, y)  # 60 held-out rows
    assert m.combination_ is None and m.privacy_["combination"] == "joint"
    a, b = m.calibration_
    s = label.own_scores(1.0, m.coefs_[0], blocks[0]) + np.asarray(clip_rows(blocks[1], 1.0) @ m.coefs_[1]).ravel()
    np.testing.assert_allclose(m.decision_function(blocks), a * s + b, rtol=0, atol=1e-3)


def test_platt_scaling_sums_every_partys_heldout_logits():
    """Three parties: the held-out score is the label party's plus BOTH parties' (it once took the first only)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 6))
    y = np.where(X @ np.array([1.0, -1, 0.5, 1, -1, 1]) > 0, 1, -1)
    blocks = [X[:, :2], X[:, 2:4], X[:, 4:]]
    m = _fit(blocks, y, combine="joint", calibration=0.25)
    n = len(y)
    hold = np.sort(np.random.default_rng(4).permutation(n)[:round(0.25 * n)])
    s = label.own_scores(1.0, m.coefs_[0], blocks[0][hold]) + sum(
        np.asarray(he.quantize(clip_rows(b[hold], 1.0), BLOCK_BITS) @ w).ravel() / 2.0 ** BLOCK_BITS
        for b, w in zip(blocks[1:], m.coefs_[1:]))
    lr = LogisticRegression(C=1e6, tol=1e-10, max_iter=1000).fit(s[:, None], y[hold] > 0)
    assert m.calibration_ == pytest.approx((lr.coef_[0, 0], lr.intercept_[0]), abs=1e-6)


def test_unknown_combine_is_refused_with_the_choices():
    blocks, y = _data(200, informative=True)
    with pytest.raises(InvalidParameterError, match=r"combine must be one of \('choose', 'stacked', 'joint'\)"):
        _fit(blocks, y, combine="average")
