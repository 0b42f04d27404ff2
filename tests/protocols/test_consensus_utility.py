"""Private consensus a user can use (issue 18): never worse than a DP base rate (accounted), test loss and
the trivial baseline in every CLI run, a model file, and runs worse than the base rate flagged. Each test
failed on the code before (no --test, no model written, no fallback: a noisy model's test loss far above
the base rate, judged on training loss only)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from dpadmm import ConsensusLogisticRegression
from dpadmm.algorithms.consensus import baseline as cb
from dpadmm.algorithms.consensus.schedules import alpha_for_budget, schedule_table
from dpadmm.data import load_adult


@pytest.fixture(scope="module")
def adult():
    X, y = load_adult()
    idx = np.random.default_rng(0).permutation(len(y))
    return X[idx[:4000]], y[idx[:4000]], X[idx[4000:12000]], y[idx[4000:12000]]


def _log_loss(m, X, y):
    return float(np.mean(np.logaddexp(0.0, -np.where(y > 0, 1.0, -1.0) * m.decision_function(X))))


def _base(ytr, yte):
    p = np.mean(ytr > 0)
    return float(-np.mean(np.where(yte > 0, np.log(p), np.log1p(-p))))


def test_never_worse_than_the_dp_base_rate_under_heavy_noise(adult):
    """α = 0.5 (noise norm ~ d/α ≈ 200 per round): the consensus model is useless; the accounted comparison
    hands over the DP base rate in every seed, within 1% of the exact base rate's test loss."""
    Xtr, ytr, Xte, yte = adult
    base = _base(ytr, yte)
    for seed in range(3):
        m = ConsensusLogisticRegression(n_nodes=5, perturbation="pp", eta=0.5, alpha=0.5, C=2.0, reg_weight=0.1,
                                        max_iter=10, random_state=seed).fit(Xtr, ytr)
        raw = float(np.mean(np.logaddexp(0.0, -np.where(yte > 0, 1.0, -1.0) * (Xte @ m.coefs_.mean(0)))))
        assert raw > 2 * base  # what was handed over before
        assert m.handed_over_ == "dp-base-rate"
        assert _log_loss(m, Xte, yte) <= 1.01 * base
        assert m.privacy_.epsilon == pytest.approx(m.privacy_.paper_bound["epsilon"] + 0.5, rel=1e-12)


def test_a_good_private_model_is_handed_over(adult):
    """P(T) = 19 (the README's earlier settings): the model beats the base rate clearly and is handed over."""
    Xtr, ytr, Xte, yte = adult
    m = ConsensusLogisticRegression(n_nodes=5, perturbation="pp", eta=0.5, eta_growth=1.05, alpha=3,
                                    alpha_growth=1.05, random_state=2).fit(Xtr, ytr)
    assert m.handed_over_ == "model"
    assert _log_loss(m, Xte, yte) < 0.9 * _base(ytr, yte)


def test_comparison_sensitivity_holds_for_any_model_and_labels():
    """Every d_j lies in an interval of length Δ whatever the (planted, huge) model and labels."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((500, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(500) < 0.5, 1.0, -1.0)
    for f in (np.zeros(6), 1e6 * rng.standard_normal(6)):
        for p in (1e-9, 0.3, 1 - 1e-9):
            d = cb.loss_difference(f, X, y, p, cb.MARGIN_CLIP, cb.P_MIN)
            assert d.max() - d.min() <= cb.compare_sensitivity(cb.MARGIN_CLIP, cb.P_MIN) + 1e-12


def test_alpha_for_budget_meets_the_budget_exactly():
    eta = schedule_table(0.5, 1.02, n_nodes=3, rounds=40)
    a = alpha_for_budget(2.0, C=2.0, B=[300, 500, 400], degree=[1, 2, 1], eta=eta, alpha_growth=1.02)
    alpha = schedule_table(a, 1.02, n_nodes=3, rounds=40)
    B, V = np.array([300, 500, 400])[:, None], np.array([1, 2, 1])[:, None]
    P = (2.0 * (0.35 + alpha) / (eta * V * B)).sum(1)
    assert P.max() == pytest.approx(2.0, rel=1e-12)
    with pytest.raises(Exception, match="below what these settings spend"):
        alpha_for_budget(1e-4, C=2.0, B=[300, 500, 400], degree=[1, 2, 1], eta=eta)


@pytest.mark.slow
def test_cli_judges_test_loss_writes_the_model_and_flags_bad_runs(tmp_path, capsys):
    out = tmp_path / "c"
    # no fallback and heavy noise: every run is worse than the base rate on the held-out rows, and said so
    code, stdout, err = run_cli(["consensus", "madmm", "--perturbation", "pp", "--alpha", "0.5", "--iterations", "5",
                                 "--fallback-epsilon", "0", "--test-fraction", "0.2", "--runs", "2", "--seed", "0",
                                 "--quiet", "--out", str(out)], capsys)
    assert code == 0, err
    assert "test log loss" in stdout and "WORSE THAN A TRIVIAL MODEL" in stdout and "run(s) 1, 2 of 2" in stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["final"]["test_loss_mean"] > m["final"]["test_base_rate_loss"]
    z = np.load(out / "model.npz")
    assert z["coef"].shape == (104,) and z["coefs"].shape == (5, 104)
    # with the fallback (default) the same settings hand over the DP base rate: no run flagged
    code, stdout, err = run_cli(["consensus", "madmm", "--perturbation", "pp", "--alpha", "0.5", "--iterations", "5",
                                 "--test-fraction", "0.2", "--runs", "2", "--seed", "0", "--quiet"], capsys)
    assert code == 0, err
    assert "the consensus model in 0 of 2 run(s)" in stdout and "WORSE THAN" not in stdout
    assert "total with the fallback" in stdout


@pytest.mark.slow
def test_private_defaults_beat_the_base_rate_with_a_budget(tmp_path, capsys):
    """`dpadmm consensus --perturbation pp --epsilon 1 --test-fraction 0.2` (all of Adult, 5-node ring): the
    consensus model is handed over and beats the base rate on the held-out rows in each of 3 runs.

    Seeded: with the parties' own entropy the accounted comparison hands over the DP base rate in roughly one
    run in 50 (its test loss is the base rate's plus the DP rate's error, a hair above it: CI failed once on
    0.566079 against 0.566075), which the fallback test above covers."""
    out = tmp_path / "d"
    code, stdout, err = run_cli(["consensus", "madmm", "--perturbation", "pp", "--epsilon", "1", "--test-fraction", "0.2",
                                 "--runs", "3", "--seed", "0", "--quiet", "--out", str(out)], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["final"]["handed_over"] == ["model"] * 3
    assert max(m["final"]["test_loss"]) < 0.95 * m["final"]["test_base_rate_loss"]
    assert m["privacy"]["epsilon"] <= 1.0 + 1e-9
