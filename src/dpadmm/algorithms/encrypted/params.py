"""The typed parameters of one encrypted vertical fit and their checks (issue 39, item 1).

:class:`EncryptedParams` holds the public parameters of :class:`dpadmm.estimators.vertical_encrypted.VerticalEncryptedClassifier`
(its docstring says what each means), frozen; building one checks every value once. The driver (:mod:`.driver`)
turns the budgets into noise multipliers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import check_positive
from ...exceptions import InvalidParameterError
from . import combine as ec

#: the default weight bound W = W₀ (forward="encrypted"): the best or tied of W ∈ {0.5, 1, 2, 4, 8} on three tables
#: other than fair and a9a at ε ∈ {0.5, 1, 3} (``benchmarks/bench_encrypted_tables.py``); smaller W means smaller
#: sensitivities (2R·G and 2√2·R₀·R·W grow with it) and scores where the Taylor residual stays close to the logistic
#: one, larger W a larger model — without noise 2 and 4 gave the same (BENCHMARKS.md). A public constant: no data.
WEIGHT_BOUND = 2.0

#: the label mechanisms (``label_mechanism``): randomized response at the label party (default), or its Gaussian
#: on the decrypted gradients (a premise on the other parties: the estimator's docstring)
LABEL_MECHANISMS = ("rr", "gaussian")

#: each forward mode's defaults of ``rounds``, ``step`` and ``momentum`` (used where the parameter is ``None``)
DEFAULTS = {"clear": {"rounds": 60, "step": 8.0, "momentum": 0.0},
            "encrypted": {"rounds": 40, "step": 2.0, "momentum": 0.7}}


@dataclass(frozen=True)
class EncryptedParams:
    """One encrypted fit's parameters, checked when built (see the module docstring)."""

    epsilon: float | None = None
    label_epsilon: float | None = None
    delta: float = 1e-5
    rounds: int | None = None
    step: float | None = None
    lam: float = 1e-4
    row_clip: float = 1.0
    forward: str = "encrypted"
    momentum: float | None = None
    weight_bound: float = WEIGHT_BOUND
    calibration: float = 0.1
    random_state: Any = None
    combine: str = ec.DEFAULT_COMBINE
    label_mechanism: str = "rr"

    def resolved(self, name: str):
        """``rounds``, ``step`` or ``momentum`` as given, or the forward mode's default (:data:`DEFAULTS`)."""
        v = getattr(self, name)
        return DEFAULTS[self.forward][name] if v is None else v

    @property
    def encrypted(self) -> bool:
        return self.forward == "encrypted"

    @property
    def rr(self) -> float | None:
        """The labels' randomized-response ε (``label_mechanism="rr"`` with a label budget), else None."""
        return float(self.label_epsilon) if self.label_epsilon and self.label_mechanism == "rr" else None

    def __post_init__(self):
        if self.forward not in DEFAULTS:
            raise InvalidParameterError(f"forward must be 'clear' or 'encrypted', got forward={self.forward!r}.")
        for k in ("delta", "lam", "row_clip", "weight_bound"):
            check_positive(k, getattr(self, k))
        check_positive("step", self.resolved("step"))
        check_positive("momentum", self.resolved("momentum"), allow_zero=True)
        if self.label_mechanism not in LABEL_MECHANISMS:
            raise InvalidParameterError(f"label_mechanism must be one of {LABEL_MECHANISMS}, got "
                                        f"label_mechanism={self.label_mechanism!r}.")
        if self.combine not in ec.COMBINE_MODES:
            raise InvalidParameterError(f"combine must be one of {ec.COMBINE_MODES}, got combine={self.combine!r}.")
        if not 0 < float(self.calibration) < 1:
            raise InvalidParameterError(f"calibration must be in (0, 1), got calibration={self.calibration!r}.")
        for k in ("epsilon", "label_epsilon"):
            if getattr(self, k) is not None:
                check_positive(k, getattr(self, k))
        T = self.resolved("rounds")
        if not (isinstance(T, (int, np.integer)) and T >= 1):
            raise InvalidParameterError(f"rounds must be a positive integer, got {T!r}; pass e.g. rounds=60")


__all__ = ["DEFAULTS", "EncryptedParams", "LABEL_MECHANISMS", "WEIGHT_BOUND"]
