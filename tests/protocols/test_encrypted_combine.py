"""The label party's final model after an encrypted fit (dpadmm.algorithms.encrypted.combine): post-processing of
the same fit (the releases, the weights and the privacy figures do not depend on ``combine``), its own model plus
the parties' scores with one non-negative weight (the default), stacked with them, or kept alone by the held-out
comparison, at every size. On the
plaintext HE layer (the same arithmetic as sf-heu: tests/protocols/test_encrypted_audit.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from dpadmm.algorithms.encrypted import combine as ec
from dpadmm.algorithms.encrypted import he, label
from dpadmm.algorithms.encrypted.party import BLOCK_BITS
from dpadmm.algorithms.encrypted.report import OWN_MODEL
from dpadmm.algorithms.experts.alone import label_party_alone_proba
from dpadmm.data.prepare import clip_rows, default_row_clip, prepare_block
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
    assert joint.label_cfg_.W == chosen.label_cfg_.W == 2.0  # the default weight bound (4 before 2026-11-27)
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
    """Party 2's columns are noise: the held-out comparison of ``combine="choose"`` (the default before) keeps the
    label party's own model (weights (0, 1, 0)) and the final logit is that model's, fitted on all its rows."""
    blocks, y = _data(2600, informative=False, seed=1)
    m = _fit(blocks, y, combine="choose")
    assert m.combination_.kind == "own model" and m.combination_.weights == (0.0, 1.0, 0.0)
    own = ec.own_model(blocks[0], np.where(y > 0, 1.0, -1.0)).logit(blocks[0])
    np.testing.assert_allclose(m.decision_function(blocks), own, rtol=0, atol=1e-12)
    forced = _fit(blocks, y, combine="stacked")
    assert forced.combination_.kind == "stacked"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_500_rows_the_final_model_is_never_worse_than_the_label_party_alone(seed):
    """Issue 38: the choice is made at every size (it was skipped below 200 held-out rows: the joint model
    Platt-scaled, on a0246c6 0.42, 0.37, 0.42 against the label party alone's 0.257, 0.262, 0.245 when party 2's
    columns are noise). 500 training rows (50 held out), 5,000 test rows: with a noise party the label party keeps
    its own model — exactly the label party alone (same fit, same ridge); with an informative one it uses the other
    party's score and beats alone (0.30–0.46 against 0.58)."""
    for informative in (False, True):
        blocks, y = _data(5500, informative=informative, seed=seed)
        tr, te = [b[:500] for b in blocks], [b[500:] for b in blocks]
        with plaintext_he():
            m = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, rounds=5, random_state=seed).fit(tr, y[:500])
        assert m.combination_ is not None and m.combination_.heldout_rows == 50
        loss = log_loss(y[500:] > 0, m.predict_proba(te)[:, 1])
        alone = log_loss(y[500:] > 0, label_party_alone_proba(tr[0], y[:500], te[0], ec.OWN_LAM))
        if informative:
            assert m.combination_.kind != "own model" and loss < alone - 0.1
        else:
            assert m.combination_.kind == "own model" and loss == pytest.approx(alone, abs=1e-9)


def test_too_few_heldout_rows_for_the_folds_keep_the_own_model():
    """Fewer held-out rows than 2·FOLDS: the label party keeps its own model without a comparison (as experts do)."""
    rng = np.random.default_rng(0)
    own, s = rng.normal(size=8), rng.normal(size=8)
    y = np.where(own > 0, 1.0, -1.0)
    c = ec.choose("weighted", own, s, y, np.random.default_rng(0))
    assert c.kind == "own model" and c.weights == (0.0, 1.0, 0.0) and c.heldout_rows == 8
    assert ec.choose("joint", own, s, y, np.random.default_rng(0)) is None


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
    with pytest.raises(InvalidParameterError,
                       match=r"combine must be one of \('weighted', 'choose', 'stacked', 'joint'\), got combine='average'"):
        _fit(blocks, y, combine="average")


def _logistic_labels(logit, rng):
    return np.where(rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit)), 1.0, -1.0)


def test_nonnegative_weight_is_the_constrained_likelihood_maximum():
    """b = argmax_{b ≥ 0} Σ log σ(y (own + b·s)): the score's derivative vanishes there when b > 0, and a score that
    points against the labels gets exactly 0 (the label party alone)."""
    rng = np.random.default_rng(0)
    own, s = rng.normal(size=400), rng.normal(size=400)
    y = _logistic_labels(own + 0.7 * s, rng)
    c = s - s.mean()
    b = ec.nonnegative_weight(own, c, y)
    p = 1.0 / (1.0 + np.exp(-y * (own + b * c)))
    assert 0.4 < b < 1.0 and abs(float(np.sum(y * (1.0 - p) * c))) < 1e-8
    assert ec.nonnegative_weight(own, -c, y) == 0.0
    assert ec.nonnegative_weight(own, np.zeros(400), y) == 0.0


