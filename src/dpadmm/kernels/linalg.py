"""Linear algebra for the party x-step of [Hu, eq. 6]: factor once, or iterate without a d × d matrix.

For a party block D (N × d) the ridge x-step solves ``(λ_q I + ρ DᵀD) x = b`` for the current ρ
(which residual balancing may change). Two solvers share one interface (:class:`XStepSolver`):

- :class:`SpectralSolver` (``"eigh"``): one symmetric eigendecomposition ``DᵀD = V diag(s²) Vᵀ``,
  computed once, gives every solve as two d × d products for any (λ_q, ρ):
  ``x = V diag(1 / (λ_q + ρ s²)) Vᵀ b`` — exact, O(d²) per solve, but O(N d² + d³) time and O(d²)
  memory at setup. The same factorisation yields an orthonormal basis of range(D),
  ``U = D V_r diag(1/s_r)`` over the numerically non-zero s (a9a's blocks are rank deficient).
- :class:`CGSolver` (``"cg"``): preconditioned conjugate gradients on the same system, using only
  ``D v`` and ``Dᵀ u`` (O(nnz) each, so a sparse block stays sparse) and the Jacobi preconditioner
  ``λ_q + ρ diag(DᵀD)`` (the column norms, O(nnz) at setup); warm-started at the caller's previous
  x. Never forms a d × d matrix.

:func:`make_solver` picks ``eigh`` for blocks of at most :data:`EIGH_MAX_DIM` columns (dense) or
:data:`EIGH_MAX_DIM_SPARSE` (sparse) and ``cg`` above, unless told otherwise.

Accuracy of ``cg``: a call stops when the residual ``‖b − A x‖`` is at most
``max(tol · ‖b‖, reduction · ‖b − A x₀‖)`` or after ``max_iter`` iterations, and reports the
residual it reached (``last_residual``). With ``reduction = 0`` it is a solve to relative
accuracy ``tol`` (what a private x-step that a sensitivity bound covers wants: the error in x is
at most ``‖r‖ / λ_min(A) ≤ ‖r‖ / λ_q``); a reduction factor > 0 gives the *inexact* x-steps of
inexact ADMM (warm start plus a fixed reduction of the residual: the error shrinks with the
ADMM step, which is how the non-private sparse fits reach their objective gap fast).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from ..exceptions import InvalidParameterError

EIGH_MAX_DIM = 2048
"""Largest dense block width the automatic choice factors (eigh of 2048 × 2048 takes ~1–2 s on one core)."""

EIGH_MAX_DIM_SPARSE = 512
"""Largest sparse block width the automatic choice factors: for a sparse block cg's setup is O(nnz)
while forming DᵀD densely costs d² memory and a sparse product whose intermediates grow with
Σ_i nnz_i² (100,000 × 1,000 at 8 non-zeros per row: 2.2 s and 136 MB against cg's 0.05 s, 20 MB)."""

SOLVERS = ("auto", "eigh", "cg")


class XStepSolver:
    """Interface: ``solve(b, lam_q, rho, x0=None)``, ``gram_matvec(v)``, ``lipschitz``, ``rank``.

    ``rank`` is the numerical rank of D when the solver knows it (``None`` otherwise);
    ``range_basis(D)`` an orthonormal basis of range(D) where the solver can give one.
    """

    kind = "abstract"
    dim: int

    def solve(self, b: np.ndarray, lam_q: float, rho: float, x0: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - interface

    def gram_matvec(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - interface

    @property
    def lipschitz(self) -> float:
        raise NotImplementedError  # pragma: no cover - interface

    rank: int | None = None

    def range_basis(self, D) -> np.ndarray:
        raise InvalidParameterError(
            f"an orthonormal basis of range(D_m) needs the eigendecomposition; this block uses the "
            f"{self.kind!r} x-step solver ({self.dim} columns); pass solver='eigh' (memory and time grow "
            "as d_m^2 and d_m^3) or use a mechanism that needs no basis.")


class SpectralSolver(XStepSolver):
    """Eigendecomposition of DᵀD, reused for every x-step solve and for the range basis.

    Attributes
    ----------
    gram : (d, d) DᵀD
    eigvals : (d,) eigenvalues s² ≥ 0 (clipped at 0)
    eigvecs : (d, d) orthonormal V
    rank : number of eigenvalues above ``rcond · max(s²)``
    """

    kind = "eigh"

    def __init__(self, D, rcond: float = 1e-10):
        G = D.T @ D
        self.gram = np.asarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)
        w, V = np.linalg.eigh(self.gram)
        w = np.clip(w, 0.0, None)
        self.dim = int(self.gram.shape[0])
        self.eigvals = w
        self.eigvecs = V
        top = float(w.max(initial=0.0))
        self.keep = w > rcond * max(top, 1e-300)
        self.rank = int(self.keep.sum())
        self.last_iterations = 0

    def solve(self, b: np.ndarray, lam_q: float, rho: float, x0: np.ndarray | None = None) -> np.ndarray:
        """Return ``(lam_q I + rho DᵀD)⁻¹ b``; needs lam_q > 0 or D of full column rank (``x0`` unused)."""
        V = self.eigvecs
        return V @ ((V.T @ b) / (lam_q + rho * self.eigvals))

    def gram_matvec(self, v: np.ndarray) -> np.ndarray:
        """``DᵀD v`` from the stored Gram matrix."""
        return self.gram @ v

    def range_basis(self, D) -> np.ndarray:
        """Orthonormal basis U (N × rank) of range(D)."""
        V = self.eigvecs[:, self.keep]
        s = np.sqrt(self.eigvals[self.keep])
        U = np.asarray(D @ V) / s
        # one re-orthonormalisation pass for numerical hygiene
        Q, _ = np.linalg.qr(U)
        return Q

    @property
    def lipschitz(self) -> float:
        """Largest eigenvalue of DᵀD."""
        return float(self.eigvals.max(initial=0.0))


def column_sq_norms(D) -> np.ndarray:
    """``diag(DᵀD)``: squared l2 norm of every column, O(nnz) (dense: O(N d)); D is never densified
    (a sparse block's values are copied once, transiently, to square them)."""
    if sp.issparse(D):
        return np.asarray(D.power(2).sum(axis=0), dtype=np.float64).ravel()
    return np.einsum("ij,ij->j", D, D)


class CGSolver(XStepSolver):
    """Jacobi-preconditioned conjugate gradients for ``(λ_q I + ρ DᵀD) x = b``, warm-started.

    Parameters
    ----------
    D : (N, d) ndarray or sparse matrix (kept by reference, never densified).
    DT : its transpose in a layout with fast products (default ``D.T``).
    tol : relative residual ``‖r‖ ≤ tol · ‖b‖`` at which a solve stops.
    reduction : also stop once ``‖r‖ ≤ reduction · ‖r₀‖`` (r₀ = residual at the warm start);
        0 (default) disables it, giving a solve to accuracy ``tol``.
    max_iter : cap on iterations per solve (default: ``max(100, 2 d)`` capped at 10,000).

    ``last_iterations`` and ``last_residual`` tell how the latest solve ended (monitoring).
    """

    kind = "cg"

    def __init__(self, D, DT=None, *, tol: float = 1e-10, reduction: float = 0.0, max_iter: int | None = None):
        self.D = D
        self.DT = D.T if DT is None else DT
        self.dim = int(D.shape[1])
        self.diag = column_sq_norms(D)
        self.tol = float(tol)
        self.reduction = float(reduction)
        self.max_iter = int(max_iter) if max_iter is not None else min(10_000, max(100, 2 * self.dim))
        self._lipschitz: float | None = None
        self.last_iterations = 0
        self.last_residual = 0.0
        self.rank = None  # unknown without a factorisation

    def gram_matvec(self, v: np.ndarray) -> np.ndarray:
        """``DᵀD v`` by two products with D (O(nnz))."""
        return self.DT @ (self.D @ v)

    def solve(self, b: np.ndarray, lam_q: float, rho: float, x0: np.ndarray | None = None) -> np.ndarray:
        """``(lam_q I + rho DᵀD)⁻¹ b`` by PCG from ``x0`` (zero if None); needs lam_q > 0 or full rank."""
        return self.solve_image(b, lam_q, rho, x0)[0]

    def solve_image(self, b: np.ndarray, lam_q: float, rho: float, x0: np.ndarray | None = None,
                    Dx0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(x, D x)`` with x as :meth:`solve`; ``D x`` is updated alongside x at no extra product.

        ``Dx0`` (= D x0, if the caller has it) saves one product at the warm start. Without
        ``reduction`` the stopping test is re-checked on the true residual ``b − A x`` (the
        recursively updated one drifts by rounding) and CG restarts from x if it fails.
        """
        D, DT = self.D, self.DT
        inv_m = 1.0 / np.maximum(lam_q + rho * self.diag, 1e-300)
        bnorm = float(np.linalg.norm(b))
        self.last_iterations, self.last_residual = 0, 0.0
        if bnorm == 0.0:
            return np.zeros_like(b), np.zeros(D.shape[0])
        if x0 is None or not np.any(x0):
            x, Dx, r = np.zeros_like(b), np.zeros(D.shape[0]), b.copy()
        else:
            x = np.array(x0, dtype=np.float64, copy=True)
            Dx = D @ x if Dx0 is None else np.array(Dx0, dtype=np.float64, copy=True)
            r = b - (lam_q * x + rho * (DT @ Dx))
        rnorm = float(np.linalg.norm(r))
        stop = max(self.tol * bnorm, self.reduction * rnorm)
        budget = self.max_iter
        for _restart in range(4):
            if rnorm <= stop or budget <= 0:
                break
            used = self._pcg(x, Dx, r, lam_q, rho, inv_m, stop, budget)
            budget -= used
            self.last_iterations += used
            if self.reduction > 0.0:
                rnorm = float(np.linalg.norm(r))
                break
            Dx = D @ x
            r = b - (lam_q * x + rho * (DT @ Dx))
            rnorm = float(np.linalg.norm(r))
        self.last_residual = rnorm
        return x, Dx

    def _pcg(self, x, Dx, r, lam_q, rho, inv_m, stop, budget) -> int:
        """PCG iterations updating (x, Dx, r = b − A x) in place until ‖r‖ ≤ stop; returns the count."""
        D, DT = self.D, self.DT
        z = r * inv_m
        p = z.copy()
        rz = float(r @ z)
        it = 0
        for it in range(1, budget + 1):
            Dp = D @ p
            Ap = lam_q * p + rho * (DT @ Dp)
            pAp = float(p @ Ap)
            if pAp <= 0.0:  # only when lam_q = 0 and p ∈ null(D): nothing left to reduce
                break
            alpha = rz / pAp
            x += alpha * p
            Dx += alpha * Dp
            r -= alpha * Ap
            if float(np.linalg.norm(r)) <= stop:
                break
            z = r * inv_m
            rz_new = float(r @ z)
            p *= rz_new / rz
            p += z
            rz = rz_new
        return it

    @property
    def lipschitz(self) -> float:
        """An upper bound on the largest eigenvalue of DᵀD (computed once, lazily).

        Lanczos (``eigsh``) to relative accuracy 1e-6, inflated by 1%, and never above the
        Hölder bound ``‖D‖₁‖D‖_∞`` (max column abs sum × max row abs sum), which is a true upper bound.
        """
        if self._lipschitz is None:
            from scipy.sparse.linalg import LinearOperator, eigsh

            D = self.D
            absD = abs(D)
            holder = float(np.max(np.asarray(absD.sum(axis=0)))) * float(np.max(np.asarray(absD.sum(axis=1))))
            if self.dim <= 2:
                G = np.asarray(self.DT @ (D @ np.eye(self.dim)))
                est = float(np.linalg.eigvalsh(G).max()) * 1.01
            else:
                op = LinearOperator((self.dim, self.dim), matvec=self.gram_matvec, dtype=np.float64)
                try:
                    est = float(eigsh(op, k=1, which="LA", tol=1e-6, return_eigenvectors=False)[0]) * 1.01
                except Exception:  # no convergence: the Hölder bound is always valid
                    est = holder
            self._lipschitz = min(est, holder) if holder > 0 else max(est, 0.0)
        return self._lipschitz


def make_solver(D, solver: str = "auto", *, DT=None, tol: float = 1e-10, reduction: float = 0.0,
                max_iter: int | None = None) -> XStepSolver:
    """The x-step solver for block D: ``"eigh"``, ``"cg"``, or ``"auto"`` (eigh iff d ≤ EIGH_MAX_DIM, or
    ≤ EIGH_MAX_DIM_SPARSE for a sparse block).

    ``tol``, ``reduction`` and ``max_iter`` configure ``cg`` (see :class:`CGSolver`).
    """
    if solver == "auto":
        limit = EIGH_MAX_DIM_SPARSE if sp.issparse(D) else EIGH_MAX_DIM
        solver = "eigh" if D.shape[1] <= limit else "cg"
    if solver == "eigh":
        return SpectralSolver(D)
    if solver == "cg":
        return CGSolver(D, DT, tol=tol, reduction=reduction, max_iter=max_iter)
    raise ValueError(f"solver must be one of {SOLVERS}, got solver={solver!r}.")
