"""Decentralised consensus M-ADMM over a graph with penalty perturbation — [Zhang, eq. 10–11, 24–25, Alg. 1].

Problem [Zhang, eq. 1–2]: ``min Σ_i O(f_i, D_i)`` s.t. ``f_i = f_j`` on every edge, with
``O(f, D_i) = (C/B_i) Σ_n ℒ(y_i^n fᵀx_i^n) + (ρ/N) R(f)``, ℒ logistic, ``R = ½‖f‖²``.

Iteration t → t+1 at node i (``V_i`` = degree, ``S_i(t) = Σ_{j∈V_i} f_j(t)``):

- dual   [Zhang, eq. 11]: ``λ_i(t) = λ_i(t−1) + (θ/2) Σ_j (f_i(t) − f_j(t)) = λ_i(t−1) + (θ/2)(V_i f_i(t) − S_i(t))``
- primal [Zhang, eq. 10, 24–25]:
  ``f_i(t+1) = argmin_f O(f, D_i) + 2λ_i(t)ᵀf + η_i(t+1) Σ_j ‖f + ε_i(t+1) − ½(f_i(t) + f_j(t))‖²``
  ``        = argmin_f O(f, D_i) + bᵀf + η V_i ‖f‖²`` with ``b = 2λ_i(t) − η m + 2ηV_i ε``,
  ``m = V_i f_i(t) + S_i(t)`` — a smooth, strongly convex problem in d variables, solved by damped
  majorisation–minimisation steps with warm start (:func:`local_solve`), for a whole stack of nodes at
  once, each node stopping on its own; the curvature bound is eigendecomposed once and reused as η changes.
- perturbation: ``pp`` draws ε with density ∝ exp(−α_i(t+1)‖ε‖) ([Zhang, eq. 24]: norm ~ Gamma(d, 1/α),
  uniform direction); ``dvp`` is the same with η_i(t) ≡ θ (Zhang & Zhu 2017); ``pvp`` adds the same
  noise to f_i(t+1) *after* the update, before it is broadcast (primal variable perturbation);
  ``none`` is M-ADMM. Conventional ADMM is ``none`` with η_i(t) ≡ θ.
- privacy [Zhang, Thm 4.1]: for pp/dvp, node i emits, per iteration, the pure-DP term
  ``C(1.4c_1 + α_i(t))/(η_i(t) V_i B_i)`` (a :class:`PureDPRelease`); :mod:`dpadmm.algorithms.consensus.report`
  sums and maximises them into P(t).

The step is written once for a *block* of K nodes held as stacked, zero-padded arrays
(``X``: K × B_max × d); a deployment runs one block per node (K = 1), the in-process fast path
one block holding every node. The neighbour exchange is the hub's job (``router_*``): it
collects every f_i(t+1) and hands node i ``S_i(t+1)`` — exactly what node i's neighbours send it.
f_i(0) = 0 for every node (data-independent, as [Zhang, Alg. 1] requires of the random start).

| symbol | code |
|--------|------|
| f_i(t) | ``BlockState.f[k]`` / ``ModelMessage.f`` |
| λ_i(t) | ``BlockState.lam[k]`` |
| S_i(t) = Σ_{j∈V_i} f_j(t) | ``NeighbourMessage.neighbour_sum`` |
| η_i(t), θ_i(t), α_i(t) | ``BlockConfig.eta[k, t−1]``, ``.theta[k, t−1]``, ``.alpha[k, t−1]`` |
| C, ρ/N | ``BlockConfig.C``, ``BlockConfig.reg`` (ρ is ``reg_weight`` in the estimator/CLI) |
| B_i, V_i | ``BlockConfig.B``, ``BlockConfig.degree`` |
| c_1 | ``LOGISTIC_C1`` = 1/4 |
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from ...exceptions import InvalidParameterError, PrivacyPreconditionError
from ...privacy.events import RECORD_REPLACE, PureDPRelease
from ...protocol.spec import check_setup
from ...privacy import mechanisms  # mechanisms.gamma_norm looked up at the call (tests plant a broken sampler)
from .messages import BlockConfig, BlockState, ConsensusOptions, ModelMessage, NeighbourMessage
from .schedules import LOGISTIC_C1, zhang_epsilon_terms
from .solver import MARGIN_CLIP, _pad, curvature_factor, local_solve, rotated_data

# ----------------------------------------------------------------------------- node block
def make_block(names, X_list, y_list, *, degree, C, reg, eta, theta, alpha, perturbation="none",
               newton_tol=1e-10, newton_max_iter=500) -> tuple[BlockConfig, BlockState]:
    """Stack the nodes' data into padded arrays and factor each node's curvature bound once;
    f(0) = 0, λ(0) = 0 [Zhang, Alg. 1]."""
    B = np.array([x.shape[0] for x in X_list], dtype=np.float64)
    X = _pad([np.asarray(x, dtype=np.float64) for x in X_list])
    y = _pad([np.asarray(v, dtype=np.float64) for v in y_list])
    mask = _pad([np.ones(x.shape[0]) for x in X_list])
    w = mask * (float(C) / B)[:, None]
    bound = curvature_factor(X, w)
    cfg = BlockConfig(tuple(names), X, y, w, B, np.asarray(degree, dtype=np.float64), float(C), float(reg),
                      np.asarray(eta, dtype=np.float64), np.asarray(theta, dtype=np.float64),
                      np.asarray(alpha, dtype=np.float64), perturbation, LOGISTIC_C1, float(newton_tol),
                      int(newton_max_iter), bound, rotated_data(X, y, bound))
    K, d = X.shape[0], X.shape[2]
    return cfg, BlockState(0, np.zeros((K, d)), np.zeros((K, d)))


def setup_block(names, X_list, y_list, options: ConsensusOptions):
    """Worker-side setup (``PartySpec.setup``). ``options``: the run's typed constants (a field mapping is built into
    the record by name)."""
    o = options if isinstance(options, ConsensusOptions) else check_setup(ConsensusOptions, options)
    return make_block(names, X_list, y_list, degree=o.degree, C=o.C, reg=o.reg, eta=o.eta, theta=o.theta,
                      alpha=o.alpha, perturbation=o.perturbation, newton_tol=o.newton_tol,
                      newton_max_iter=o.newton_max_iter)


def _noise(rng, alpha: np.ndarray, d: int) -> np.ndarray:
    """ε_k with density ∝ exp(−α_k‖ε‖) for every node k [Zhang, eq. 24] (0 where α_k = ∞).

    ``rng``: the block's generator (party-local entropy), or in a seeded simulation one generator per
    node of the block (``PartySpec.streams``), node k drawing from its own stream exactly as a party
    of its own would — so a stacked block and one party per node give the same numbers."""
    finite = np.isfinite(alpha)
    out = np.zeros((alpha.shape[0], d))
    if isinstance(rng, tuple):
        for k in np.flatnonzero(finite):
            out[k] = mechanisms.gamma_norm(rng[k], alpha[k:k + 1], d, size=1)[0]
        return out
    if finite.any():
        out[finite] = mechanisms.gamma_norm(rng, alpha[finite], d, size=int(finite.sum()))
    return out


def block_step(cfg: BlockConfig, state: BlockState, inbox: NeighbourMessage, *, rng: np.random.Generator):
    """One M-ADMM iteration t → t+1 for every node of the block: dual [eq. 11], then perturbed primal [eq. 24–25]."""
    t = inbox.round
    S = inbox.neighbour_sum
    V = cfg.degree
    f, lam = state.f, state.lam
    if t > 0:
        lam = lam + 0.5 * cfg.theta[:, t - 1, None] * (V[:, None] * f - S)  # [Zhang, eq. 11]
    eta = cfg.eta[:, t]  # η_k(t+1)
    alpha = cfg.alpha[:, t]
    d = f.shape[1]
    b = 2.0 * lam - eta[:, None] * (V[:, None] * f + S)  # [Zhang, eq. 10] expanded
    eps = None
    if cfg.perturbation in ("pp", "dvp"):
        eps = _noise(rng, alpha, d)
        b = b + 2.0 * (eta * V)[:, None] * eps  # [Zhang, eq. 24]: λ + η V ε in the linear term
    f_opt, its = local_solve(cfg.Z, cfg.w, cfg.reg + 2.0 * eta * V, b, f, cfg.bound,
                             tol=cfg.newton_tol, max_iter=cfg.newton_max_iter)  # [Zhang, eq. 25]
    f_new = f_opt
    if cfg.perturbation == "pvp":
        f_new = f_new + _noise(rng, alpha, d)  # primal variable perturbation before broadcast
    events = []
    if cfg.perturbation in ("pp", "dvp"):
        terms = zhang_epsilon_terms(C=cfg.C, B=cfg.B, degree=V, eta=eta, alpha=alpha, c1=cfg.c1)  # [Zhang, Thm 4.1]
        events = [PureDPRelease(name, t + 1, float(e), RECORD_REPLACE) for name, e in zip(cfg.names, terms)]
    new = BlockState(t + 1, f_new, lam, state.newton_iterations + int(its.max(initial=0)))
    return new, ModelMessage(f_new), events


def block_diagnostics(cfg: BlockConfig, state: BlockState) -> dict:
    """Monitoring values (not messages): per-node mean training loss, local objective O(f_k, D_k), accuracy."""
    z = np.matmul(cfg.X, state.f[..., None])[..., 0]
    mask = cfg.w > 0
    losses = np.where(mask, np.logaddexp(0.0, np.clip(-cfg.y * z, -MARGIN_CLIP, None)), 0.0)
    mean_loss = losses.sum(axis=1) / cfg.B
    correct = np.where(mask, (np.where(z >= 0, 1.0, -1.0) == cfg.y), False).sum(axis=1)
    return {
        "node_loss": mean_loss,
        "node_objective": cfg.C * mean_loss + 0.5 * cfg.reg * (state.f ** 2).sum(axis=1),
        "node_correct": correct,
        "node_samples": cfg.B,
        "newton_iterations": state.newton_iterations,
    }


def block_coefs(cfg: BlockConfig, state: BlockState) -> np.ndarray:
    """The block's current local models f_k (K, d)."""
    return state.f.copy()


