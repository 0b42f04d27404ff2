"""Functional quantile regression's party-side policy hooks (``PROTOCOL.policy``): which Setup fields are the
worker's, how it checks them (the premises of Δ = 2c1/(m(ρ + 1/η)) [Zhou, Lemma 2, Thm 1]), and the price of a run;
and the same for the pooled statistics stages.
"""

from __future__ import annotations

import math

import numpy as np

from ...privacy.policy import (
    PartyPolicy, RunPrice, check_noise_multiplier, finite_positive, not_private, refuse,
)
from ...protocol.spec import PolicyHooks, setup_view
from .local import sensitivity_premises
from .messages import Setup
from .statistics import QUANTILE_STEPS, StatsSetup

#: public standardisation scales (functional score_scale, y_scale) a private party accepts: beyond them the
#: standardised values leave the float range in which clipping and noise keep their relative precision
SCALE_RANGE = (1e-100, 1e100)


# ----------------------------------------------------------------------------- functional quantile [Zhou]
def _functional_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    nms = np.asarray(cfg.settings.noise_multiplier, dtype=float)
    if not np.any(nms > 0):
        return not_private(party, policy, "noise_multiplier=0")
    if not policy.private_work:
        return
    for v in nms:
        check_noise_multiplier(party, v, policy, "a setting's noise multiplier σ/Δ")
    setup = setup_view(Setup, args)
    clip = setup.clip
    if clip is None:
        raise refuse(party, "the score clip", None, "a clip radius c1 on the standardised scores [Zhou, Lemma 2]")
    clip = finite_positive(party, "the score clip", clip)
    if policy.max_score_clip is not None and clip > policy.max_score_clip:
        raise refuse(party, "the score clip", clip, f"≤ {policy.max_score_clip:g} (max_score_clip)")
    if clip < policy.min_clip:  # c1 ≥ clip below: the floor holds for c1 too (REDTEAM_POLICY R5)
        raise refuse(party, "the score clip", clip, f"≥ {policy.min_clip:g} (min_clip)")
    lo, hi = SCALE_RANGE
    scale = np.asarray(setup.score_scale, dtype=float)
    if not (scale.size and np.all(np.isfinite(scale)) and np.all((scale >= lo) & (scale <= hi))):
        raise refuse(party, "the score scale", "a value outside [1e-100, 1e100] or non-finite",
                     "finite values in [1e-100, 1e100]", "standardised scores must stay in the float range the clip "
                     "works in")
    if not (math.isfinite(float(setup.y_loc)) and lo <= float(setup.y_scale) <= hi):
        raise refuse(party, "the response's location and scale", (setup.y_loc, setup.y_scale),
                     "a finite location and a scale in [1e-100, 1e100]")
    need = math.hypot(clip, 1.0) if cfg.fit_intercept else clip
    if not cfg.c1 >= need * (1 - 1e-12):
        raise refuse(party, "c1 of the sensitivity", cfg.c1, f"c1 ≥ {need:.6g}, the norm bound its clipped scores "
                     "have" + (" with the intercept column" if cfg.fit_intercept else ""))
    finite_positive(party, "rho", cfg.rho)
    tau, lam = np.asarray(cfg.settings.tau, dtype=float), np.asarray(cfg.settings.lam, dtype=float)
    if not np.all((tau > 0) & (tau < 1)):  # |ψ| ≤ max(τ, 1 − τ) ≤ 1 is a premise of Δ = 2c1/(m(ρ + 1/η))
        raise refuse(party, "a quantile level tau", [float(t) for t in tau], "0 < τ < 1",
                     "the check loss's slopes τ and τ − 1 bound each score's influence")
    if not np.all(np.isfinite(lam) & (lam >= 0)):
        raise refuse(party, "the penalty weight lam", [float(v) for v in lam], "finite λ ≥ 0 (a convex local problem)")
    bad = sensitivity_premises(cfg)  # and a convex penalty with l1_ratio ∈ [0, 1], … (REDTEAM_POLICY R4, R7)
    if bad:
        raise refuse(party, "the settings", "; ".join(bad), "what the sensitivity 2c1/(m(ρ+1/η)) is proved for")
    if not cfg.emit_events:
        raise refuse(party, "emit_events", False, "True (every release is accounted)")
    if cfg.local_step == "exact" and not cfg.newton_tol <= policy.max_newton_tol:
        raise refuse(party, "newton_tol", cfg.newton_tol, f"≤ {policy.max_newton_tol:g}",
                     "the exact step's bound is about the exact minimiser")


def _functional_price(cfg, rounds: int) -> RunPrice:
    price: dict[float, int] = {}
    for v in np.asarray(cfg.settings.noise_multiplier, dtype=float):
        if v > 0:
            price[float(v)] = price.get(float(v), 0) + int(rounds)  # one release per setting and round
    return RunPrice(price, 0.0, "record_replace")


