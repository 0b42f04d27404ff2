"""Red team 2026-11-29, fourth pass: the Huber expert's accelerated-gradient fallback (X1's fix). Its step count is
loose enough in practice (the theorem's constants carry a factor of ~2 and ln q of slack) that halving T, dividing
G₀ by 10⁶ or halving β in the step count all went unseen by the default tests: every hostile set still reached γ.
These tests pin the public step count to the docstring's theorem (an independent implementation) and check the
solver's step 1/β on rows AT the smoothness bound (every row at norm R_a in one direction, the loss quadratic there),
where a step of 2/β_true no longer contracts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.experts import regression as xr
from dpadmm.algorithms.experts.model import augment


def _theorem_steps(n, R, lam, kappa, gtol):
    """T = 1 + ⌈2√q ln(2√(q(q+1)) G₀/γ)⌉, q = β/λ, β = R_a²(1 + 1e-9) + λ, G₀ = R_a min(κ, 1) (module docstring)."""
    Ra2 = 2.0 * R * R
    q = (Ra2 * (1 + 1e-9) + lam) / lam
    G0 = math.sqrt(Ra2) * min(kappa, 1.0)
    return 1 + math.ceil(2 * math.sqrt(q) * math.log(max(2 * math.sqrt(q * (q + 1)) * G0 / gtol, 1.0)))


@pytest.mark.parametrize("n, R, kappa", [(200, 1.0, 0.5), (10**6, 1e-3, 1e-6), (10**9, 1e80, 1e300), (7, 1e-90, 3.0)])
def test_the_public_step_count_is_the_theorems(n, R, kappa):
    lam = xr.HUBER_LAMBDA_FLOOR * R * R
    gtol = xr.tolerance(n, R, lam, "huber", kappa)
    assert xr.fallback_steps(n, R, lam, kappa, gtol) == pytest.approx(_theorem_steps(n, R, lam, kappa, gtol), abs=1)
    assert xr.fallback_steps(n, R, 10 * lam, kappa, gtol) < xr.fallback_steps(n, R, lam, kappa, gtol)


@pytest.mark.parametrize("R", [1e-90, 1.0, 1e90])
def test_the_fallback_reaches_gamma_on_rows_at_the_smoothness_bound(R):
    n, d, kappa = 64, 3, 1e3  # the loss quadratic on every residual: curvature exactly R_a² + λ along the rows
    lam = xr.HUBER_LAMBDA_FLOOR * R * R
    D = np.tile(np.ones(d) * R / math.sqrt(d), (n, 1))
    y = np.linspace(-1, 1, n)
    gtol = xr.tolerance(n, R, lam, "huber", kappa)
    w = xr.solve_huber_fallback(augment(D, R), y, R, lam, kappa, gtol)  # an AssertionError would be the bug
    assert np.isfinite(w).all()
