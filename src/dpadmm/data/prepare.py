"""A party's preparation of its own block: row clipping, standardisation, row normalisation.

These run where the block lives (the party's worker or process); vertical ADMM sharing and the experts
use them (:mod:`dpadmm.algorithms.vertical.data`), and so does a party file read at its party
(:class:`dpadmm.data.remote.PartyFile`).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..kernels.norms import safe_row_norms
from .parties import normalize_rows


def clip_rows(D, radius: float = 1.0):
    """Rows scaled to ``‖d_k‖ ≤ radius`` (rows already inside are unchanged; sparse stays sparse)."""
    if sp.issparse(D):
        D = sp.csr_matrix(D, dtype=np.float64)
        norms = safe_row_norms(D)  # no under/overflow: every row is clipped (REDTEAM_POLICY R5)
        scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
        return sp.diags(scale) @ D
    D = np.asarray(D, dtype=np.float64)
    norms = safe_row_norms(D)
    scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return D * scale[:, None]


#: how a party prepares its own block (``dpadmm vertical admm --prepare``)
PREPARATIONS = ("standardize", "normalize-rows", "none")


def column_scaling(D) -> tuple[np.ndarray, np.ndarray]:
    """(centre, scale) of every column of the party's own training block: mean and standard deviation
    (scale 1 for a constant column; centre 0 for a sparse block, which stays sparse)."""
    if sp.issparse(D):
        D = sp.csr_matrix(D, dtype=np.float64)
        mean = np.asarray(D.mean(axis=0)).ravel()
        sd = np.sqrt(np.maximum(np.asarray(D.multiply(D).mean(axis=0)).ravel() - mean ** 2, 0.0))
        return np.zeros_like(mean), np.where(sd > 0, sd, 1.0)
    D = np.asarray(D, dtype=np.float64)
    sd = D.std(axis=0)
    return D.mean(axis=0), np.where(sd > 0, sd, 1.0)


def prepare_block(D, how: str, *, scaling=None, row_clip: float | None = None):
    """Party-local preparation of a block in raw units; returns ``(block, scaling)``.

    ``"standardize"``: every column centred and scaled by the party's own training mean and standard
    deviation (``scaling``, computed from the training block and reused for its test block), so a
    one-column party keeps its values (row normalisation would reduce them to their sign). With
    ``row_clip`` R (set when the features are protected): rows are then clipped to ``‖d_k‖ ≤ R`` and
    divided by R, so ``‖d_k‖ ≤ 1`` — the premise of the feature-side sensitivity. The statistics depend
    on the party's own rows: they are part of the block "as the party uses it", which the one-feature-
    column relation speaks of; under the record relation replacing a record moves them, so that
    relation needs ``"none"`` with rows already scaled by public bounds (the CLI refuses the mix).
    ``"normalize-rows"``: unit-norm rows ([Hu, Assumption 2.3]). ``"none"``: unchanged.
    """
    if how == "none":
        return D, None
    if how == "normalize-rows":
        return normalize_rows(D), None
    centre, scale = scaling if scaling is not None else column_scaling(D)
    if sp.issparse(D):
        out = sp.csr_matrix(D, dtype=np.float64) @ sp.diags(1.0 / scale)
    else:
        out = (np.asarray(D, dtype=np.float64) - centre) / scale
    if row_clip is not None:
        out = clip_rows(out, row_clip) * (1.0 / row_clip)
    return out, (centre, scale)


def default_row_clip(d: int) -> float:
    """R for a standardised block of d columns: 3·sqrt(d), three times the root-mean-square norm of its
    rows — a one-column party keeps the order of its values within 3 standard deviations (where the
    signal of a raw-unit column such as a balance usually lies), and a wider block clips only rows far
    out. A smaller R shrinks fewer rows' information but lets the noise weigh more (it is added at
    sensitivity for ‖d_k‖ ≤ 1 after dividing by R)."""
    return 3.0 * float(np.sqrt(max(int(d), 1)))