def test_weighted_keeps_one_nonnegative_weight_on_few_rows():
    """``combine="weighted"`` on 300 held-out rows where the parties' score adds a little: ``own + b·(s − μ)`` with
    b > 0 (weights (−b·μ, 1, b)) — where ``"choose"`` (the stacked fit against the own model by two standard errors)
    keeps the own model alone; a score against the labels: the own model."""
    rng = np.random.default_rng(3)
    own, s = rng.normal(size=300), rng.normal(loc=2.0, size=300)
    y = _logistic_labels(own + 0.3 * (s - 2.0), rng)
    w = ec.choose("weighted", own, s, y, np.random.default_rng(0))
    c, a, b = w.weights
    assert w.kind == "weighted" and a == 1.0 and b > 0 and c == pytest.approx(-b * s.mean())
    assert b == pytest.approx(ec.nonnegative_weight(own, s - s.mean(), y))
    assert ec.choose("choose", own, s, y, np.random.default_rng(0)).kind == "own model"
    against = ec.choose("weighted", own, -s, y, np.random.default_rng(0))
    assert against.kind == "own model" and against.weights == (0.0, 1.0, 0.0)


def test_weighted_gives_way_to_the_stacked_fit_when_it_is_clearly_better():
    """The own model's logit is twice too large: the stacked fit (a free) beats ``own + b·s`` by far more than two
    standard errors on 2,000 rows, and is kept."""
    rng = np.random.default_rng(5)
    own, s = rng.normal(size=2000), rng.normal(size=2000)
    y = _logistic_labels(own + s, rng)
    w = ec.choose("weighted", 2.0 * own, s, y, np.random.default_rng(0))
    assert w.kind == "stacked" and w.weights[1] == pytest.approx(0.5, abs=0.1)
    assert w.loss_stacked < w.loss_own - w.tolerance


def _fair_blocks():
    """statsmodels ``fair`` as benchmarks/bench_encrypted_fair.py prepares it: the label party's block (rate_marriage,
    age, yrs_married) standardised by itself and clipped at 3√3, divided; party 2's by public bounds (its columns'
    largest |value|, times √5); 70/30 split, seed 0."""
    import statsmodels.api as sm  # heavy to import (a dependency): only this slow test reads its data set

    d = sm.datasets.fair.load_pandas().data
    y = np.where(d["affairs"].to_numpy() > 0, 1.0, -1.0)
    a = d[["rate_marriage", "age", "yrs_married"]].to_numpy(float)
    b = d[["children", "religious", "educ", "occupation", "occupation_husb"]].to_numpy(float)
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[:round(0.7 * len(y))], idx[round(0.7 * len(y)):]
    A, scaling = prepare_block(a[tr], "standardize", row_clip=default_row_clip(3))
    At = prepare_block(a[te], "standardize", scaling=scaling, row_clip=default_row_clip(3))[0]
    bound = np.abs(b).max(axis=0) * np.sqrt(b.shape[1])
    return [A, b[tr] / bound], y[tr], [At, b[te] / bound], y[te], (a[tr], a[te])


@pytest.mark.slow
def test_fair_default_beats_the_label_party_alone():
    """Issue 28's last item: on ``fair`` (columns overlapping across parties), ε = 1 each side, only the privacy
    flags, the final model's test log loss (mean of seeds 0-2) is below the label party's alone (0.5488) with the
    Gaussian label mechanism the combination was built on; the default before (W = 4, ``combine="choose"``) tied it
    on every seed. Issue 35: the default labels are randomized response at the label party (no premise on the other
    parties); its residuals are noisier and on ``fair`` the label party keeps its own model on some seeds — never
    worse than alone beyond the held-out choice's slack (BENCHMARKS.md: 0.5485 against 0.5488). The plaintext layer:
    the same arithmetic as sf-heu (tests/protocols/test_encrypted_audit.py)."""
    blocks, y, test, yt, (raw, raw_t) = _fair_blocks()
    alone = log_loss(yt > 0, label_party_alone_proba(raw, y, raw_t, 1e-3))
    assert alone == pytest.approx(0.5488, abs=1e-4)
    losses, before, rr = [], [], []
    for seed in (0, 1, 2):
        with plaintext_he():
            m = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, random_state=seed,
                                            label_mechanism="gaussian").fit(blocks, y)
            old = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, random_state=seed, weight_bound=4.0,
                                              combine="choose", label_mechanism="gaussian").fit(blocks, y)
            default = VerticalEncryptedClassifier(epsilon=1.0, label_epsilon=1.0, random_state=seed).fit(blocks, y)
        losses.append(log_loss(yt > 0, m.predict_proba(test)[:, 1]))
        before.append(log_loss(yt > 0, old.predict_proba(test)[:, 1]))
        rr.append(log_loss(yt > 0, default.predict_proba(test)[:, 1]))
        assert m.privacy_["features"]["epsilon"] <= 1.0 + 1e-6
        assert default.privacy_["labels"]["mechanism"] == "randomized response"
    # issue 38: a weighted or stacked model is kept only if it also beats the label party's own model in the same
    # 5-fold CV, so on some seeds the Gaussian run keeps its own model: never worse than alone beyond the slack
    assert np.mean(losses) <= alone + 0.001, losses
    assert np.mean(rr) <= alone + 0.001, rr
    assert np.allclose(before, alone, atol=1e-4), before  # what main gave: the label party alone on every seed
