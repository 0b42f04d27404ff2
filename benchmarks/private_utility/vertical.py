"""Private utility of vertical ADMM sharing on real data in its own units (issue 18; BENCH_INTERFACE.md).

Datasets (no download; each split into a label party and one other party):

* ``breast_cancer`` (scikit-learn, 569 rows, 30 columns in raw units): the label party holds the first 5
  columns (mean radius, texture, perimeter, area, smoothness), party 2 the other 25; 400 train / 169 test.
* ``fair`` (statsmodels ``fair``, 6,366 rows, raw units; label: any affair): the label party holds
  rate_marriage, age, yrs_married; party 2 children, religious, educ, occupation, occupation_husb;
  70/30 split.
* ``adult`` (bundled UCI Adult, raw table; 30,162 train / 15,060 test complete rows): the label party
  holds age, education-num, hours-per-week, sex (one-hot); party 2 capital-gain, capital-loss and
  one-hot marital-status, relationship, occupation.
* ``a9a`` (bundled, 32,561 / 16,281, binary one-hot; parties 66/57 as everywhere in dpadmm).

Preparation is what the CLI does for party files: each party standardises its own columns with its own
training statistics (``prepare_block``); a9a's binary rows are normalised per party (as the README's a9a
runs). Feature-private runs additionally clip standardised rows at 3·sqrt(d_m) and divide by it (‖row‖ ≤ 1).

Sides: ``labels`` (``label_epsilon=ε``, the library's default mechanism: randomized response + the label
party's refit and choice), ``features`` (``epsilon=ε``, one-feature-column relation, labels unprotected),
``features+labels`` (both at ε); ``features-experts`` and ``features+labels-experts``: the same sides with
:class:`dpadmm.VerticalExpertsClassifier` (each party's output-perturbed model, record relation, combined by
the label party; its own block as prepared, since it never leaves; the others' scaled by public bounds,
:func:`public_scaling`, because a party's own standardisation is not covered by the record relation). Baselines per row: non-private vertical fit, base rate, the label party
alone (logistic regression on its own prepared block, same λ), and two centralised DP references on the
pooled prepared data at the same ε:

* label sides: randomized response on the labels + logistic regression on pooled data whose
  probabilities are de-biased for the known flip rate, ``p = (p̃ − q)/(1 − 2q)`` clipped to [0.005, 0.995];
* the features side: record-level ε-DP logistic regression by objective perturbation (Chaudhuri,
  Monteleoni & Sarwate 2011, Alg. 2), implemented here (rows scaled to ‖x‖ ≤ 1, with a constant column).

Run standalone: ``python benchmarks/private_utility/vertical.py --quick``.
"""

from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np

DATASETS = ["breast_cancer", "fair", "adult", "a9a"]
LAM = 1e-3
QUICK = {"datasets": ["breast_cancer", "fair", "adult", "a9a"], "epsilons": [1.0], "seeds": 2,
         "sides": ["labels", "features", "features-experts"]}
SIDES = ["labels", "features", "features+labels", "features-experts", "features+labels-experts"]


# ----------------------------------------------------------------------------- data
def _split(n: int, frac: float, seed: int = 0):
    idx = np.random.default_rng(seed).permutation(n)
    k = int(round(frac * n))
    return idx[:k], idx[k:]


