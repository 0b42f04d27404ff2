"""Graph consensus, the router's side: it delivers every node's broadcast to the node's neighbours (in a
deployment the nodes exchange them peer to peer, :func:`.node.peer_inbox`) and reports the metrics of [Zhang, §5].
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .messages import ModelMessage, NeighbourMessage, RouterConfig, RouterState


def init_router(cfg: RouterConfig):
    """f(0) = 0 everywhere, so every S_i(0) = 0."""
    F = np.zeros((cfg.n_nodes, cfg.dim))
    inboxes = {name: NeighbourMessage(0, np.zeros((idx.size, cfg.dim))) for name, idx in cfg.blocks}
    return RouterState(0, F, np.inf), inboxes


def router_step(cfg: RouterConfig, state: RouterState, outboxes: Mapping[str, ModelMessage], *, rng):
    """Deliver every broadcast f_j(t+1) to j's neighbours: node i receives ``S_i = Σ_{j∈V_i} f_j``."""
    F = np.empty_like(state.F)
    for name, idx in cfg.blocks:
        F[idx] = outboxes[name].f
    S = cfg.A @ F
    t = state.round + 1
    change = float(np.max(np.linalg.norm(F - state.F, axis=1)))
    path = state.path + (F,) if cfg.record_path else ()
    inboxes = {name: NeighbourMessage(t, S[idx]) for name, idx in cfg.blocks}
    return RouterState(t, F, change, path), inboxes, []


def router_metrics(cfg: RouterConfig, state: RouterState, diagnostics: Mapping[str, dict]) -> dict:
    """L(t) = (1/N) Σ_i (1/B_i) Σ_n ℒ(y f_i(t)ᵀx) [Zhang, §5], the objective Σ_i O(f_i, D_i), consensus error."""
    loss = np.concatenate([diagnostics[name]["node_loss"] for name, _ in cfg.blocks])
    obj = np.concatenate([diagnostics[name]["node_objective"] for name, _ in cfg.blocks])
    correct = sum(float(diagnostics[name]["node_correct"].sum()) for name, _ in cfg.blocks)
    total = sum(float(diagnostics[name]["node_samples"].sum()) for name, _ in cfg.blocks)
    fbar = state.F.mean(axis=0)
    consensus = float(np.max(np.linalg.norm(state.F - fbar, axis=1)))
    return {
        "train_loss": float(loss.mean()),
        "objective": float(obj.sum()),
        "train_accuracy": correct / total,
        "consensus_error": consensus,
        "change": state.change,
        "newton_iterations": int(sum(diagnostics[name]["newton_iterations"] for name, _ in cfg.blocks)),
        "converged": bool(cfg.tol > 0 and state.change <= cfg.tol and consensus <= cfg.tol),
    }
