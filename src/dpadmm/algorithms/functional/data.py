"""A worker's own curve file, read by the worker (both functional protocols): :func:`load_curve_data` for a
``PartyData`` reference, :func:`describe_curve_data` for public facts about it.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from ...data.functional import load_functional_csv


def load_curve_data(path, params: Mapping):
    """Party side of a ``PartyData`` reference (both functional protocols): this worker's own curve file
    (``dpadmm.data.functional.load_functional_csv``: one row per curve, a response column, grid columns);
    ``params["part"]`` = ``"curves"`` (the (m, T) curves, the default) or ``"y"`` (the responses)."""
    response = str(params.get("response_column", params.get("label_column", "y")))
    data = load_functional_csv(path, response_column=response, id_column=params.get("id_column", "id"))
    return data.y if params.get("part") == "y" else data.curves


def describe_curve_data(path, response_column: str | None = None, label_column: str = "y", id_column: str = "id",
                        **_) -> dict:
    """Public facts about a curve file, from its header only: the number of grid points."""
    cols = list(pd.read_csv(path, nrows=0).columns)
    return {"grid_points": len([c for c in cols if c not in (response_column or label_column, id_column)])}