def load(name: str):
    """``(train_blocks, y_train, test_blocks, y_test, preparation)`` with labels in {−1, +1}, raw units."""
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        y = np.where(y == 0, 1.0, -1.0)  # +1 = malignant
        tr, te = _split(len(y), 400 / 569)
        cols = [list(range(5)), list(range(5, 30))]
        return [X[tr][:, c] for c in cols], y[tr], [X[te][:, c] for c in cols], y[te], "standardize"
    if name == "fair":
        import statsmodels.api as sm

        d = sm.datasets.fair.load_pandas().data
        y = np.where(d["affairs"].to_numpy() > 0, 1.0, -1.0)
        a = d[["rate_marriage", "age", "yrs_married"]].to_numpy(float)
        b = d[["children", "religious", "educ", "occupation", "occupation_husb"]].to_numpy(float)
        tr, te = _split(len(y), 0.7)
        return [a[tr], b[tr]], y[tr], [a[te], b[te]], y[te], "standardize"
    if name == "adult":
        import pandas as pd

        from dpadmm.data.adult import load_adult_frame

        df = load_adult_frame().dropna()
        y = np.where(df["income"].str.strip().str.rstrip(".") == ">50K", 1.0, -1.0)
        one = lambda cols: pd.get_dummies(df[cols].astype(str), dtype=float)  # noqa: E731
        a = np.hstack([df[["age", "education-num", "hours-per-week"]].to_numpy(float), one(["sex"]).to_numpy()])
        b = np.hstack([df[["capital-gain", "capital-loss"]].to_numpy(float),
                       one(["marital-status", "relationship", "occupation"]).to_numpy()])
        tr = (df["split"] == "train").to_numpy()
        te = ~tr
        return [a[tr], b[tr]], y[tr], [a[te], b[te]], y[te], "standardize"
    if name == "a9a":
        from dpadmm.data import load_a9a, partition_columns
        from dpadmm.data.datasets import A9A_PARTIES

        X, y = load_a9a("train")
        Xt, yt = load_a9a("test")
        return partition_columns(X, A9A_PARTIES), y, partition_columns(Xt, A9A_PARTIES), yt, "normalize-rows"
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


def prepare(train, test, how: str, row_clip: bool):
    """Party-local preparation (statistics from each party's training rows)."""
    from dpadmm.data.prepare import default_row_clip, prepare_block

    P, Q = [], []
    for B, T in zip(train, test):
        R = default_row_clip(B.shape[1]) if (row_clip and how == "standardize") else None
        Pb, scaling = prepare_block(B, how, row_clip=R)
        P.append(Pb)
        Q.append(prepare_block(T, how, scaling=scaling, row_clip=R)[0])
    return P, Q


# ----------------------------------------------------------------------------- references
def _dense(blocks):
    import scipy.sparse as sp

    return np.hstack([b.toarray() if sp.issparse(b) else np.asarray(b) for b in blocks])


def log_loss_pm(p, y):
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(np.where(y > 0, np.log(p), np.log1p(-p))))


def sk_logreg(X, y, Xt, lam: float):
    from sklearn.linear_model import LogisticRegression

    m = LogisticRegression(C=1.0 / (lam * X.shape[0]), max_iter=5000, tol=1e-8).fit(X, y)
    return m.predict_proba(Xt)[:, 1]


def central_label_dp(X, y, Xt, yt, eps: float, lam: float, rng) -> float:
    """Randomized response on the labels, logistic regression on pooled data, probabilities de-biased
    for the known flip rate q: P(Y=1|x) = (P(Ỹ=1|x) − q)/(1 − 2q)."""
    q = 1.0 / (1.0 + math.exp(eps))
    yr = np.where(rng.random(len(y)) < q, -y, y)
    p = sk_logreg(X, yr, Xt, lam)
    return log_loss_pm(np.clip((p - q) / (1 - 2 * q), 0.005, 0.995), yt)


def objective_perturbation(X, y, Xt, yt, eps: float, lam: float, rng) -> float:
    """ε-DP (record replace-one) logistic regression by objective perturbation [Chaudhuri et al. 2011,
    Alg. 2] on rows scaled to ‖x‖ ≤ 1 (a constant column appended first, as the intercept)."""
    from scipy.optimize import minimize

    def scale(A):
        A = np.hstack([A, np.ones((A.shape[0], 1))])
        return A / np.maximum(1.0, np.linalg.norm(A, axis=1))[:, None]

    A, At = scale(X), scale(Xt)
    n, d = A.shape
    c = 0.25  # sup ℓ'' of the logistic loss
    eps_p = eps - math.log(1 + 2 * c / (n * lam) + c ** 2 / (n * lam) ** 2)
    extra = 0.0
    if eps_p < eps / 2:  # Alg. 2's extra ridge Δ (taken whenever it leaves more budget for the noise)
        extra = max(c / (n * (math.exp(eps / 4) - 1)) - lam, 0.0)
        eps_p = eps / 2
    direction = rng.standard_normal(d)
    b = direction / np.linalg.norm(direction) * rng.gamma(d, 2.0 / eps_p)

    def f(w):
        m = -y * (A @ w)
        val = np.mean(np.logaddexp(0, m)) + b @ w / n + (lam + extra) / 2 * w @ w
        g = A.T @ (-y / (1 + np.exp(-m))) / n + b / n + (lam + extra) * w
        return val, g

    w = minimize(f, np.zeros(d), jac=True, method="L-BFGS-B", options={"maxiter": 2000}).x
    return log_loss_pm(1 / (1 + np.exp(-(At @ w))), yt)


