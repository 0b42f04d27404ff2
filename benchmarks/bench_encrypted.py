"""The encrypted vertical protocol on bundled a9a (parties 66/57 columns), ε = 1 each side (δ = 1e-5), side by side
with the experts protocol at the same settings and today's defaults (``VerticalExpertsClassifier(epsilon,
label_epsilon)``: DP column bounds, the label party's held-out choice) on the same raw blocks, and the label party
alone: test log loss per seed, CPU per round per party, bytes per round. Needs ``pip install "dpadmm[he]"``.

The encrypted fit gets a9a's raw 0/1 blocks, which every party clips at R = 1 (for 0/1 rows: the row normalised);
``encrypted`` is its default final model (``combine="choose"``: the parties' joint scores stacked with the label
party's own model on its held-out rows, or its own model), ``encrypted_joint`` the same fit's joint score
Platt-scaled (``combine="joint"``, the figure before the stacking).

    python benchmarks/bench_encrypted.py [--forward encrypted|clear] [--seeds 0 1 2] [--rounds T] [--step S]
    python benchmarks/bench_encrypted.py --rows 300000 --rounds 3 --seeds 0   # a9a's rows replicated: the cost at n
    python benchmarks/bench_encrypted.py --plaintext   # the same arithmetic without encryption: numbers, not costs
    python benchmarks/bench_encrypted.py --plaintext --no-experts --label-mechanism gaussian   # the labels' mechanism
                                                                                              # before 2026-11-28

Results measured on this machine (2 shared cores) are in the module's RESULTS and in the report of issue 28.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import time

import numpy as np
from sklearn.metrics import log_loss

from dpadmm.algorithms.encrypted import combine as ec
from dpadmm.algorithms.experts.alone import label_party_alone_proba
from dpadmm.data import load_a9a, partition_columns
from dpadmm.estimators.vertical_encrypted import VerticalEncryptedClassifier
from dpadmm.estimators.vertical_experts import VerticalExpertsClassifier
from dpadmm.experiments.audit_games_encrypted import plaintext_he

#: measured 2026-11-26 on this machine (2 cores shared by 3-4 jobs, load 4-5: wall times are not CPU times), bundled
#: a9a, parties 66/57, raw 0/1 blocks (each party clips its rows at R = 1: for 0/1 rows the row normalised), δ = 1e-5,
#: ε = 1 for the features and ε = 1 for the labels; test log loss on a9a.t; ``python benchmarks/bench_encrypted.py``
#: (one run: encrypted, the same fit's joint score, and experts at today's defaults on the same blocks and seeds).
#: The label party alone (its raw columns, its own standardisation): 0.3500. Without any noise (plaintext layer,
#: seed 0): encrypted 0.3273, its joint score 0.3393.
RESULTS: dict = {
    "encrypted forward, labels by randomized response (label_mechanism='rr', the default since 2026-11-28; plaintext "
    "layer, --no-experts; one run 2026-11-28)": {
        "test_log_loss": {0: 0.3299, 1: 0.3305, 2: 0.3290}, "mean": 0.3298,
        "final model kept": {0: "weighted", 1: "weighted", 2: "stacked"},
        "joint score Platt-scaled (combine='joint', the same fits)": {0: 0.3434, 1: 0.3429, 2: 0.3451, "mean": 0.3438},
        "the same with --label-mechanism gaussian (the run below, reproduced on the plaintext layer)": {
            0: 0.3306, 1: 0.3280, 2: 0.3281, "mean": 0.3289},
    },
    "encrypted forward, today's defaults (W = 2, combine='weighted'; one run 2026-11-27 03:00-03:21 UTC, load 5-7)": {
        "test_log_loss": {0: 0.3306, 1: 0.3280, 2: 0.3281}, "mean": 0.3289,
        "final model kept": {0: "weighted", 1: "stacked", 2: "stacked"},
        "joint score Platt-scaled (combine='joint', the same fits)": {0: 0.3490, 1: 0.3492, 2: 0.3490, "mean": 0.3490},
        "experts, same settings (epsilon=1, label_epsilon=1, defaults)": {0: 0.3346, 1: 0.3334, 2: 0.3347,
                                                                          "mean": 0.3343},
        "cpu_seconds_per_fit": {0: 224.6, 1: 212.2, 2: 234.8},
        "cpu_seconds_per_round": {"label party": "2.2-2.4", "party2": "2.8-3.1"},
    },
    "encrypted forward, the defaults before 2026-11-27 (features DP against an honest-but-curious label party, "
    "labels DP)": {
        "settings": "40 rounds, step 2, momentum 0.7, W = W0 = 4, lam 1e-4, 10% held-out rows; combine='choose' "
                    "(kept 'stacked' on every seed: the parties' joint scores stacked with the label party's own model)",
        "test_log_loss": {0: 0.3279, 1: 0.3288, 2: 0.3278}, "mean": 0.3282,
        "joint score Platt-scaled (combine='joint', the same fits)": {0: 0.3413, 1: 0.3423, 2: 0.3412, "mean": 0.3416},
        "experts, same settings (epsilon=1, label_epsilon=1, defaults)": {0: 0.3346, 1: 0.3334, 2: 0.3347,
                                                                          "mean": 0.3343},
        "cpu_seconds_per_fit": {0: 187.1, 1: 195.5, 2: 194.5},
        "cpu_seconds_per_round": {"label party": 1.9, "party2": 2.5},  # seeds 0-2: 1.88-1.93 and 2.53-2.57
        "bytes_per_round": {"residuals Enc_0(g0), label -> party2": 7_968_641, "scores Enc_2(s), party2 -> label": 7_969_871,
                            "cross Enc_2(A0's + r), label -> party2": 18_228,
                            "Enc_0(D'g + xi) + cross back, party2 -> label": 16_579, "gradient back (float64)": 456},
    },
    "clear forward (features NOT protected; labels DP)": {
        "settings": "60 rounds, step 8, lam 1e-4 (the label block not yet quantised in this measurement)",
        "test_log_loss": {0: 0.3366, 1: 0.3366}, "mean_of_2_seeds": 0.3366,  # seed 2 stopped to free the CPU
        "cpu_seconds_per_round": {"label party": 1.35, "party2": 0.84},
        "bytes_per_round": {"residuals, label -> party2": 8_854_884, "masked scores, party2 -> label": 260_488,
                            "Enc(D'g + xi), party2 -> label": 15_508, "gradient back": 456},
    },
}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--forward", choices=("clear", "encrypted"), default="encrypted")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--step", type=float, default=None)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--label-epsilon", type=float, default=1.0)
    ap.add_argument("--label-mechanism", choices=("rr", "gaussian"), default="rr",
                    help="rr (randomized response at the label party, the default since 2026-11-28) or gaussian")
    ap.add_argument("--rows", type=int, default=None, help="replicate a9a's training rows to this many (cost at scale)")
    ap.add_argument("--parties", default="66,57", help="column counts of the parties, the label party's first")
    ap.add_argument("--combine", choices=ec.COMBINE_MODES, default=ec.DEFAULT_COMBINE)
    ap.add_argument("--no-experts", action="store_true")
    ap.add_argument("--plaintext", action="store_true", help="the HE layer replaced by plaintext arithmetic (same "
                    "numbers, no cost measurement)")
    a = ap.parse_args(argv)
    X, y = load_a9a("train")
    if a.rows:  # a9a's rows repeated (and cut) to n = rows: the per-round cost at that size
        idx = np.arange(a.rows) % X.shape[0]
        X, y = X[idx], y[idx]
    Xt, yt = load_a9a("test")
    sizes = tuple(int(c) for c in a.parties.split(","))
    P, Q = partition_columns(X, sizes), partition_columns(Xt, sizes)
    alone = float(log_loss(yt > 0, label_party_alone_proba(P[0], y, Q[0], 1e-3)))
    print(json.dumps({"label_party_alone": alone}), flush=True)
    out = []
    for seed in a.seeds:
        c0, w0 = time.process_time(), time.time()
        with plaintext_he() if a.plaintext else contextlib.nullcontext():
            m = VerticalEncryptedClassifier(epsilon=a.epsilon, label_epsilon=a.label_epsilon, rounds=a.rounds,
                                            step=a.step, forward=a.forward, random_state=seed,
                                            combine=a.combine, label_mechanism=a.label_mechanism).fit(P, y)
        cpu, wall = time.process_time() - c0, time.time() - w0
        joint = copy.copy(m)
        joint.combination_ = None  # the same fit, its joint score Platt-scaled
        row = {"seed": seed, **m.score_metrics(Q, yt), "encrypted_joint": joint.score_metrics(Q, yt)["log_loss"],
               "combination": m.combination_ and m.combination_.facts(), "plaintext": a.plaintext,
               "cpu_seconds": cpu, "wall_seconds": wall,
               "cpu_per_round_all_parties": cpu / m.privacy_["rounds"], **m.cost_,
               "epsilon_labels": m.privacy_["labels"]["epsilon"], "features": m.privacy_["features"]}
        if not a.no_experts:  # the experts protocol at the same settings, its defaults, the same blocks and seed
            x = VerticalExpertsClassifier(epsilon=a.epsilon, label_epsilon=a.label_epsilon, delta=1e-5,
                                          random_state=seed).fit(P, y)
            row["experts"] = x.score_metrics(Q, yt)["log_loss"]
            row["experts_choice"] = x.calibration_.kind if x.calibration_ is not None else None
        print(json.dumps(row), flush=True)
        out.append(row)
    print(json.dumps({"mean_test_log_loss": float(np.mean([r["log_loss"] for r in out])),
                      "mean_encrypted_joint": float(np.mean([r["encrypted_joint"] for r in out])),
                      "mean_experts": float(np.mean([r["experts"] for r in out])) if not a.no_experts else None,
                      "label_party_alone": alone, "seeds": a.seeds, "forward": a.forward, "rounds": a.rounds,
                      "step": a.step, "combine": a.combine, "label_mechanism": a.label_mechanism}))


if __name__ == "__main__":
    main()
