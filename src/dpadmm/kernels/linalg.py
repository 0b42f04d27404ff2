"""Factor-once linear algebra for the party x-step of [Hu, eq. 6].

For a party block D (N × d) the x-step needs solves with ``(λ_q I + ρ DᵀD)`` for the current ρ
(which residual balancing may change). One symmetric eigendecomposition ``DᵀD = V diag(s²) Vᵀ``,
computed once, gives every such solve as two d×d products for any (λ_q, ρ):
``x = V diag(1 / (λ_q + ρ s²)) Vᵀ b``. The same factorisation yields an orthonormal basis of
range(D), ``U = D V_r diag(1/s_r)`` over the numerically non-zero s, which the correlated noise of
[Hu, eq. 16] needs (SPEC §1: a9a's blocks are rank deficient, so (DᵀD)⁻¹ does not exist).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class SpectralSolver:
    """Eigendecomposition of DᵀD, reused for every x-step solve and for the range basis.

    Attributes
    ----------
    gram : (d, d) DᵀD
    eigvals : (d,) eigenvalues s² ≥ 0 (clipped at 0)
    eigvecs : (d, d) orthonormal V
    rank : number of eigenvalues above ``rcond · max(s²)``
    """

    def __init__(self, D, rcond: float = 1e-10):
        G = D.T @ D
        self.gram = np.asarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)
        w, V = np.linalg.eigh(self.gram)
        w = np.clip(w, 0.0, None)
        self.eigvals = w
        self.eigvecs = V
        top = float(w.max(initial=0.0))
        self.keep = w > rcond * max(top, 1e-300)
        self.rank = int(self.keep.sum())

    def solve(self, b: np.ndarray, lam_q: float, rho: float) -> np.ndarray:
        """Return ``(lam_q I + rho DᵀD)⁻¹ b``; needs lam_q > 0 or D of full column rank."""
        V = self.eigvecs
        return V @ ((V.T @ b) / (lam_q + rho * self.eigvals))

    def range_basis(self, D: np.ndarray) -> np.ndarray:
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
