"""Graph consensus's party-side policy hooks (``PROTOCOL.policy``): which Setup fields are the node's, how it checks
them against [Zhang, Alg. 1], and the price of a run by [Zhang, Thm 4.1]; and the same for the consensus baseline.
"""

from __future__ import annotations

import math

import numpy as np

from ...exceptions import PrivacyPreconditionError
from ...privacy.policy import PartyPolicy, RunPrice, not_private, refuse
from ...protocol.spec import PartyData, PolicyHooks, setup_view
from .baseline import NodeConfig
from .messages import Setup
from .schedules import LOGISTIC_C1, check_privacy_condition, zhang_epsilon_terms


# ----------------------------------------------------------------------------- graph consensus [Zhang]
def _consensus_prepare(args, policy: PartyPolicy):
    if not (policy.private_work and policy.normalize_rows) or len(args) < 2:
        return args
    setup = setup_view(Setup, args)
    if isinstance(setup.X_list, (list, tuple)):
        setup = setup._replace(X_list=[PartyData(x.key, dict(x.params, normalize=True), x.shape)
                                       if isinstance(x, PartyData) else x for x in setup.X_list])
    return list(setup)


def _consensus_check(cfg, args, policy: PartyPolicy, party: str) -> None:
    if cfg.perturbation == "none":
        return not_private(party, policy, "perturbation='none'")
    if not policy.private_work:
        return
    if cfg.perturbation not in ("pp", "dvp"):
        raise refuse(party, "the perturbation", cfg.perturbation, "'pp' or 'dvp' ([Zhang, Thm 4.1])",
                     "primal variable perturbation has no proved bound")
    norms = np.sqrt(np.einsum("kbd,kbd->kb", cfg.X, cfg.X))
    if norms.size and float(norms.max()) > 1.0 + 1e-9:
        raise refuse(party, "the rows' norm", "above 1", "‖x‖ ≤ 1 ([Zhang, Thm 4.1])",
                     "the party normalises rows it reads itself; rows sent by the coordinator must be normalised")
    for what, v in (("C", cfg.C), ("the degree V_i", cfg.degree), ("eta", cfg.eta), ("theta", cfg.theta)):
        a = np.asarray(v, dtype=float)
        if not (np.all(np.isfinite(a)) and np.all(a > 0)):
            raise refuse(party, what, "a non-positive or non-finite value", "finite positive values")
    if not (math.isfinite(cfg.reg) and cfg.reg >= 0):
        raise refuse(party, "the regulariser weight rho/N", cfg.reg, "a finite non-negative number")
    a = np.asarray(cfg.alpha, dtype=float)
    if not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise refuse(party, "the noise rate alpha", "inf or non-positive", "finite positive α (inf is no noise)")
    if policy.max_alpha is not None and float(a.max()) > policy.max_alpha:
        raise refuse(party, "the noise rate alpha", float(a.max()), f"α ≤ {policy.max_alpha:g} (max_alpha)")
    if cfg.c1 != LOGISTIC_C1:
        raise refuse(party, "c1", cfg.c1, f"{LOGISTIC_C1} (the logistic loss)")
    if not (cfg.newton_tol <= policy.max_newton_tol and cfg.newton_max_iter >= 100):
        raise refuse(party, "the local solver's tolerance", (cfg.newton_tol, cfg.newton_max_iter),
                     f"newton_tol ≤ {policy.max_newton_tol:g} and newton_max_iter ≥ 100",
                     "the bound is about the exact minimiser")
    try:
        check_privacy_condition(B=cfg.B, degree=cfg.degree, C=cfg.C, reg=cfg.reg, theta=cfg.theta, eta=cfg.eta,
                                c1=cfg.c1)
    except PrivacyPreconditionError as exc:
        raise refuse(party, "the schedule", "outside [Zhang, Alg. 1]", "its conditions", str(exc)) from None


def _consensus_price(cfg, rounds: int) -> RunPrice:
    T = min(int(rounds), cfg.eta.shape[1])
    terms = zhang_epsilon_terms(C=cfg.C, B=cfg.B, degree=cfg.degree, eta=cfg.eta[:, :T], alpha=cfg.alpha[:, :T],
                                c1=cfg.c1)  # [Zhang, Thm 4.1], every node of the block
    return RunPrice({}, float(np.sum(terms)), "record_replace")


CONSENSUS = PolicyHooks(
    party={
        "perturbation": "pp or dvp in private work ('none' and 'pvp' are refused)",
        "rows ‖x‖ ≤ 1": "normalised by the party when it reads its file (normalize_rows); coordinator-sent rows "
                        "must satisfy it",
        "alpha": "finite, > 0, ≤ max_alpha if set",
        "C, reg, eta, theta, degree": "checked against [Zhang, Alg. 1] and eq. 64 at the party",
        "c1, newton_tol, newton_max_iter": "the logistic c1 = 1/4; an exact local solve",
        "rounds": "declared at Setup (≤ the schedule's length), priced by [Zhang, Thm 4.1]",
    },
    coordinator={
        "eta, theta, alpha, C, degree (schedules)": "the party computes each round's ε from the same values it "
                                                    "solves with",
        "neighbour_sum (every round)": "data-independent for this node's guarantee (the proof covers any value)",
    },
    prepare=_consensus_prepare, check=_consensus_check, price=_consensus_price)


# ----------------------------------------------------------------------------- consensus baseline
def _baseline_check(cfg: NodeConfig, args, policy, party: str) -> None:
    for what, v in (("eps_count", cfg.eps_count), ("eps_compare", cfg.eps_compare)):
        if not (math.isfinite(v) and v > 0):
            raise refuse(party, what, v, "a finite ε > 0 (Laplace noise of scale Δ/ε)")
    if cfg.name != party:
        raise refuse(party, "the node name", cfg.name, f"{party!r} (its privacy events name it)")


def _baseline_price(cfg: NodeConfig, rounds: int) -> RunPrice:
    # each stage is released at most once per run (node_step), whatever the rounds: at most ε_b + ε_c
    return RunPrice({}, float(cfg.eps_count + cfg.eps_compare) if rounds >= 2
                    else float(max(cfg.eps_count, cfg.eps_compare)), "record_replace")


BASELINE = PolicyHooks(
    party={"eps_count, eps_compare": "finite ε > 0, priced at Setup (ε_b + ε_c per run) against the party's budget",
           "stages": "count and compare at most once each per run; the node's state records them",
           "margin_clip L, p_min (compare)": "L finite > 0, p_min in (0, 1/2]; Δ = L + log 2 − log p_min "
                                             "computed by the node from them"},
    coordinator={"f, p (compare)": "any finite model and base rate: the margins are clipped to ±L and p to "
                                   "[p_min, 1 − p_min], so every record's term stays in an interval of length Δ"},
    check=_baseline_check, price=_baseline_price)