# ----------------------------------------------------------------------------- a node's own file; peer to peer
def load_node_data(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData`` reference: node data from the node's own CSV (label column
    ``label_column`` in {-1, +1} or {0, 1}; every other column but ``id_column`` a feature).
    ``params["part"]``: ``"X"`` (rows rescaled to norm ≤ 1 if ``normalize``) or ``"y"`` (±1)."""
    df = pd.read_csv(path)
    label, idc = str(params.get("label_column", "y")), str(params.get("id_column", "id"))
    if label not in df.columns:
        raise InvalidParameterError(f"node file {path} has no label column {label!r}.")
    if params.get("part") == "y":
        y = df[label].to_numpy(dtype=np.float64)
        return np.where(y > 0, 1.0, -1.0)
    X = df.drop(columns=[c for c in (label, idc) if c in df.columns]).to_numpy(dtype=np.float64)
    if params.get("normalize"):
        X = X / np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None]
    if params.get("require_unit_norm") and np.max(np.linalg.norm(X, axis=1)) > 1.0 + 1e-9:
        raise PrivacyPreconditionError(f"[Zhang, Thm 4.1] needs ||x||_2 <= 1 for every row of {path}; normalise them.")
    return X


def describe_node_data(path, id_column: str = "id", label_column: str = "y") -> dict:
    df = pd.read_csv(path, usecols=lambda c: c != id_column)
    return {"rows": int(df.shape[0]), "columns": int(df.shape[1] - (label_column in df.columns))}


def is_private(cfg: BlockConfig) -> bool:
    return cfg.perturbation != "none"


def peer_inbox(cfg: BlockConfig, state: BlockState, round_: int, neighbour_sum) -> NeighbourMessage:
    """Peer to peer (one node per party): round ``round_``'s inbox from the sum of the neighbours' broadcasts
    (``None`` in round 0, when every f_j(0) = 0)."""
    S = np.zeros_like(state.f) if neighbour_sum is None else np.asarray(neighbour_sum, dtype=np.float64)[None, :]
    return NeighbourMessage(round_, S)


def peer_broadcast(outbox: ModelMessage) -> np.ndarray:
    """Peer to peer: the node's broadcast f_i(t+1), sent to each of its neighbours."""
    return np.asarray(outbox.f)[0]
