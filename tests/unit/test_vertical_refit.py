"""The label party's refit solver (issue 37): every fold at once, Hessians reused — the same minimisers as a plain
solve of each problem on its own rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from dpadmm.algorithms.vertical import refit
from dpadmm.kernels.losses import get_loss


def _problem(n=1500, d=5, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(n, d)) * np.exp(rng.normal(size=d))
    if sparse:
        D[rng.random(size=D.shape) < 0.7] = 0.0
        D = sp.csr_matrix(D)
    offset = rng.normal(size=n)
    y = np.where(D @ rng.normal(size=d) + 0.8 * offset + rng.normal(size=n) > 0, 1.0, -1.0)
    return D, offset, y


def _reference(D, E, base, y, loss, pen, rows):
    """The problem on its own rows, solved by L-BFGS to its gradient tolerance (an independent solver)."""
    A = np.hstack([D.toarray() if sp.issparse(D) else D, E])[rows]

    def f(w):
        s = A @ w + base[rows]
        return (float(np.mean(loss.value(s, y[rows]))) + 0.5 * float(pen @ (w * w)),
                A.T @ loss.grad(s, y[rows]) / len(s) + pen * w)

    return minimize(f, np.zeros(A.shape[1]), jac=True, method="L-BFGS-B",
                    options={"maxiter": 10_000, "gtol": 1e-12, "ftol": 1e-15}).x


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("name", ["logistic", "huber"])
def test_the_batched_folds_solve_each_training_fold_as_a_plain_fit_would(sparse, name):
    D, offset, y = _problem(sparse=sparse)
    loss = get_loss(name)
    if name == "huber":
        y = y * 2.0 + D @ np.ones(D.shape[1])
    n, d = D.shape
    E = np.column_stack([np.ones(n), offset])
    design = refit.Design(D, E)
    pen = np.r_[np.full(d, 1e-2), 0.0, 0.0]
    base = np.zeros(n)
    w = refit.fit(design, base, y, loss, pen, np.zeros(d + 2))
    np.testing.assert_allclose(w, _reference(D, E, base, y, loss, pen, np.arange(n)), atol=1e-6)
    H0 = refit.fold_hessians(design, loss.hess(design.dot(w), y), pen, 5)
    W = refit.fit(design, base, y, loss, pen, np.repeat(w[:, None], 5, axis=1), folds=5, H0=H0)
    for k in range(5):
        rows = np.flatnonzero(np.arange(n) % 5 != k)
        np.testing.assert_allclose(W[:, k], _reference(D, E, base, y, loss, pen, rows), atol=1e-6)


def test_the_fold_hessians_are_the_training_rows_weighted_grams():
    D, offset, y = _problem(n=203)
    design = refit.Design(D, offset[:, None])
    h = np.random.default_rng(1).random(203)
    pen = np.full(design.k, 0.3)
    A = np.hstack([D, offset[:, None]])
    for k, H in enumerate(refit.fold_hessians(design, h, pen, 5)):
        tr = np.arange(203) % 5 != k
        np.testing.assert_allclose(H, (A[tr] * h[tr, None]).T @ A[tr] / tr.sum() + np.diag(pen), rtol=1e-12)


def test_the_full_fit_is_a_stationary_point_to_rounding():
    D, offset, y = _problem(n=3000, seed=2)
    loss = get_loss("logistic")
    design = refit.Design(D, np.ones((3000, 1)))
    pen = np.r_[np.full(D.shape[1], 1e-4), 0.0]
    w = refit.fit(design, offset, y, loss, pen, np.zeros(design.k))
    grad = design.tdot(loss.grad(design.dot(w) + offset, y)) / 3000 + pen * w
    assert np.abs(grad).max() < 1e-12
