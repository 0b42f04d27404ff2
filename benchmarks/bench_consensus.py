"""Consensus M-ADMM [Zhang, Fig. 3–4] at 100 nodes: the batched in-process path vs one party per node.

Workload: bundled Adult (45,222 × 104), 100 nodes on a connected G(100, 0.1), data split evenly or
unevenly (sizes ∝ linspace(1, 10, N)), C = 50, ρ = 1, θ = 0.5, η(t) = 0.5·1.05^{t−1}; PP noise
α(t) = 3·1.05^{t−1} (the Fig. 3–4 workload) and the noiseless M-ADMM.

- ``batched``: all 100 nodes as one stacked block (``batch=True``), T = 100 iterations; reported:
  training seconds for the 100 iterations (steps + routing, ``history_["seconds"]``; monitoring
  excluded) and the wall time of ``fit`` including monitoring; median over ``--repeats``.
- ``per-node``: the same step function with one party per node (``batch=False``, 100 parties of
  K = 1 — the Python loop of small solves a distributed backend runs), ``--baseline-iterations``
  iterations; its per-iteration time is compared with the batched one (ratio = speed-up).

- ``sklearn``: scikit-learn's centralised LogisticRegression (lbfgs, default C and tolerance) on all
  of Adult, fitted side by side before every batched run; the ratio training seconds / that fit is
  reported per workload (medians).

Everything runs under one thread (``--threads``, threadpoolctl: BLAS and OpenMP) for both libraries, in this
process; the load average at start and end is printed (the machine is shared).

Usage: ``python benchmarks/bench_consensus.py [--repeats 3] [--iterations 100] [--baseline-iterations 10]``
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits


def sklearn_fit(X, y):
    from sklearn.linear_model import LogisticRegression

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        LogisticRegression().fit(X, y)
        return time.perf_counter() - t0


def run(X, y, *, split, perturbation, iterations, batch, seed):
    from dpadmm import ConsensusLogisticRegression

    kw = dict(perturbation=perturbation, alpha=3.0, alpha_growth=1.05) if perturbation != "none" else {}
    m = ConsensusLogisticRegression(C=50.0, reg_weight=1.0, n_nodes=100, topology="erdos:0.1", split=split,
                                    theta=0.5, eta=0.5, eta_growth=1.05, max_iter=iterations, batch=batch,
                                    random_state=seed, monitor=True, **kw)
    t0 = time.perf_counter()
    m.fit(X, y)
    wall = time.perf_counter() - t0
    return m.history_["seconds"][-1], wall, m.history_["train_loss"][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--baseline-iterations", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workloads", nargs="+", default=["even:pp", "even:none", "uneven:pp", "uneven:none"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from dpadmm.data import load_adult

    limit = threadpool_limits(args.threads)
    print(f"load average at start {os.getloadavg()[0]:.1f}; BLAS threads {args.threads}", flush=True)
    X, y = load_adult()
    rows = []
    for workload in args.workloads:
        split, pert = workload.split(":")
        sk, runs = [], []
        for r in range(args.repeats):
            sk.append(sklearn_fit(X, y))
            runs.append(run(X, y, split=split, perturbation=pert, iterations=args.iterations, batch=True, seed=r))
        train, wall, loss = zip(*runs)
        b_train, b_wall, _ = run(X, y, split=split, perturbation=pert, iterations=args.baseline_iterations,
                                 batch=False, seed=0)
        per_it = float(np.median(train)) / args.iterations
        row = {
            "split": split, "perturbation": pert, "iterations": args.iterations,
            "batched_train_s_median": float(np.median(train)), "batched_wall_s_median": float(np.median(wall)),
            "batched_train_s_all": [round(v, 2) for v in train], "final_loss_median": float(np.median(loss)),
            "per_node_train_s_per_iteration": b_train / args.baseline_iterations,
            "batched_train_s_per_iteration": per_it,
            "speedup_batched_vs_per_node": (b_train / args.baseline_iterations) / per_it,
            "sklearn_adult_fit_s_median": float(np.median(sk)),
            "ratio_train_over_sklearn": float(np.median(np.asarray(train) / np.asarray(sk))),
        }
        rows.append(row)
        print(f"{split:>6} {pert:>4}: batched {args.iterations} it: train {row['batched_train_s_median']:.2f} s "
              f"(wall incl. monitoring {row['batched_wall_s_median']:.2f} s; runs {row['batched_train_s_all']}), "
              f"per-node parties {row['per_node_train_s_per_iteration'] * 1e3:.0f} ms/it vs batched "
              f"{per_it * 1e3:.0f} ms/it -> x{row['speedup_batched_vs_per_node']:.1f}; scikit-learn fit "
              f"{row['sklearn_adult_fit_s_median']:.3f} s, ratio {row['ratio_train_over_sklearn']:.1f}", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}", flush=True)
    limit.restore_original_limits()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
