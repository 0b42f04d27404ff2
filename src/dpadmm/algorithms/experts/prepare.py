"""A feature party's preparation of its raw-unit block for the experts protocol: bound its own columns, map them.

The sensitivity proof of :mod:`.model` assumes rows of norm ≤ R. A party whose file holds raw units (a year column
≈ 2000, an income in dollars) would have every row clipped at R = 1 and its signal gone, and a per-row
normalisation would erase each column's scale against the others. Instead the party bounds each of its OWN columns
(:mod:`dpadmm.privacy.ranges`):

- from bounds its operator declares (``dpadmm vertical experts --bounds FILE`` per party, ``bounds=`` of the estimator):
  public, nothing released;
- or, by default, from a DP estimate of each column's range on its own rows: ``RANGE_ROUNDS`` Gaussian releases of
  threshold counts (record relation), paid from the party's own budget. The budget is split in the Gaussian
  mechanism's currency 1/z² (:func:`dpadmm.privacy.ranges.split_noise`): the range estimate takes
  ``RANGE_SHARE`` of it and the model's one output-perturbed release the rest, so that the whole run composes to
  the party's ε (checked with the accountant; the report and the ledger list every release).

It then maps every column to [−1, 1] by its bounds and scales the block by the public constant ``R/√d``
(:func:`dpadmm.privacy.ranges.scale_columns`): every row has norm ≤ R, and no per-row factor is applied. The same
map (the same bounds) prepares the party's new records at scoring time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ...privacy.accountants import calibrate_noise_multiplier, gaussian_epsilon
from ...privacy.ranges import RANGE_ROUNDS, dp_column_bounds, scale_columns, split_noise

#: how a feature party bounds its columns: a DP range estimate (default), its operator's declared bounds, or not at
#: all (its rows are used as given and clipped at R: only for blocks already scaled by public bounds)
BOUNDS_SOURCES = ("dp", "declared", "none")


class Prepared(NamedTuple):
    X: object  # the block mapped by the bounds (or as given when not bounded)
    lo: np.ndarray | None
    hi: np.ndarray | None
    events: list  # the range estimate's Gaussian releases (empty for declared bounds or a non-private run)
    model_noise_multiplier: float | None  # the noise multiplier left for the model's release
    source: str  # "dp", "declared", "exact (non-private run)" or "none"


def noise_multipliers(epsilon: float, delta: float, range_estimate: bool) -> tuple[float | None, float]:
    """``(z_range, z_model)`` for a party whose budget is (ε, δ): with a range estimate, the split of
    :func:`dpadmm.privacy.ranges.split_noise`, scaled up by the smallest factor (to a relative 1e-5) at which the
    accountant confirms the whole composition is within ε; without, ``(None, z)`` with z calibrated for the one
    release."""
    z = calibrate_noise_multiplier(float(epsilon), float(delta), 1)
    return (None, z) if not range_estimate else _split(float(epsilon), float(delta), z)


@lru_cache(maxsize=64)
def _split(epsilon: float, delta: float, z: float) -> tuple[float, float]:
    def ok(scale):
        zr, zo = split_noise(z * scale)
        return gaussian_epsilon([zr] * RANGE_ROUNDS + [zo], delta, "pld") <= epsilon

    lo, step = 1.0, 1e-5
    while not ok(lo + step):  # the PLD's discretisation can put the exact split a hair above ε
        lo, step = lo + step, step * 2.0
        if step > 1.0:  # pragma: no cover - the split composes to one release at z: never this far
            raise RuntimeError("could not split the party's budget between its range estimate and its model")
    hi = lo + step
    while hi - lo > 1e-5:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return split_noise(z * hi)


def prepare_party(name: str, X, *, bounds, R: float, range_noise_multiplier: float | None,
                  model_noise_multiplier: float | None, rng: np.random.Generator) -> Prepared:
    """Party ``name``'s block prepared (module docstring). ``bounds``: ``(lo, hi)`` declared by its operator,
    ``"dp"`` (a DP range estimate at ``range_noise_multiplier``; exact 2%/98% quantile bounds in a non-private run)
    or ``None`` / ``"none"`` (as given)."""
    if bounds is None or (isinstance(bounds, str) and bounds == "none"):
        return Prepared(X, None, None, [], model_noise_multiplier, "none")
    if isinstance(bounds, str):
        if bounds != "dp":
            raise ValueError(f"party {name!r}: bounds must be (lo, hi), 'dp' or 'none', got {bounds!r}")
        private = model_noise_multiplier is not None
        zr = float(range_noise_multiplier) if private else 0.0
        lo, hi, events = dp_column_bounds(name, X, zr, rng)
        source = "dp" if private else "exact (non-private run)"
    else:
        lo, hi = (np.asarray(v, dtype=np.float64) for v in bounds)
        events, source = [], "declared"
    return Prepared(scale_columns(X, lo, hi, R), lo, hi, events, model_noise_multiplier, source)


def apply(X, lo, hi, R: float):
    """The party's map on new records (the bounds of its fit; none: as given)."""
    return X if lo is None else scale_columns(X, lo, hi, R)


def public_facts(p: Prepared) -> dict:
    """What the party may tell the label party about its preparation: the source and the number of range rounds (the
    bounds themselves are post-processing of DP counts, but stay with the party: the label party has no use for them)."""
    return {"bounds_source": p.source, "range_rounds": len(p.events),
            "range_noise_multiplier": (float(p.events[0].noise_multiplier) if p.events else None),
            "columns_bounded": None if p.lo is None else int(len(p.lo))}

