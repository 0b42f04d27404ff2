"""Vertical ADMM sharing, the coordinator's side (the label holder): z-update [Hu, eq. 7], dual update
[Hu, eq. 8], residual balancing; with label privacy, :func:`.label.label_private_step` instead.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .label import label_private_step
from .messages import CoordinatorConfig, CoordinatorMessage, CoordinatorState, PartyMessage


def _project(v: np.ndarray, radius: float | None) -> np.ndarray:
    if radius is None:
        return v
    n = float(np.linalg.norm(v))
    return v if n <= radius else v * (radius / n)


def init_coordinator(cfg: CoordinatorConfig):
    """x, y, z start at 0 [Hu, §5]."""
    n = cfg.labels.shape[0]
    zero = np.zeros(n)
    state = CoordinatorState(0, zero, zero, zero, cfg.rho, np.inf, np.inf)
    msg = CoordinatorMessage(0, zero, zero, cfg.rho)
    return state, {name: msg for name in cfg.party_names}


def _z_step(cfg: CoordinatorConfig, centre: np.ndarray, rho: float, z0: np.ndarray, b0: float):
    """[Hu, eq. 7], optionally jointly with the label party's unpenalised intercept b.

    Without intercept: ``z_i = prox_{ℓ(·, Y_i)/ρ}(centre_i)``. With it, the coordinator minimises
    ``Σ ℓ(z_i + b, Y_i) − ⟨y, z⟩ + ρ/2 ‖s − z‖²`` over (z, b): for fixed b, ``w = z + b`` is the prox
    at ``centre + b``, and b solves ``g(b) = Σ_i ℓ'(w_i(b)) = 0`` (increasing in b, with
    ``g'(b) = Σ ℓ''ρ/(ρ + ℓ'')``) by a few Newton steps, each one vectorised prox.
    """
    t = 1.0 / rho
    if not cfg.fit_intercept:
        return cfg.loss.prox(centre, cfg.labels, t, z0=z0), 0.0
    b = b0
    n = centre.shape[0]
    w = z0 + b
    for _ in range(50):
        w = cfg.loss.prox(centre + b, cfg.labels, t, z0=w)
        g, h = cfg.loss.grad_hess(w, cfg.labels)
        G = float(g.sum())
        H = float((h * rho / (rho + h)).sum())
        if abs(G) <= 1e-10 * n:
            break
        step = G / H if H > 1e-12 * n else np.sign(G)
        b -= float(np.clip(step, -10.0, 10.0))
    return w - b, b


def coordinator_step(cfg: CoordinatorConfig, state: CoordinatorState, outboxes: Mapping[str, PartyMessage], *, rng):
    """z-update [Hu, eq. 7] (all N scalar problems at once), dual update [Hu, eq. 8], residual balancing.

    With ``cfg.label_privacy`` set, the label-private step (:func:`label_private_step`) instead.
    """
    if cfg.label_privacy is not None:
        return label_private_step(cfg, state, outboxes, rng=rng)
    rho = state.rho
    total = sum(outboxes[name].share for name in cfg.party_names)
    # over-relaxation (Boyd et al. 2011, §3.4.3; relaxation = 1 is the paper's method)
    relaxed = total if cfg.relaxation == 1.0 else cfg.relaxation * total + (1.0 - cfg.relaxation) * state.z
    z, b = _z_step(cfg, relaxed + state.dual / rho, rho, state.z, state.intercept)  # [Hu, eq. 7]
    bz, by = (cfg.bounds.z, cfg.bounds.y) if cfg.bounds is not None else (None, None)
    z = _project(z, bz)
    dual = _project(state.dual + rho * (relaxed - z), by)  # [Hu, eq. 8]
    r = float(np.linalg.norm(total - z))
    d = float(rho * np.linalg.norm(z - state.z))
    new_rho = rho
    if cfg.adaptive_rho:  # residual balancing (Boyd et al. 2011, §3.4.1) — beyond the paper
        if r > cfg.mu * d:
            new_rho = rho * cfg.tau
        elif d > cfg.mu * r:
            new_rho = rho / cfg.tau
    t = state.round + 1
    own = outboxes[cfg.party_names[0]].share
    new_state = CoordinatorState(t, z, dual, total, new_rho, r, d, b, passive_total=total - own)
    msg = CoordinatorMessage(t, total - z, dual, new_rho)
    return new_state, {name: msg for name in cfg.party_names}, []


def coordinator_converged(cfg: CoordinatorConfig, state: CoordinatorState) -> bool:
    """The stopping rule (Boyd et al. 2011, §3.3.1, with ε_abs = ε_rel = ``cfg.tol``): the primal residual
    ``‖Σ_m D_m x̃_m − z‖ ≤ tol (√N + ‖z‖)`` and the dual residual ``ρ‖z − z_prev‖ ≤ tol (√N + ‖y‖)``.

    Both residuals are what the coordinator computed from the released shares and its own z and y, so the
    decision is post-processing of the messages the run released (with randomized-response labels, of the one
    release ỹ: the labels the coordinator runs on); it reads no party's exact model or labels beyond that. The
    label-private protocol's state carries no residuals (∞): it runs its declared rounds. ``tol = 0`` never stops.
    """
    if not cfg.tol > 0:
        return False
    scale = np.sqrt(cfg.labels.shape[0])
    return bool(state.primal_residual <= cfg.tol * (scale + np.linalg.norm(state.z))
                and state.dual_residual <= cfg.tol * (scale + np.linalg.norm(state.dual)))


def coordinator_metrics(cfg: CoordinatorConfig, state: CoordinatorState, diagnostics: Mapping[str, dict]) -> dict:
    """Objective ``mean ℓ + λ Σ R_m`` at the true x, residuals, eval-set losses."""
    score = sum(diagnostics[p]["train_score"] for p in cfg.party_names) + state.intercept
    train_loss = float(np.mean(cfg.loss.value(score, cfg.labels)))
    reg = float(sum(diagnostics[p]["reg"] for p in cfg.party_names))
    converged = coordinator_converged(cfg, state)
    out = {
        "objective": train_loss + cfg.lam * reg,
        "train_loss": train_loss,
        "primal_residual": state.primal_residual,
        "dual_residual": state.dual_residual,
        "rho": state.rho,
        "converged": bool(converged),
    }
    for key, labels in cfg.eval_labels.items():
        s = sum(diagnostics[p]["eval_scores"][key] for p in cfg.party_names) + state.intercept
        out[f"{key}_{cfg.loss.metric_name}"] = float(np.mean(cfg.loss.value(s, labels)))
        if cfg.loss.binary:
            out[f"{key}_accuracy"] = float(np.mean(np.where(s >= 0, 1.0, -1.0) == labels))
    return out
