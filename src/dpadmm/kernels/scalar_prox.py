"""Vectorised solver for N independent one-dimensional prox problems.

For a smooth convex per-sample loss ℓ(z, y) the coordinator's z-step of [Hu, eq. 7] splits into
N scalar problems ``z_i = argmin_z t·ℓ(z, y_i) + ½(z − v_i)²``, i.e. the root of the strictly
increasing function ``φ(z) = t·ℓ'(z, y_i) + z − v_i`` (φ' ≥ 1). All N roots are found at once:
a few plain Newton steps from the warm start (quadratic convergence, no bookkeeping), then, for
any entries not yet converged, Newton safeguarded by a bracket — if |ℓ'| ≤ G the root lies in
[v − tG, v + tG], and a step leaving the current bracket is replaced by bisection. No Python
loop over samples.
"""

from __future__ import annotations

import numpy as np


def newton_prox(grad_hess, v, y, t, *, grad_bound=None, z0=None, tol=1e-10, max_iter=60, fast_steps=4):
    """Solve ``t·ℓ'(z, y) + z − v = 0`` elementwise.

    Parameters
    ----------
    grad_hess : callable ``(z, y) -> (ℓ'(z, y), ℓ''(z, y))`` elementwise, ℓ'' ≥ 0.
    v, y : (N,) arrays: prox centres and labels.
    t : float > 0, step (1/ρ in the z-step).
    grad_bound : float or None, sup |ℓ'|; gives the bracket. Without it the bracket is grown
        from ``v`` until it contains the root.
    z0 : optional warm start.
    tol : stop once max |φ(z)| ≤ tol · (1 + max |v|).
    """
    v = np.asarray(v, dtype=np.float64)
    scale = tol * (1.0 + np.max(np.abs(v), initial=0.0))
    z = v.copy() if z0 is None else np.array(z0, dtype=np.float64)
    for _ in range(fast_steps):
        g, h = grad_hess(z, y)
        phi = t * g + z - v
        bad = np.abs(phi) > scale
        if not bad.any():
            return z
        z = z - phi / (t * h + 1.0)
    g, _ = grad_hess(z, y)
    idx = np.flatnonzero(np.abs(t * g + z - v) > scale)
    if idx.size:
        z[idx] = _safeguarded(grad_hess, v[idx], y[idx], t, grad_bound, z[idx], scale, max_iter)
    return z


def _safeguarded(grad_hess, v, y, t, grad_bound, z, scale, max_iter):
    if grad_bound is not None:
        lo, hi = v - t * grad_bound, v + t * grad_bound
    else:
        width = np.ones_like(v)
        lo, hi = v - width, v + width
        for _ in range(200):
            bad_lo = t * grad_hess(lo, y)[0] + lo - v > 0
            bad_hi = t * grad_hess(hi, y)[0] + hi - v < 0
            if not (bad_lo.any() or bad_hi.any()):
                break
            width *= 2.0
            lo = np.where(bad_lo, v - width, lo)
            hi = np.where(bad_hi, v + width, hi)
    z = np.clip(z, lo, hi)
    for _ in range(max_iter):
        g, h = grad_hess(z, y)
        phi = t * g + z - v
        done = np.abs(phi) <= scale
        if done.all():
            break
        pos = phi > 0  # φ increasing: the root is below z where φ(z) > 0
        hi = np.where(pos, z, hi)
        lo = np.where(pos, lo, z)
        z_new = z - phi / (t * h + 1.0)
        # a Newton step must land strictly inside the shrinking bracket, else bisect
        z_new = np.where((z_new <= lo) | (z_new >= hi), 0.5 * (lo + hi), z_new)
        z = np.where(done, z, z_new)
    return z
