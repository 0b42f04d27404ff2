"""Per-sample scalar losses ℓ(z, y) of a linear score z, vectorised over samples.

Every loss exposes the value, first and second derivatives in z, a bound on |ℓ'| (used for
brackets and by privacy theorems), and ``prox(v, y, t) = argmin_z t·ℓ(z, y) + ½(z − v)²``
for all samples at once (closed form where it exists, safeguarded Newton otherwise).

| loss      | ℓ(z, y)                                   | labels    | sup |ℓ'| | sup ℓ'' |
|-----------|-------------------------------------------|-----------|----------|---------|
| logistic  | log(1 + exp(−y z))                        | {−1, +1}  | 1        | 1/4     |
| squared   | ½ (z − y)²                                | real      | ∞        | 1       |
| huber(κ)  | ½ r² if |r| ≤ κ else κ(|r| − κ/2), r = z−y | real      | κ        | 1       |
| poisson   | exp(z) − y z  (log link: the mean is e^z)  | real ≥ 0  | ∞        | ∞       |

The Poisson loss is half the Poisson deviance ``y log(y/μ) − y + μ`` at ``μ = e^z`` minus ``y log y − y``, a term
free of z: the same minimiser and gradients as scikit-learn's ``PoissonRegressor`` (its ``alpha`` is our λ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from .scalar_prox import newton_prox
from ..exceptions import InvalidParameterError


class Loss:
    """Interface of a per-sample loss; subclasses are frozen dataclasses (picklable)."""

    name = "loss"
    metric_name = "loss"
    grad_bound: float | None = None
    hess_bound: float = 1.0
    binary = False

    def value(self, z, y):  # pragma: no cover - interface
        raise NotImplementedError

    def grad(self, z, y):  # pragma: no cover - interface
        raise NotImplementedError

    def hess(self, z, y):  # pragma: no cover - interface
        raise NotImplementedError

    def grad_hess(self, z, y):
        """``(ℓ'(z, y), ℓ''(z, y))`` — one pass where the loss allows it."""
        return self.grad(z, y), self.hess(z, y)

    def prox(self, v, y, t, z0=None):
        """``argmin_z t·ℓ(z, y) + ½(z − v)²`` elementwise (generic safeguarded Newton)."""
        y = np.broadcast_to(np.asarray(y, dtype=np.float64), np.shape(v))
        return newton_prox(self.grad_hess, v, y, t, grad_bound=self.grad_bound, z0=z0)


@dataclass(frozen=True)
class LogisticLoss(Loss):
    """Logistic loss ``log(1 + exp(−y z))`` for y ∈ {−1, +1}, stable for large margins."""

    name = "logistic"
    metric_name = "log_loss"
    grad_bound = 1.0
    hess_bound = 0.25
    binary = True

    def value(self, z, y):
        return np.logaddexp(0.0, -y * z)

    def grad(self, z, y):
        return -y * expit(-y * z)

    def hess(self, z, y):
        p = expit(z)
        return p * (1.0 - p)

    def grad_hess(self, z, y):
        p = expit(-y * z)  # one transcendental pass for both derivatives
        return -y * p, p * (1.0 - p)


@dataclass(frozen=True)
class SquaredLoss(Loss):
    """Squared loss ``½(z − y)²``; its prox is ``(v + t y) / (1 + t)``."""

    name = "squared"
    metric_name = "squared_loss"
    grad_bound = None
    hess_bound = 1.0

    def value(self, z, y):
        return 0.5 * (z - y) ** 2

    def grad(self, z, y):
        return z - y

    def hess(self, z, y):
        return np.ones_like(np.asarray(z, dtype=np.float64))

    def prox(self, v, y, t, z0=None):
        return (v + t * y) / (1.0 + t)


@dataclass(frozen=True)
class HuberLoss(Loss):
    """Huber loss with threshold ``kappa``; closed-form prox."""

    kappa: float = 1.0
    name = "huber"
    metric_name = "huber_loss"
    hess_bound = 1.0

    @property
    def grad_bound(self):  # type: ignore[override]
        return self.kappa

    def value(self, z, y):
        r = np.abs(z - y)
        return np.where(r <= self.kappa, 0.5 * r**2, self.kappa * (r - 0.5 * self.kappa))

    def grad(self, z, y):
        return np.clip(z - y, -self.kappa, self.kappa)

    def hess(self, z, y):
        return (np.abs(z - y) <= self.kappa).astype(np.float64)

    def prox(self, v, y, t, z0=None):
        r0 = v - y
        inner = np.abs(r0) <= self.kappa * (1.0 + t)
        return np.where(inner, (v + t * y) / (1.0 + t), v - t * self.kappa * np.sign(r0))


@dataclass(frozen=True)
class PoissonLoss(Loss):
    """Poisson loss with log link ``e^z − y z`` for counts (any real y ≥ 0); prox by monotone Newton (:meth:`prox`)."""

    name = "poisson"
    metric_name = "poisson_loss"
    grad_bound = None
    hess_bound = math.inf

    def value(self, z, y):
        return np.exp(z) - y * z

    def grad(self, z, y):
        return np.exp(z) - y

    def hess(self, z, y):
        return np.exp(z)

    def grad_hess(self, z, y):
        m = np.exp(z)
        return m - y, m

    def prox(self, v, y, t, z0=None, tol=1e-12, max_iter=100):
        """``argmin_z t(e^z − y z) + ½(z − v)²`` elementwise: the root of ``φ(z) = t e^z + z − u``, ``u = v + t y``.

        φ is increasing and convex, so Newton started at or above the root decreases monotonically to it (no
        bracket, no overshoot) and converges quadratically once close. The start ``min(u, log1p(|u|/t))`` is above
        the root — ``φ(u) = t e^u > 0`` and ``φ(log1p(|u|/t)) ≥ t + |u| − u > 0`` — and keeps ``e^z ≤ 1 + |u|/t``
        (no overflow); a warm start ``z0`` is used where it is also above the root (φ(z0) ≥ 0) and below that bound.
        All samples at once; no Python loop over samples.
        """
        v = np.asarray(v, dtype=np.float64)
        u = v + t * np.broadcast_to(np.asarray(y, dtype=np.float64), v.shape)
        z = np.minimum(u, np.log1p(np.abs(u) / t))
        if z0 is not None:
            w = np.asarray(z0, dtype=np.float64)
            ok = (w < z) & (t * np.exp(np.minimum(w, z)) + w - u >= 0)
            z = np.where(ok, w, z)
        for _ in range(max_iter):
            m = t * np.exp(z)
            phi = m + z - u
            if np.all(phi <= tol * (1.0 + np.abs(u))):
                break
            z = z - phi / (m + 1.0)
        return z


LOSSES = {"logistic": LogisticLoss, "squared": SquaredLoss, "huber": HuberLoss, "poisson": PoissonLoss}


def get_loss(loss) -> Loss:
    """Return a Loss instance from a name or an instance."""
    if isinstance(loss, Loss):
        return loss
    if loss not in LOSSES:
        raise InvalidParameterError(f"loss must be one of {sorted(LOSSES)}, got loss={loss!r}.")
    return LOSSES[loss]()
