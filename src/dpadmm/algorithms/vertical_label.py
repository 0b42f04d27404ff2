"""The label-private protocol of vertical ADMM sharing (beyond [Hu]): the label party's mechanisms
and its exact refit.

See :mod:`dpadmm.algorithms.vertical_sharing` for the recursion these steps plug into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import scipy.sparse as sp

from ..privacy.events import LABEL_CHANGE, GaussianRelease
from .vertical_sharing import CoordinatorConfig, CoordinatorMessage, CoordinatorState, PartyConfig, PartyMessage, PartyState


@dataclass(frozen=True)
class LabelPrivacy:
    """The coordinator's label-side mechanism: ``noise_multiplier`` (σ_L / sensitivity) or a raw
    ``noise_scale``; ``clip`` C bounds |ℓ'| coordinatewise (a no-op for the logistic loss, whose
    label gap is 1 anyway); see :func:`dpadmm.privacy.mechanisms.label_sensitivity`."""

    noise_multiplier: float | None = None
    noise_scale: float | None = None
    clip: float = 1.0
    rounds: int | None = None  # the run's T: round T releases nothing (no party step would use it)



def label_private_step(cfg: CoordinatorConfig, state: CoordinatorState, outboxes: Mapping[str, PartyMessage], *,
                       rng: np.random.Generator):
    """The label-private coordinator (module docstring): linearised z-step, noisy clipped gradient.

    Relation: one training label changes. Premise (given the transcript, s does not depend on the
    labels): ``total`` is the sum of the parties' released shares and ``state.intercept`` the public
    intercept b̃, itself moved only by earlier noisy sums. ``g_i = clip(ℓ'(s_i, Y_i), −C, C)`` then
    depends on Y_i alone, and so does ``Σ g_i``: the pair has ℓ2 sensitivity
    ``label_sensitivity()`` (√2·W, W = 1 for the logistic loss). Emits one ``GaussianRelease`` of
    party ``"coordinator"`` under the label relation per round.
    """
    lp = cfg.label_privacy
    rho = state.rho
    n = cfg.labels.shape[0]
    total = sum(outboxes[name].share for name in cfg.party_names)
    s = total + state.intercept
    g = np.clip(cfg.loss.grad(s, cfg.labels), -lp.clip, lp.clip)  # clip: premise of the sensitivity
    C = cfg.label_sensitivity()
    sigma = lp.noise_scale if lp.noise_scale is not None else lp.noise_multiplier * C
    t = state.round + 1
    own = outboxes[cfg.party_names[0]].share
    b = state.intercept
    if lp.rounds is not None and t >= lp.rounds:  # last round: nothing would use a release, so none is made
        new_state = CoordinatorState(t, s, g, total, rho, np.inf, np.inf, b, passive_total=total - own)
        return new_state, {name: CoordinatorMessage(t, np.zeros(n), np.zeros(n), rho) for name in cfg.party_names}, []
    g_noisy = g + sigma * rng.standard_normal(n)
    if cfg.fit_intercept:  # majorise–minimise step of the intercept from the noisy sum
        b = b - float(g.sum() + sigma * rng.standard_normal()) / (rho * n)
    new_state = CoordinatorState(t, s, g, total, rho, np.inf, np.inf, b, passive_total=total - own)
    msg = CoordinatorMessage(t, np.zeros(n), g_noisy, rho)  # residual 0: the party's step is the MM step
    return new_state, {name: msg for name in cfg.party_names}, [GaussianRelease("coordinator", t, C, sigma, LABEL_CHANGE)]


def _newton_refit(f, A, base, labels, loss, pen, w):
    """Damped Newton on the small refit objective ``f`` (value, gradient) over the columns of A:
    Hessian ``Aᵀ diag(ℓ''/n) A + λ diag(pen)`` formed once per step in O(nnz·k); backtracking keeps
    every step a descent."""
    n, k = A.shape
    val, grad = f(w)
    for _ in range(100):
        h = loss.hess(A @ w + base, labels) / n
        H = A.T @ (A.multiply(h[:, None]) if sp.issparse(A) else A * h[:, None])
        H = np.asarray(H.toarray() if sp.issparse(H) else H) + np.diag(pen) + 1e-12 * np.eye(k)
        step = np.linalg.solve(H, grad)
        t = 1.0
        while True:
            w_new = w - t * step
            v_new, g_new = f(w_new)
            if v_new <= val - 1e-4 * t * float(grad @ step) or t < 1e-10:
                break
            t *= 0.5
        done = abs(val - v_new) <= 1e-15 * max(1.0, abs(val)) or float(np.abs(g_new).max()) <= 1e-12
        w, val, grad = w_new, v_new, g_new
        if done:
            break
    return w


def refit_label_block(cfg: PartyConfig, state: PartyState, offset: np.ndarray, loss: str,
                      fit_intercept: bool, intercept0: float = 0.0, weigh_offset: bool = False) -> dict:
    """The label party's exact refit after a private run (runs at the label party only).

    ``argmin_{x, b, α} Σ_i ℓ(d_iᵀx + b + α o_i, Y_i) + λ_s/2‖x‖²`` with o = the sum of the other
    parties' last shares (as the coordinator received them). The weight α on the other parties'
    contribution (fitted only with ``weigh_offset``, i.e. when the shares carry feature-side noise; else
    α = 1) lets the label party discount noisy shares (α → 0 falls back to the label party alone). The label party's own block may use its labels
    exactly; the result (its model, b, α, its eval-set partial scores) stays with the label party and is
    never sent to a passive party. At prediction the label party weighs the passive partial scores by α.
    Newton for small blocks, L-BFGS otherwise; O(nnz) per evaluation.
    """
    from scipy.optimize import minimize

    from ..exceptions import ProtocolError
    from ..kernels.losses import get_loss

    if cfg.labels is None:  # a passive party never fits a model of its block to labels someone sends it
        raise ProtocolError(f"party {cfg.name!r} refused 'refit': it holds no labels of its own (only the label "
                            "party refits its block)")
    labels = cfg.labels
    loss = get_loss(loss)  # by name: only plain data crosses to the party
    D = cfg.D
    n, d = D.shape
    lam = cfg.lam_sum / n
    offset = np.asarray(offset, dtype=np.float64)
    extra = ([np.ones(n)] if fit_intercept else []) + ([offset] if weigh_offset else [])
    base = np.zeros(n) if weigh_offset else offset  # the fixed part of every score
    E = np.column_stack(extra) if extra else np.zeros((n, 0))
    A = sp.hstack([sp.csr_matrix(D), sp.csr_matrix(E)], format="csr") if sp.issparse(D) else np.hstack([D, E])
    AT = A.T.tocsr() if sp.issparse(A) else A.T
    pen = np.r_[np.full(d, lam), np.zeros(E.shape[1])]

    def f(w):
        s = A @ w + base
        val = float(np.mean(loss.value(s, labels))) + 0.5 * float(pen @ (w * w))
        grad = np.asarray(AT @ (loss.grad(s, labels) / n)).ravel() + pen * w
        return val, grad

    w0 = np.r_[state.x, [intercept0] if fit_intercept else [], [1.0] if weigh_offset else []]
    if A.shape[1] <= 1000:
        w = _newton_refit(f, A, base, labels, loss, pen, w0)
    else:
        w = minimize(f, w0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-14}).x
    x = w[:d]
    alpha = float(w[-1]) if weigh_offset else 1.0
    return {"coef": x, "intercept": float(w[d]) if fit_intercept else 0.0,
            "passive_weight": alpha,
            "eval_scores": {k: B @ x for k, B in cfg.eval_blocks.items()}}


