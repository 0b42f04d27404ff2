"""The typed parameters of one vertical experts fit and their checks (issue 39, item 1).

:class:`ExpertsParams` holds the public parameters of :class:`dpadmm.estimators.VerticalExpertsClassifier` (its
docstring says what each means), frozen; building one checks every value once. The driver (:mod:`.driver`) turns the
budgets into noise multipliers and the flip probability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._validation import check_positive
from ...exceptions import InvalidParameterError
from .model import R_RANGE

#: the smallest ``n (1 − 2q)²`` at which the label party sends randomized-response labels to the experts. On
#: the private-utility benchmark (breast_cancer, fair, Adult, a9a at label ε = 0.5, 1, 2, 5, 3 seeds) runs
#: below 5,000 were at best within noise of the label party alone (breast_cancer, n = 400: 0.168–0.172 vs
#: 0.172) and at worst far behind it (fair at ε = 0.5: 0.88 vs 0.55; a9a and Adult at ε = 0.5, where
#: n(1 − 2q)² ≈ 1,950 and 1,810: 0.388 vs 0.362, 0.441 vs 0.438); every run above it was better (a9a and
#: Adult at ε ≥ 1, n(1 − 2q)² ≥ 6,441). A party fitting on flipped labels, de-biased by 1/(1 − 2q), adds
#: more noise than signal when too few labels survive the flips.
MIN_EFFECTIVE_ROWS = 5000.0


@dataclass(frozen=True)
class ExpertsParams:
    """One experts fit's parameters, checked when built (see the module docstring)."""

    lam: float = 1e-3
    epsilon: float | None = None
    delta: float = 1e-5
    label_epsilon: float | None = None
    row_clip: float = 1.0
    noise_norm: float = 0.5
    min_effective_rows: float | None = None
    random_state: Any = None
    bounds: Any = "dp"
    calibrate: bool = True

    def __post_init__(self):
        check_positive("lam", self.lam)
        check_positive("row_clip", self.row_clip)
        if not R_RANGE[0] <= float(self.row_clip) <= R_RANGE[1]:
            raise InvalidParameterError(f"row_clip must be in [{R_RANGE[0]:g}, {R_RANGE[1]:g}] (the solver's float "
                                        f"range), got {self.row_clip}; scale the rows instead")
        check_positive("noise_norm", self.noise_norm)
        if self.epsilon is not None:
            check_positive("epsilon", self.epsilon)
            check_positive("delta", self.delta)
            if not self.delta < 1:
                raise InvalidParameterError(f"delta must be < 1, got {self.delta}; pass e.g. delta=1e-5")
        if self.label_epsilon is not None:
            check_positive("label_epsilon", self.label_epsilon)
        if self.min_effective_rows is not None and not (math.isfinite(self.min_effective_rows)
                                                        and self.min_effective_rows >= 0):
            raise InvalidParameterError(f"min_effective_rows must be a finite number >= 0, got "
                                        f"{self.min_effective_rows}; pass e.g. min_effective_rows=0 to always send")

    @property
    def floor(self) -> float:
        """The ``n (1 − 2q)²`` below which no label is sent (``min_effective_rows``, default ``MIN_EFFECTIVE_ROWS``)."""
        return MIN_EFFECTIVE_ROWS if self.min_effective_rows is None else float(self.min_effective_rows)

    def party_bounds(self, k: int) -> list:
        """One bounds entry per feature party (``"dp"``, ``(lo, hi)`` or ``None``), checked."""
        b = self.bounds
        if b is None or isinstance(b, str):
            if b is not None and b not in ("dp", "none"):
                raise InvalidParameterError(f"bounds must be 'dp', None or one (lo, hi) per feature party, got {b!r}")
            return [b] * k
        b = list(b)
        if len(b) != k:
            raise InvalidParameterError(f"bounds has {len(b)} entries for {k} feature parties; give one per party "
                                        "((lo, hi), 'dp' or None)")
        return b


__all__ = ["ExpertsParams", "MIN_EFFECTIVE_ROWS"]
