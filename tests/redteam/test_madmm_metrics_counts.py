"""A private M-ADMM run's metrics.json (``dpadmm consensus --perturbation pp``) after the DP base rate was handed over.

``final.handed_over_train_loss_mean`` was the log loss of the handed-over predictor on the pooled training labels. When
that predictor is the DP base rate p (also in metrics.json, ``final.dp_base_rate``), the loss is
``−(k/n) log p − (1 − k/n) log(1 − p)``: linear in k, so it inverted to the exact number of positive training labels
(132 of 132 here) — the count issue 35 removed from every other key. Now a private run reports that loss only for runs
that handed over the model (a post-processing of released broadcasts, evaluated like ``final.train_loss_mean``).

Fixed: a private run without ``--monitor`` keeps neither ``history.train_loss`` nor ``final.train_accuracy_mean`` (the
released models' un-noised loss and exact number of correctly classified training rows, ``× n`` an integer), nor the
objective or the handed-over model's training loss; ``--monitor`` keeps them, labelled in ``final.evaluated_by``, and
the Zhang reproductions keep them (their figures are L(t)), labelled the same way."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.datasets import dump_svmlight_file

from conftest import run_cli
from test_metrics_no_exact_counts import N_TRAIN, _table

ARGS = ["consensus", "madmm", "--perturbation", "pp", "--alpha", "0.05", "--fallback-epsilon", "0.4", "--nodes", "3",
        "--iterations", "5", "--normalize", "--seed", "0", "--quiet"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One private run (the CLI once for both tests): its metrics.json and the true positive count."""
    tmp = tmp_path_factory.mktemp("madmm")
    X, y = _table()
    dump_svmlight_file(X[:N_TRAIN], y[:N_TRAIN], str(tmp / "train.svm"), zero_based=False)
    dump_svmlight_file(X[N_TRAIN:], y[N_TRAIN:], str(tmp / "test.svm"), zero_based=False)
    code, _, err = run_cli([*ARGS, "--data", tmp / "train.svm", "--test", tmp / "test.svm", "--out", tmp / "o"])
    assert code == 0, err
    return json.loads((tmp / "o" / "metrics.json").read_text()), int(np.sum(y[:N_TRAIN] > 0))


def test_the_handed_over_dp_base_rate_loss_does_not_invert_to_the_positive_count(run):
    m, k = run
    f = m["final"]
    assert f["handed_over"] == ["dp-base-rate"]  # α(1) = 0.05: the accounted comparison hands over the DP base rate
    p, L = f["dp_base_rate"][0], f.get("handed_over_train_loss_mean")
    if L is not None:
        inverted = N_TRAIN * (L + math.log1p(-p)) / (math.log1p(-p) - math.log(p))
        assert abs(inverted - k) > 0.5, (inverted, k)  # before the fix: 132.0000 against 132


def test_a_private_run_without_monitor_keeps_no_training_loss_or_accuracy(run):
    m, _ = run
    assert "train_loss" not in m["history"] and "train_accuracy_mean" not in m["final"]