FUNCTIONAL = PolicyHooks(
    party={
        "settings.noise_multiplier": "> 0 and ≥ the floor for every setting",
        "penalty, l1_ratio; settings.shift, eps_iter, delta_iter; step, local_step, c_w, c2, eta0":
            "the bound's other premises: a known convex penalty with l1_ratio ∈ [0, 1], a finite shift, eps_iter > 0, "
            "δ_iter ∈ (0, 1], known step rules, c_w, c2, η₀ finite > 0",
        "clip (score clip)": "required, finite, ≥ min_clip (default 1e-12), ≤ max_score_clip if set; applied with "
                             "underflow-free row norms",
        "score_scale, y_loc, y_scale": "finite; the scales in [1e-100, 1e100] (the float range the clip works in)",
        "c1": "≥ the clipped scores' norm bound (√(clip² + 1) with the intercept)",
        "settings.tau, settings.lam": "0 < τ < 1 (bounds each score's influence); λ ≥ 0",
        "emit_events, newton_tol": "True; ≤ max_newton_tol for the exact step",
        "rounds": "declared at Setup, priced against the budget",
    },
    coordinator={
        "basis, score_scale, y_loc, y_scale (within the party's range)": "public standardisation; the clip bounds "
                                                                         "the scores whatever they are",
        "rho (every round), c_w, c2, eta0, step, smooth": "enter the step and the sensitivity alike (within the "
                                                          "party's checks: ρ finite > 0 with ρ + 1/η > 0 every round)",
        "w (every round)": "public; the bound covers any hub value",
    },
    check=_functional_check, price=_functional_price)


# ----------------------------------------------------------------------------- functional pooled statistics
def _stats_prepare(args, policy: PartyPolicy):
    """The party's own floor on every round's curve clip: ``setup_stats``'s ``min_clip`` (after the name, the data,
    q and the three multipliers), whatever the coordinator sent there."""
    if not policy.private_work or len(args) < 5:
        return args
    return list(setup_view(StatsSetup, args)._replace(min_clip=policy.min_clip))  # and the declared one_shot


def _stats_multipliers(cfg) -> list[float]:
    """The worker's positive noise multipliers (statistics, DP-quantile counts, comparison)."""
    return [float(v) for v in (cfg.noise_multiplier, getattr(cfg, "quantile_multiplier", 0.0),
                               getattr(cfg, "compare_multiplier", 0.0)) if float(v) > 0]


def _stats_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    if not cfg.noise_multiplier > 0:
        return not_private(party, policy, "noise_multiplier=0")
    if policy.private_work:
        for z in _stats_multipliers(cfg):
            check_noise_multiplier(party, z, policy)


def _stats_price(cfg, rounds: int) -> RunPrice:
    """The ``rounds`` costliest releases the worker's stages can make: the comparison (once, at
    ``compare_multiplier``), the declared one-shot stages (``one_shot`` ≤ 3, at ``noise_multiplier``), the
    bisection counts (``QUANTILE_STEPS``, at ``quantile_multiplier``); rounds beyond them at the smallest
    multiplier. An honest run is priced exactly. Whatever the coordinator then asks, the ledger charges each
    release to a priced multiplier no larger than its own and refuses one that does not fit, so the price
    only decides what is refused, never what is undercharged. A stage whose multiplier is 0 is refused by
    the step in a private run."""
    caps = [(float(m), int(c)) for m, c in ((cfg.compare_multiplier, 1), (cfg.noise_multiplier, cfg.one_shot),
                                            (cfg.quantile_multiplier, QUANTILE_STEPS)) if float(m) > 0 and c > 0]
    caps.sort()  # the smallest multiplier first: the costliest release
    left, price = int(rounds), {}
    for m, c in caps:
        take = min(c, left)
        if take:
            price[m] = price.get(m, 0) + take
        left -= take
    if left > 0:
        m = min(_stats_multipliers(cfg) or [float(cfg.noise_multiplier)])
        price[m] = price.get(m, 0) + left
    return RunPrice(price, 0.0, "record_replace")


STATISTICS = PolicyHooks(
    party={
        "noise_multiplier, quantile_multiplier, compare_multiplier": "> 0 and ≥ the floor (the latter two may be 0: "
                                                                    "their stages are then refused)",
        "sensitivities (√2·parts, √10, (3/√2)c₂², 1 per quantile count)": "fixed by the party's code; enforced by its "
                                                                  "clips",
        "compare sensitivity 2κ·max(hi − p₀, p₀ − lo)/unit": "computed by the party from the model it receives; "
                                                            "enforced by clipping predictions to the band",
        "rounds (stages)": "declared at Setup, priced; a repeated stage is a release beyond the declaration",
        "one_shot": "declared at Setup (0–3 one-shot stages at noise_multiplier); the rounds are priced at the "
                    "costliest releases the stages can make, and a release the price does not cover is refused",
        "every round: curve_clip, y_range, projection, center": "curve_clip finite ≥ min_clip, y_range finite with "
                                                                "lo < hi, projection finite with PᵀP ≈ I, center "
                                                                "finite; a non-finite release is refused",
    },
    coordinator={
        "stage, curve_clip, y_range, projection, center, threshold, model (every round, within the checks)":
            "the party clips to them and scales the noise with the sensitivity they give",
    },
    prepare=_stats_prepare, check=_stats_check, price=_stats_price)
