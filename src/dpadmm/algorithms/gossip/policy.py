"""The gossip node's policy hooks: what a budgeted node checks at Setup and what it prices.

``check``: a private run needs a noise multiplier ≥ the operator's floor; the row clip R in :data:`ROW_CLIP_RANGE`
(Δ = 2√(R² + 1) is computed by the node from it: R² must not overflow, red team 2026-11-29 G2), the step, the
momentum and the ridge finite; declared bounds
must be finite with lo < hi; the declared rounds are at most the party's ``max_rounds``.
``price``: every round is at most one Gaussian release at the node's σ/Δ — K range counts plus T gradient sums,
whatever the coordinator then sends (the step refuses a round beyond the declaration) — and, with a declared
validation stage (``validation`` = (ε_b, ε_c), finite and positive, a private binary run only), its count and
comparison as pure ε_b + ε_c (each answered once per run at the declared ε: :func:`.validation.answer`).
"""

from __future__ import annotations

import math

import numpy as np

from ...privacy.policy import PartyPolicy, RunPrice, check_noise_multiplier, refuse
from ...protocol import PolicyHooks

#: the row clips a private node accepts (public): beyond 1.3e154 R² overflows in Δ = 2√(R² + 1)
ROW_CLIP_RANGE = (1e-100, 1e100)


def _finite(party: str, what: str, v, positive: bool = True) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise refuse(party, what, v, "a finite number") from None
    if not math.isfinite(x) or (positive and x <= 0) or x < 0:
        raise refuse(party, what, v, "a finite " + ("positive" if positive else "non-negative") + " number")
    return x


def check(cfg, args, policy: PartyPolicy, party: str) -> None:
    if cfg.name != party:
        raise refuse(party, "the node name", cfg.name, f"{party!r} (its privacy events name it)")
    if cfg.validation is not None:  # (ε_b, ε_c): Laplace scales 1/ε_b and Δ/ε_c, priced below
        if len(cfg.validation) != 2 or cfg.noise_multiplier <= 0 or cfg.loss != "logistic":
            raise refuse(party, "the validation", cfg.validation, "(ε_b, ε_c) in a private binary run")
        for what, e in zip(("the validation count's ε_b", "the validation comparison's ε_c"), cfg.validation):
            _finite(party, what, e)
    if cfg.noise_multiplier <= 0:
        if policy.private_work:
            raise refuse(party, "the run's privacy", "noise_multiplier=0", "a private run (its operator started it "
                         "with a budget or --private-only)", "un-noised releases have ε = ∞")
        return
    if policy.private_work:
        check_noise_multiplier(party, cfg.noise_multiplier, policy)
    if not ROW_CLIP_RANGE[0] <= _finite(party, "the row clip R", cfg.row_clip) <= ROW_CLIP_RANGE[1]:
        raise refuse(party, "the row clip R", cfg.row_clip, f"in [{ROW_CLIP_RANGE[0]:g}, {ROW_CLIP_RANGE[1]:g}] (its "
                     "square must not overflow in Δ = 2√(R² + 1))")
    _finite(party, "the step η", cfg.step)
    _finite(party, "the ridge λ", cfg.ridge, positive=False)
    if not (0.0 <= float(cfg.momentum) < 1.0):
        raise refuse(party, "the momentum β", cfg.momentum, "0 ≤ β < 1")
    if cfg.bounds is not None:
        lo, hi = (np.asarray(b, dtype=float) for b in cfg.bounds)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
            raise refuse(party, "the declared column bounds", "non-finite or lo >= hi", "finite with lo < hi")
    total = int(cfg.rounds) + (0 if cfg.bounds is not None else int(cfg.range_rounds))
    if policy.max_rounds is not None and total > policy.max_rounds:
        raise refuse(party, "the rounds", total, f"at most {policy.max_rounds} (max_rounds)")


def price(cfg, rounds: int) -> RunPrice:
    """At most one Gaussian release per round at the node's σ/Δ, and no more than the declared K + T; then, with a
    declared validation, ε_b (round K + T + 1) and ε_c (round K + T + 2) of pure DP, each stage once per run."""
    declared = int(cfg.rounds) + (0 if cfg.bounds is not None else int(cfg.range_rounds))
    n = min(int(rounds), declared)
    if cfg.noise_multiplier <= 0 or n <= 0:
        return RunPrice({}, 0.0, "record_replace")
    pure = 0.0 if cfg.validation is None else float(sum(cfg.validation[:max(0, min(int(rounds) - declared, 2))]))
    return RunPrice({float(cfg.noise_multiplier): n}, pure, "record_replace")


GOSSIP = PolicyHooks(
    party={
        "noise_multiplier": "> 0 and ≥ the floor in private work; the same σ/Δ for every release",
        "row clip R, step η, momentum β, ridge λ": "finite (R in [1e-100, 1e100], η > 0; 0 ≤ β < 1; λ ≥ 0); Δ = 2√(R² + 1) computed "
                                                  "by the node",
        "rounds (K range + T gradient)": "declared at Setup, priced as K + T Gaussian releases; a round beyond "
                                         "them is refused",
        "column bounds": "declared ones finite with lo < hi; the node clips its own rows to them",
        "validation (ε_b, ε_c)": "finite > 0 in a private binary run, priced as pure ε at Setup; each stage once per "
                                 "run after the last gradient round, at the declared ε only (validation.answer)",
    },
    coordinator={
        "thresholds (range rounds)": "any finite values: each count moves by ≤ 1 whatever they are",
        "bounds from the DP range, neighbour_sum (every round)": "any finite values (lo < hi): the clips bound "
                                                                 "the gradient sum whatever they are; the sum and "
                                                                 "the mixed point are put in the public box "
                                                                 "(each coordinate within ±1e6) before the step",
        "w̄, p, L, p_min (validation compare)": "a finite model of the node's width, finite p, L > 0, p_min in "
                                                "(0, 1/2]; Δ = L + abs(logit p_c) computed by the node from them",
    },
    check=check, price=price)
