"""Functional quantile regression, the central machine's side [Zhou, Alg. 2]: the consensus w^l from the workers'
noisy local models (post-processing), residual balancing, the output rule and the metrics.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .messages import HubConfig, HubMessage, HubState, PartyMessage


def init_hub(cfg: HubConfig):
    """w⁰ = 0 [Zhou, Alg. 2]."""
    w0 = np.zeros(cfg.shape)
    st = HubState(0, w0, np.zeros(cfg.shape), 0, math.inf, math.inf, cfg.rho)
    return st, {name: HubMessage(0, w0, cfg.rho) for name in cfg.party_names}


def hub_step(cfg: HubConfig, state: HubState, outboxes: Mapping[str, PartyMessage], *, rng):
    """w^l = mean_i w̃_i^l − mean_i γ_i^{l−1}/ρ [Zhou, eq. 17/23] over every worker of every party."""
    wt = np.concatenate([outboxes[p].w_tilde for p in cfg.party_names], axis=1)
    gm = np.concatenate([outboxes[p].gamma for p in cfg.party_names], axis=1)
    rho = cfg.rho if math.isnan(state.rho) else state.rho  # the ρ_l the workers used this round
    w = wt.mean(1) - gm.mean(1) / rho
    t = state.round + 1
    start = cfg.rounds - max(1, int(round(cfg.average_last * cfg.rounds))) if cfg.average_last > 0 else cfg.rounds
    w_sum, n_sum = state.w_sum, state.n_sum
    if cfg.average_last > 0 and t > start:
        w_sum, n_sum = w_sum + w, n_sum + 1
    r = float(np.sqrt(np.mean(np.sum((wt - w[:, None]) ** 2, -1))))
    d = float(rho * np.sqrt(np.mean(np.sum((w - state.w) ** 2, -1))))
    rho_next = rho
    if cfg.adapt_rho and t > 1:
        if r > 10.0 * d:
            rho_next = min(rho * 2.0, 1e4 * cfg.rho)
        elif d > 10.0 * r:
            rho_next = max(rho / 2.0, 1e-4 * cfg.rho)
    new = HubState(t, w, w_sum, n_sum, r, d, rho_next)
    return new, {name: HubMessage(t, w, rho_next) for name in cfg.party_names}, []


def hub_metrics(cfg: HubConfig, state: HubState, diagnostics: Mapping[str, dict]) -> dict:
    """Augmented objective Σ_i f_i(w̃_i) + (λ/M)P(w̃_i) + ρ‖w̃_i − w‖ [Zhou, §5] and the empirical loss
    (1/M) Σ_i f_i(w̃_i); arrays (G, S) for batched runs, floats for a single setting."""
    loss = np.concatenate([diagnostics[p]["loss"] for p in cfg.party_names], axis=1)
    pen = np.concatenate([diagnostics[p]["penalty"] for p in cfg.party_names], axis=1)
    gap = np.concatenate([diagnostics[p]["gap"] for p in cfg.party_names], axis=1)
    rho = cfg.rho if cfg.rho_in_objective is None else cfg.rho_in_objective
    aug = (loss + pen + rho * gap).sum(1)
    emp = loss.mean(1)
    out = {"augmented_objective": aug, "empirical_loss": emp, "primal_residual": state.primal_residual,
           "dual_residual": state.dual_residual}
    if aug.size == 1:
        out["augmented_objective"] = float(aug.ravel()[0])
        out["empirical_loss"] = float(emp.ravel()[0])
        out["objective"] = out["augmented_objective"]
    if cfg.tol > 0:
        out["converged"] = bool(state.primal_residual <= cfg.tol and state.dual_residual <= cfg.tol)
    return out