# ----------------------------------------------------------------------------- run
def _fit(blocks, y, test, yt, **kw) -> float:
    from dpadmm import VerticalLogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = VerticalLogisticRegression(lam=LAM, **kw).fit(blocks, y)
    return log_loss_pm(m.predict_proba(test)[:, 1], yt)


def public_scaling(train, test):
    """Record-safe preparation of the feature parties' blocks for the experts protocol: each column divided by
    its public bound, each row by √d (so ‖row‖ ≤ 1 with no data-dependent statistic). The bounds are the
    columns' documented ranges (breast_cancer: scikit-learn's DESCR min/max table; fair: the survey's codebook;
    Adult: the census top-codes, one-hots 1; a9a: binary), which for these datasets equal the largest |value| of
    train + test, the number used here. A party's own standardisation would not be covered by the record
    relation (replacing one record moves every row's standardised value)."""
    import scipy.sparse as sp

    P, Q = [], []
    for B, T in zip(train, test):
        dense = lambda A: A.toarray() if sp.issparse(A) else np.asarray(A, dtype=float)  # noqa: E731
        b = np.maximum(np.abs(np.vstack([dense(B), dense(T)])).max(axis=0), 1e-12) * math.sqrt(B.shape[1])
        P.append(dense(B) / b)
        Q.append(dense(T) / b)
    return P, Q


def _fit_experts(P, raw, y, Q, raw_test, yt, eps: float, labels: bool, seed: int, how: str) -> float:
    """The experts protocol: the label party's own block as prepared (it never leaves), the others' scaled by
    public bounds (:func:`public_scaling`), or normalised per row where that is the dataset's preparation (a
    row's own norm: record-safe)."""
    from dpadmm import VerticalExpertsClassifier

    S, St = (list(P[1:]), list(Q[1:])) if how == "normalize-rows" else public_scaling(raw[1:], raw_test[1:])
    m = VerticalExpertsClassifier(lam=LAM, epsilon=eps, label_epsilon=eps if labels else None, random_state=seed,
                                  bounds=None)  # blocks already scaled by public bounds (the numbers of issue 18)
    m.fit([P[0]] + S, y)
    return log_loss_pm(m.predict_proba([Q[0]] + St)[:, 1], yt)


def default_row_clip(d):
    from dpadmm.data.prepare import default_row_clip as R

    return R(d)


