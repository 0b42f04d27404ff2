"""Second pass on T1's gossip fix (e66f21e): a private node's label outside the declared classes is index K, "no
class" (``targets.node_labels``), and the multinomial release keeps its Δ = 2√2·√(R² + 1).

Held (regular tests): over hostile bounded models (margins ±1e3 of mixed signs, all-equal margins, one class
dominating) and prepared rows of the largest norm √(R² + 1), the per-record term ``(p − e_y) x̃ᵀ`` of every label
0…K (K: no class) is within 2·√2·√(R² + 1)/2 of zero in Frobenius norm, so replacing one record (any label, any row)
moves the sum by at most the Δ the node books. A planted "no class"
weight ``p − 2·e_0`` (a foreign label read as a doubled class 0) breaks the bound (ratio 1.22; the honest terms reach 1.0000000000000002, the bound attained at a one-hot p): caught by the same
check. And a private ``ConsensusMultinomialClassifier(classes=[0, 1, 2])`` fits whether one record's label is 1 or
7 (no refusal that depends on the labels), with the same K and the same coefficient shape.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

tg = pytest.importorskip("dpadmm.algorithms.gossip.targets", reason="gossip targets are not in this src")

from dpadmm.estimators.consensus_targets import ConsensusMultinomialClassifier  # noqa: E402


def _terms(M, X, y, weights=tg.softmax_weights):
    """Per-record terms (B, K, d+1) of the multinomial sum at margins M."""
    P = weights(M.copy(), y)
    return P[:, :, None] * X[:, None, :]


def _max_ratio(weights=tg.softmax_weights, K=3, R=2.0, d=3):
    rng = np.random.default_rng(0)
    Xs = rng.normal(size=(64, d + 1))
    Xs *= math.sqrt(R * R + 1) / np.linalg.norm(Xs, axis=1, keepdims=True)  # rows at the largest prepared norm
    delta = tg.Target("multinomial", classes=K).sensitivity(R)
    worst = 0.0
    for M in (rng.normal(scale=1e3, size=(64, K)), np.zeros((64, K)), np.tile([50.0, -50.0, 0.0], (64, 1)),
              np.tile([-50.0, 50.0, 50.0], (64, 1))):
        for y in range(K + 1):  # K: no class
            t = _terms(M, Xs, np.full(64, y, dtype=np.intp), weights)
            worst = max(worst, float(np.max(np.linalg.norm(t.reshape(64, -1), axis=1))) / (delta / 2))
    return worst


def test_a_foreign_label_keeps_the_multinomial_sensitivity():
    assert _max_ratio() <= 1.0 + 1e-12  # 1.0000000000000002 measured: attained


def test_the_check_catches_a_no_class_weight_outside_the_bound():
    def planted(M, y):
        P = tg.softmax_weights(M, np.minimum(y, M.shape[1] - 1))
        P[y == M.shape[1], 0] -= 1.0  # a foreign label read as class 0 twice over
        return P

    assert _max_ratio(planted) > 1.0


def test_no_refusal_and_the_same_k_whatever_one_label():
    r = np.random.default_rng(1)
    X = r.normal(size=(240, 3))
    y = np.argmax(X + r.normal(size=(240, 3)), axis=1)
    shapes = []
    for first in (1, 7):
        yy = y.copy()
        yy[0] = first
        m = ConsensusMultinomialClassifier(epsilon=1.0, classes=[0, 1, 2], n_nodes=2, rounds=3, random_state=0)
        m.fit(X, yy)
        shapes.append((m.coef_.shape, tuple(m.classes_)))
    assert shapes[0] == shapes[1] == ((3, 3), (0, 1, 2))
