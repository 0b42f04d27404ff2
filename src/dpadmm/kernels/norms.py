"""Euclidean norms that neither underflow nor overflow (privacy clips must see every non-zero vector).

``np.linalg.norm`` squares its entries: a vector of entries ~1e-200 has norm 0.0 and one of entries
~1e200 has norm inf. A clip ``v·min(1, c/‖v‖)`` or a sensitivity bound ``V = min(c, ‖v‖)`` then
silently stops bounding anything (a coordinator can choose such inputs: REDTEAM_POLICY R1, R5,
R5b). These norms scale by the largest magnitude first (as BLAS ``nrm2`` does), so a vector is 0
only if it is exactly 0, and the result is inf only if the true norm exceeds the largest float.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def safe_norm(a, axis=-1, keepdims: bool = False):
    """‖a‖₂ over ``axis`` (``None``: the whole array) without intermediate under/overflow; NaN if a NaN."""
    a = np.asarray(a, dtype=np.float64)
    if axis is None:
        a, axis = a.reshape(-1), -1
    s = np.max(np.abs(a), axis=axis, keepdims=True, initial=0.0)
    ok = np.isfinite(s) & (s > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        n = np.where(ok, s * np.linalg.norm(a / np.where(ok, s, 1.0), axis=axis, keepdims=True), s)
    return n if keepdims else np.squeeze(n, axis=axis)


def safe_row_norms(D) -> np.ndarray:
    """``‖d_k‖₂`` of every row of a dense or sparse matrix, without under/overflow."""
    if not sp.issparse(D):
        return safe_norm(D, axis=1)
    D = sp.csr_matrix(D, dtype=np.float64)
    s = np.asarray(abs(D).max(axis=1).todense()).ravel()
    ok = np.isfinite(s) & (s > 0)
    R = sp.diags(1.0 / np.where(ok, s, 1.0)) @ D
    with np.errstate(over="ignore"):
        return np.where(ok, s * np.sqrt(np.asarray(R.multiply(R).sum(axis=1)).ravel()), s)