def run(*, quick: bool = False, seeds: int = 3, epsilons=(0.5, 1.0, 2.0, 5.0), datasets=None, progress=print,
        sides=None, label_mechanism: str = "rr") -> list[dict]:
    """The interface of BENCH_INTERFACE.md; ``label_mechanism="gaussian"`` measures the other label mechanism."""
    if quick:
        datasets = datasets or QUICK["datasets"]
        epsilons, seeds, sides = QUICK["epsilons"], min(seeds, QUICK["seeds"]), sides or QUICK["sides"]
    datasets = list(datasets or DATASETS)
    sides = list(sides or SIDES)
    rows = []
    for name in datasets:
        train, y, test, yt, how = load(name)
        P, Q = prepare(train, test, how, row_clip=False)
        Pc, Qc = prepare(train, test, how, row_clip=True)  # bounded rows for the feature side
        n, nt = len(y), len(yt)
        t0 = time.perf_counter()
        non_private = _fit(P, y, Q, yt)
        progress(f"vertical/{name}: n={n}, non-private {non_private:.4f} ({time.perf_counter() - t0:.1f}s)")
        trivial = log_loss_pm(np.full(nt, np.mean(y > 0)), yt)
        alone = log_loss_pm(sk_logreg(_dense(P[:1]), y, _dense(Q[:1]), LAM), yt)
        X, Xt = _dense(P), _dense(Q)
        common = dict(algorithm="vertical", dataset=name, n_train=n, n_test=nt, metric="test_log_loss",
                      non_private=non_private, trivial=trivial, label_party_alone=alone, in_range=None)
        rows.append(dict(common, side="non-private", epsilon=None, delta=None, seed=None, private=non_private,
                         central_dp=None, central_dp_kind=None, seconds=None))
        for side in sides:
            for eps in epsilons:
                for seed in range(seeds):
                    rng = np.random.default_rng([seed, int(eps * 1000), 18])
                    kw = {"random_state": seed}
                    blocks, tblocks = (P, Q) if side == "labels" else (Pc, Qc)
                    if "labels" in side:
                        kw["label_epsilon"] = eps
                        kw["label_mechanism"] = label_mechanism
                    if "features" in side:
                        kw["epsilon"] = eps
                        if how == "standardize":  # party 1's rows were divided by R: its own ridge is λ/R²
                            kw["label_block_scale"] = 1.0 / default_row_clip(P[0].shape[1])
                    t0 = time.perf_counter()
                    if side.endswith("-experts"):
                        private = _fit_experts(P, train, y, Q, test, yt, eps, "labels" in side, seed, how)
                    else:
                        private = _fit(blocks, y, tblocks, yt, **kw)
                    secs = time.perf_counter() - t0
                    if side in ("features", "features-experts"):
                        cdp, kind = objective_perturbation(X, y, Xt, yt, eps, LAM, rng), \
                            "objective perturbation (Chaudhuri et al. 2011), record-level, pooled"
                    else:
                        cdp, kind = central_label_dp(X, y, Xt, yt, eps, LAM, rng), \
                            "randomized response + de-biased logistic regression, pooled"
                    rows.append(dict(common, side=side, epsilon=eps, delta=0.0 if side == "labels" else 1e-5,
                                     seed=seed, private=private, central_dp=cdp, central_dp_kind=kind, seconds=secs))
                    progress(f"vertical/{name}/{side} eps={eps:g} seed={seed}: {private:.4f} (alone {alone:.4f}, "
                             f"central {cdp:.4f}, {secs:.1f}s)")
    return rows


def table(rows) -> str:
    out = ["| dataset | side | ε | private (mean) | worst | non-private | base rate | label party alone | central DP |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    groups = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["side"], r["epsilon"]), []).append(r)
    for (ds, side, eps), rs in groups.items():
        pv = [r["private"] for r in rs]
        c = [r["central_dp"] for r in rs if r["central_dp"] is not None]
        out.append(f"| {ds} | {side} | {'' if eps is None else f'{eps:g}'} | {np.mean(pv):.4f} | {max(pv):.4f} | "
                   f"{rs[0]['non_private']:.4f} | {rs[0]['trivial']:.4f} | {rs[0]['label_party_alone']:.4f} | "
                   f"{np.mean(c):.4f} |" if c else
                   f"| {ds} | {side} | | {np.mean(pv):.4f} | | {rs[0]['non_private']:.4f} | {rs[0]['trivial']:.4f} | "
                   f"{rs[0]['label_party_alone']:.4f} | |")
    return "\n".join(out)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--sides", nargs="+", default=None)
    ap.add_argument("--label-mechanism", default="rr", choices=("rr", "gaussian"))
    a = ap.parse_args()
    res = run(quick=a.quick, seeds=a.seeds, epsilons=a.epsilons, datasets=a.datasets, sides=a.sides,
              label_mechanism=a.label_mechanism,
              progress=lambda s: print(s, file=sys.stderr))
    print(table(res))
