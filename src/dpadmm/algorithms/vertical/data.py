"""Party-side data of vertical ADMM sharing: reading a party's own file (its row preparation: :mod:`dpadmm.data.prepare`).

These run inside the party (its worker or its ``dpadmm party-serve`` process); the driver never
holds the features of a party file.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from ...data.prepare import (  # noqa: F401  (the party's preparation, re-exported: its home is dpadmm.data)
    PREPARATIONS, clip_rows, column_scaling, default_row_clip, prepare_block,
)
from ...data.remote import PartyFile


def _local(block):
    """An array, or a source the party reads itself (e.g. :class:`dpadmm.data.remote.PartyFile`)."""
    return block.load() if hasattr(block, "load") else block


def load_party_data(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData`` reference: read this party's own CSV, joined on the coordinator's ids."""
    return PartyFile(str(path), int(params.get("index", 2)), np.asarray(params["ids"]), int(params["n_features"]),
                     str(params.get("id_column", "id")), str(params.get("label_column", "y")),
                     bool(params.get("normalize", False)), subset=bool(params.get("subset", False))).load()


def describe_party_data(path, id_column: str = "id", label_column: str = "y") -> dict:
    """Public facts about a party file: its feature-column count (the header only)."""
    cols = list(pd.read_csv(path, nrows=0).columns)
    return {"columns": len([c for c in cols if c not in (id_column, label_column)])}
