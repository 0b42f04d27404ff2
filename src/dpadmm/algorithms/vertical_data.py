"""Party-side data of vertical ADMM sharing: reading a party's own file, bounding its rows.

These run inside the party (its worker or its ``dpadmm party-serve`` process); the driver never
holds the features of a party file.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp


def _local(block):
    """An array, or a source the party reads itself (e.g. :class:`dpadmm.data.remote.PartyFile`)."""
    return block.load() if hasattr(block, "load") else block


def clip_rows(D, radius: float = 1.0):
    """Rows scaled to ``‖d_k‖ ≤ radius`` (rows already inside are unchanged; sparse stays sparse)."""
    if sp.issparse(D):
        D = sp.csr_matrix(D, dtype=np.float64)
        norms = np.sqrt(np.asarray(D.multiply(D).sum(axis=1)).ravel())
        scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
        return sp.diags(scale) @ D
    D = np.asarray(D, dtype=np.float64)
    norms = np.linalg.norm(D, axis=1)
    scale = np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return D * scale[:, None]


def load_party_data(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData`` reference: read this party's own CSV, joined on the coordinator's ids."""
    from ..data.remote import PartyFile

    return PartyFile(str(path), int(params.get("index", 2)), np.asarray(params["ids"]), int(params["n_features"]),
                     str(params.get("id_column", "id")), str(params.get("label_column", "y")),
                     bool(params.get("normalize", False))).load()


def describe_party_data(path, id_column: str = "id", label_column: str = "y") -> dict:
    """Public facts about a party file: its feature-column count (the header only)."""
    import pandas as pd

    cols = list(pd.read_csv(path, nrows=0).columns)
    return {"columns": len([c for c in cols if c not in (id_column, label_column)])}


