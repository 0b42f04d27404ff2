"""Issue 41's ``LabelPrivateVerticalClassifier`` (labels-only, K classes by k-ary randomized response) attacked with
label-DP neighbours (one training label changed). Its protocol docstring says "the class list is the label party's
public schema (as the two names of a binary label are): it is not priced" — but ``fit`` reads the classes off the
exact labels (``np.unique(y)``), the T1 question of this morning for this estimator.

Found, then fixed (classes= declared, required with a finite label_epsilon; T2): a data set with one record of class 2 and its neighbour with that label changed to 1 give
K = 3 vs K = 2 — the release's alphabet, ``release_["n_classes"]``, and the number of one-vs-rest ADMM runs the
feature parties take part in (3 vs 1) differ deterministically: ε = ∞ for that label. And one label 1 → 0 in a data
set whose only positive it was is refused ("y has 1 class") on one side only.

Held: the booked ε recomputes from the draws (the release's change rate matches e^ε/(e^ε + K − 1) within a derived
binomial tolerance), and the final model (the label party's refit on its exact labels) reaches no feature party:
the other parties' runs are identical whatever the exact labels behind the same released ỹ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

lc = pytest.importorskip("dpadmm.algorithms.vertical.label_multiclass",
                         reason="LabelPrivateVerticalClassifier (vmulticlass, 99a53b1) is not in this src")

from dpadmm.estimators.label_classification import LabelPrivateVerticalClassifier  # noqa: E402
from dpadmm.estimators import label_classification as est  # noqa: E402


def _table(seed=0, n=120):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, 4))
    y = np.argmax(X[:, :3] + 0.5 * r.normal(size=(n, 3)), axis=1)
    return X, y


def _neighbours():
    X, y = _table()
    y = np.where(y == 2, 1, y)
    y2 = y.copy()
    y2[0] = 2  # D′: one record of class 2; D: the same record labelled 1
    y[0] = 1
    return X, y, y2


def _observed(X, y):
    runs = []
    orig = est.VerticalLogisticRegression.fit

    def spy(self, blocks, yk):  # what the feature parties take part in: one ADMM run per call
        runs.append(int(np.asarray(yk).sum()))
        return orig(self, blocks, yk)

    est.VerticalLogisticRegression.fit = spy
    try:
        m = LabelPrivateVerticalClassifier(label_epsilon=1.0, party_sizes=[2, 2], random_state=1, max_iter=5,
                                           classes=[0, 1, 2]).fit(X, y)
    finally:
        est.VerticalLogisticRegression.fit = orig
    return m.release_["n_classes"], len(runs), len(m.joint_)


def test_one_label_does_not_change_what_the_feature_parties_see():
    X, y, y2 = _neighbours()
    assert _observed(X, y) == _observed(X, y2)


def test_no_refusal_depends_on_one_label():
    X, y = _table()
    y = np.zeros_like(y)
    y2 = y.copy()
    y2[0] = 1
    for labels in (y2, y):  # declared classes: no refusal reads the labels (fixed)
        LabelPrivateVerticalClassifier(label_epsilon=1.0, party_sizes=[2, 2], random_state=1, max_iter=5,
                                       classes=[0, 1]).fit(X, labels)
    with pytest.raises(Exception, match="give classes="):  # without them: refused on both sides alike
        LabelPrivateVerticalClassifier(label_epsilon=1.0, party_sizes=[2, 2], random_state=1, max_iter=5).fit(X, y2)


def test_the_booked_epsilon_recomputes_from_the_draws():
    """The keep rate of the release (n = 3,000 labels, K = 4) matches e^ε/(e^ε + K − 1) within 4 binomial sds, and
    the ledger's ε is the ε that rate implies (a release at 3ε would keep 0.87 against 0.48: far outside), and a changed
    label goes to each other class alike (within 4 sds)."""
    r = np.random.default_rng(5)
    n, K, eps = 3000, 4, 1.0
    y = r.integers(0, K, n)
    out, events = lc.release_class_labels(y, K, eps, random_state=7)
    keep = math.exp(eps) / (math.exp(eps) + K - 1)
    rate = float(np.mean(out == y))
    assert abs(rate - keep) <= 4 * math.sqrt(keep * (1 - keep) / n), (rate, keep)
    assert len(events) == 1 and events[0].epsilon == pytest.approx(eps)
    moved = (out[out != y] - y[out != y]) % K  # 1 … K−1: which other class, relative to the true one
    share = np.bincount(moved, minlength=K)[1:] / moved.size
    sd = math.sqrt((1 / (K - 1)) * (1 - 1 / (K - 1)) / moved.size)
    assert np.all(np.abs(share - 1 / (K - 1)) <= 4 * sd), share


@pytest.mark.filterwarnings("ignore:ADMM did not reach")
def test_the_label_party_refit_reaches_no_feature_party():
    """The feature parties' runs are functions of the release only: with the released ỹ fixed (the same draws), two
    different exact label vectors give identical one-vs-rest fits (coefficients of every party, bit for bit) while
    the label party's final model differs."""
    X, y = _table(3)
    m1 = LabelPrivateVerticalClassifier(label_epsilon=0.5, party_sizes=[2, 2], random_state=2, max_iter=20,
                                        classes=[0, 1, 2])
    orig = est.release_class_labels
    est.release_class_labels = lambda idx, K, e, random_state=None: orig(y, K, e, random_state=random_state)
    try:  # both fits release the same ỹ (drawn from y), the second with other exact labels underneath
        a = m1.fit(X, y)
        a_joint = [np.asarray(c).copy() for f in a.joint_ for c in f.coefs_[1:]]
        a_model = np.asarray(a.coefs_[0]).copy()
        y_other = (y + 1) % 3
        b = LabelPrivateVerticalClassifier(label_epsilon=0.5, party_sizes=[2, 2], random_state=2,
                                           max_iter=20, classes=[0, 1, 2]).fit(X, y_other)
    finally:
        est.release_class_labels = orig
    b_joint = [np.asarray(c) for f in b.joint_ for c in f.coefs_[1:]]
    assert all(np.array_equal(u, v) for u, v in zip(a_joint, b_joint))
    assert not np.allclose(a_model, np.asarray(b.coefs_[0]))
