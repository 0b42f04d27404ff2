"""Red team T5 (docs/redteam-2026-11-29.md, third pass): a private gossip multiclass run's "test-set" class prior
read its classes off the training labels, and a training label outside the declared classes crashed the pooled
reference after the fit."""

from __future__ import annotations

import math

import numpy as np

from dpadmm.workflows.gossip_targets import run_gossip_target

CLASSES = np.array([0, 1, 2])


def _data():
    r = np.random.default_rng(0)
    Xs = [r.normal(size=(60, 2)) for _ in range(3)]
    ys = [np.where(x[:, 0] > 0.5, 1.0, 0.0) for x in Xs]  # classes 0 and 1 only ...
    ys[2][0] = 2.0  # ... and one record of class 2
    Xt = r.normal(size=(40, 2))
    yt = np.where(Xt[:, 0] > 0.5, 1.0, 0.0)
    yt[:5] = 2.0
    return Xs, ys, Xt, yt


def _prior(ys, Xs, Xt, yt):
    m = run_gossip_target(target="multiclass", data="t", Xs=Xs, ys=ys, split="as given", epsilon=1.0, rounds=3,
                          seed=0, X_test=Xt, y_test=yt, classes=CLASSES)
    return m["final"]


def test_a_private_runs_test_set_class_prior_does_not_move_with_one_training_label():
    """The record of class 2 relabelled 0 (its neighbour): the trivial predictor's figures — computed on the test set,
    "test-set" source — were 0.92 vs 4.98 nats of log loss (class 2 dropped from its classes); now the declared
    classes, the same on both sides. A training label outside the declared classes (5) is no class: the run finishes
    (it crashed in the pooled reference's fit on a NaN label)."""
    Xs, ys, Xt, yt = _data()
    a = _prior(ys, Xs, Xt, yt)
    ys2 = [v.copy() for v in ys]
    ys2[2][0] = 0.0
    b = _prior(ys2, Xs, Xt, yt)
    assert a["test_class_prior_source"] == "test-set"
    for k in ("test_class_prior_accuracy", "test_class_prior_log_loss"):
        assert a[k] == b[k]
    ys3 = [v.copy() for v in ys]
    ys3[2][0] = 5.0
    c = _prior(ys3, Xs, Xt, yt)
    assert math.isfinite(c["pooled_test_log_loss"]) and c["test_class_prior_log_loss"] == a["test_class_prior_log_loss"]
