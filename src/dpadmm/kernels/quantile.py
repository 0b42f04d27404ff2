"""The check (pinball) loss of quantile regression, its subgradient, prox and smoothed form.

``ρ_τ(u) = u (τ − 1{u ≤ 0})`` [Zhou, eq. 11]; a subgradient is ``ψ_τ(u) = τ − 1{u ≤ 0}`` (the
paper's choice at u = 0, used in [Zhou, §5.1]). For a residual ``u = y − a·w`` the subgradient in
``w`` is ``−a ψ_τ(u)``.

Prox (elementwise): ``prox_{tρ_τ}(v) = v − tτ`` if ``v > tτ``; ``v + t(1 − τ)`` if ``v < −t(1 − τ)``;
else 0.

Smoothed check loss (beyond the paper): the Moreau envelope with parameter h,
``ρ_τ^h(u) = min_z ρ_τ(z) + (u − z)²/(2h)``, which is
``τu − τ²h/2`` for ``u ≥ τh``, ``(τ − 1)u − (1 − τ)²h/2`` for ``u ≤ (τ − 1)h`` and ``u²/(2h)``
in between; its derivative is ``clip(u/h, τ − 1, τ)`` and ``0 ≤ ρ_τ − ρ_τ^h ≤ h max(τ, 1 − τ)²/2``.
It is piecewise quadratic, so a semismooth Newton method on it terminates once the three
residual sets are identified; letting h → 0 recovers the exact check-loss minimiser.

All functions broadcast: ``tau`` may be a scalar or an array broadcastable to ``u``.
"""

from __future__ import annotations

import numpy as np


def check_loss(u, tau):
    """ρ_τ(u) = u(τ − 1{u ≤ 0}), elementwise [Zhou, eq. 11]."""
    u = np.asarray(u, dtype=float)
    return u * (tau - (u <= 0))


def check_subgradient(u, tau):
    """ψ_τ(u) = τ − 1{u ≤ 0} ∈ ∂ρ_τ(u) (the element used by [Zhou, §5.1])."""
    u = np.asarray(u, dtype=float)
    return tau - (u <= 0).astype(float)


def check_prox(v, tau, t):
    """prox_{t ρ_τ}(v) elementwise (t > 0)."""
    v = np.asarray(v, dtype=float)
    up = t * tau
    lo = t * (1.0 - tau)
    return np.where(v > up, v - up, np.where(v < -lo, v + lo, 0.0))


def smoothed_check_loss(u, tau, h):
    """Moreau envelope ρ_τ^h(u) (h > 0); see the module docstring."""
    u = np.asarray(u, dtype=float)
    hi = u >= tau * h
    lo = u <= (tau - 1.0) * h
    return np.where(hi, tau * u - tau * tau * h / 2.0,
                    np.where(lo, (tau - 1.0) * u - (1.0 - tau) ** 2 * h / 2.0, u * u / (2.0 * h)))


def smoothed_check_grad(u, tau, h):
    """d ρ_τ^h / du = clip(u/h, τ − 1, τ)."""
    u = np.asarray(u, dtype=float)
    return np.clip(u / h, tau - 1.0, tau)


def smoothed_check_curvature(u, tau, h):
    """Second derivative of ρ_τ^h: 1/h on ((τ − 1)h, τh), 0 elsewhere (a generalised Hessian)."""
    u = np.asarray(u, dtype=float)
    return ((u > (tau - 1.0) * h) & (u < tau * h)) / h


def pinball_score(y, pred, tau) -> float:
    """Mean check loss of predictions ``pred`` of the τ-quantile of ``y``."""
    return float(np.mean(check_loss(np.asarray(y, float) - np.asarray(pred, float), tau)))
