"""Private utility of decentralised consensus logistic regression [Zhang] on real tables (issue 18).

Rows per dataset × ε × seed (``side="records"``, metric: test log loss), 5-node ring, even split:

* ``private``: what ``dpadmm consensus madmm --perturbation pp --epsilon ε`` hands over — M-ADMM with penalty
  perturbation at the CLI's private defaults (C = clip(B_min/720, 2, 50), ρ = C/20, η(t) = 0.5·1.02^(t−1),
  T = 60, α(t) ∝ 1.02^(t−1)
  solved so that P(T) + the fallback's budget = ε), the DP base rate and the accounted comparison
  (fallback budget min(0.5, ε/4) per node) that hand over the better;
* ``non_private``: M-ADMM without noise at the paper's C = 50, ρ = 1, 100 iterations;
* ``trivial``: the training base rate for every row;
* ``central_dp``: output perturbation (Chaudhuri, Monteleoni & Sarwate 2011, Alg. 1) on the pooled training
  rows at the same ε: w = argmin mean log-loss + (λ/2)‖w‖², released as w + b with density ∝ exp(−ε‖b‖/Δ),
  Δ = 2/(nλ) (‖x‖ ≤ 1, 1-Lipschitz loss), pure ε-DP; λ from {1e-3, 1e-2, 1e-1, 1} chosen *on the test set*
  (an optimistic reference: a real curator would have to choose λ privately).

Datasets (no download): ``adult-4k`` (4,000 rows of the bundled Adult, 8,000 held out), ``breast_cancer``
(scikit-learn, 569 rows, 30 raw columns: standardised with the training mean and sd — treated as public
bounds, *not accounted* — divided by √30 and rows clipped to norm 1; 20% held out), ``adult`` (the bundled
Adult, 80/20 split: 36,177 training rows) and ``a9a`` (bundled, 32,561 train / 16,281 test rows; binary rows
scaled to unit norm). Standalone: ``python benchmarks/private_utility/consensus.py --quick``.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

try:
    from . import progress_line, standalone
except ImportError:  # run as a script: python benchmarks/private_utility/<module>.py
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from private_utility import progress_line, standalone

DATASETS = ["adult-4k", "breast_cancer", "adult", "a9a"]
QUICK = ["adult-4k", "breast_cancer"]
NODES = 5
PRIVATE = dict(eta=0.5, eta_growth=1.02, alpha_growth=1.02, max_iter=60)


def load(name: str):
    """(X_train, y_train, X_test, y_test), rows with ‖x‖ ≤ 1, labels ±1."""
    if name in ("adult", "adult-4k"):
        from dpadmm.data import load_adult

        X, y = load_adult()
        perm = np.random.default_rng(0).permutation(len(y))
        if name == "adult-4k":
            tr, te = perm[:4000], perm[4000:12000]
        else:
            k = len(y) // 5
            tr, te = perm[k:], perm[:k]
        return X[tr], y[tr], X[te], y[te]
    if name == "a9a":
        from dpadmm.data.datasets import load_a9a

        out = []
        for split in ("train", "test"):
            X, y = load_a9a(split)
            X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=float)
            out.append((X, np.where(np.asarray(y) > 0, 1.0, -1.0)))
        d = max(out[0][0].shape[1], out[1][0].shape[1])
        (Xtr, ytr), (Xte, yte) = [(np.pad(X, ((0, 0), (0, d - X.shape[1]))), y) for X, y in out]
        nr = lambda A: A / np.maximum(np.linalg.norm(A, axis=1), 1e-12)[:, None]  # noqa: E731
        return nr(Xtr), ytr, nr(Xte), yte
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        perm = np.random.default_rng(0).permutation(len(y))
        k = len(y) // 5
        te, tr = perm[:k], perm[k:]
        mu, sd = X[tr].mean(0), X[tr].std(0)
        Z = (X - mu) / np.where(sd > 0, sd, 1.0) / math.sqrt(X.shape[1])
        Z = Z / np.maximum(np.linalg.norm(Z, axis=1), 1.0)[:, None]
        y = np.where(y > 0, 1.0, -1.0)
        return Z[tr], y[tr], Z[te], y[te]
    raise ValueError(name)


def log_loss(z, y) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * z)))


def base_rate_loss(ytr, yte) -> float:
    p = float(np.mean(ytr > 0))
    return float(-np.mean(np.where(yte > 0, math.log(p), math.log1p(-p))))


def output_perturbation(Xtr, ytr, Xte, yte, eps: float, rng) -> float:
    """Best test log loss over λ of the output-perturbed pooled logistic regression (see the docstring)."""
    from sklearn.linear_model import LogisticRegression

    n, d = Xtr.shape
    best = math.inf
    for lam in (1e-3, 1e-2, 1e-1, 1.0):
        w = LogisticRegression(C=1.0 / (lam * n), fit_intercept=False, max_iter=2000).fit(Xtr, ytr).coef_[0]
        u = rng.standard_normal(d)
        b = u / np.linalg.norm(u) * rng.gamma(d, (2.0 / (n * lam)) / eps)
        best = min(best, log_loss(Xte @ (w + b), yte))
    return best


def run(*, quick: bool, seeds: int, epsilons: list[float], datasets: list[str] | None = None,
        progress=print) -> list[dict]:
    from dpadmm import ConsensusLogisticRegression
    from dpadmm.algorithms.consensus.schedules import alpha_for_budget, schedule_table
    from dpadmm.cli.consensus import private_C
    from dpadmm.data.graphs import adjacency, make_graph, split_indices

    names = datasets or (QUICK if quick else DATASETS)
    if quick:
        seeds, epsilons = min(seeds, 2), [e for e in epsilons if e in (1.0,)] or [1.0]
    rows = []
    for name in names:
        Xtr, ytr, Xte, yte = load(name)
        trivial = base_rate_loss(ytr, yte)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            npm = ConsensusLogisticRegression(n_nodes=NODES, topology="ring", random_state=0).fit(Xtr, ytr)
        non_private = log_loss(npm.decision_function(Xte), yte)
        common = dict(algorithm="consensus", dataset=name, n_train=int(len(ytr)), n_test=int(len(yte)), delta=0.0,
                      metric="test_log_loss", non_private=non_private, trivial=trivial, label_party_alone=None,
                      in_range=None, central_dp_kind="output perturbation (Chaudhuri et al. 2011) on pooled rows, "
                                                    "pure eps, lambda tuned on the test set (optimistic)")
        rows.append(dict(common, side="non-private", epsilon=None, seed=None, private=None, central_dp=None,
                         seconds=None))
        sizes = [len(i) for i in split_indices(len(ytr), NODES, "even", random_state=np.random.default_rng(0))]
        C = private_C(min(sizes))
        kw = dict(PRIVATE, C=C, reg_weight=C / 20.0)
        _, V = adjacency(make_graph("ring", NODES))
        eta = schedule_table(PRIVATE["eta"], PRIVATE["eta_growth"], n_nodes=NODES, rounds=PRIVATE["max_iter"])
        for eps in epsilons:
            fb = min(0.5, eps / 4.0)
            try:
                alpha = alpha_for_budget(eps - fb, C=C, B=sizes, degree=V, eta=eta,
                                         alpha_growth=PRIVATE["alpha_growth"])
            except Exception:  # noqa: BLE001 - budget below the no-noise cost: the fallback budget alone
                alpha = None
            for s in range(seeds):
                t0 = time.perf_counter()
                if alpha is None:
                    priv = math.nan
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        m = ConsensusLogisticRegression(n_nodes=NODES, topology="ring", perturbation="pp", alpha=alpha,
                                                        fallback_epsilon=fb, random_state=100 + s,
                                                        **kw).fit(Xtr, ytr)
                    assert m.privacy_.epsilon <= eps * (1 + 1e-9)
                    priv = log_loss(m.decision_function(Xte), yte)
                secs = time.perf_counter() - t0
                cdp = output_perturbation(Xtr, ytr, Xte, yte, eps, np.random.default_rng(200 + s))
                rows.append(dict(common, side="records", epsilon=float(eps), seed=s, private=priv, central_dp=cdp,
                                 seconds=secs, handed_over=None if alpha is None else m.handed_over_))
            progress(progress_line(name, eps, rows, seeds, trivial, non_private))
    return rows


if __name__ == "__main__":
    standalone(run, [("dataset", "dataset", "<15"), ("n", "n_train", ">7"), ("eps", "epsilon", ">6g"),
                     ("private", "private", ">10.4f"), ("non-priv", "non_private", ">10.4f"),
                     ("trivial", "trivial", ">10.4f"), ("central", "central_dp", ">10.4f"),
                     ("handed over", "handed_over", ">14")])
