"""Regularisers R(x) with value, gradient (where smooth), curvature bound and prox.

``prox(v, t) = argmin_x t·R(x) + ½‖x − v‖²``.

| name        | R(x)                                 | prox                                   | sup R'' (c_1) |
|-------------|--------------------------------------|----------------------------------------|---------------|
| l2          | ½‖x‖²                                | v / (1 + t)                            | 1             |
| l1          | ‖x‖₁                                 | soft(v, t)                             | — (not C²)    |
| elasticnet  | α‖x‖₁ + (1 − α)/2 ‖x‖²               | soft(v, tα) / (1 + t(1 − α))           | — (not C²)    |

Only twice-differentiable regularisers (``smooth = True``) satisfy [Hu, Assumption 2.2].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..exceptions import InvalidParameterError
from .._validation import check_positive


def soft_threshold(v, t):
    """Elementwise ``sign(v) · max(|v| − t, 0)``."""
    return np.sign(v) * np.maximum(np.abs(v) - t, 0.0)


class Regularizer:
    """Interface; subclasses are frozen dataclasses."""

    name = "reg"
    smooth = True
    l2_weight = 0.0  # coefficient of ½‖x‖² inside R (the quadratic part)
    l1_weight = 0.0  # coefficient of ‖x‖₁ inside R
    curvature_bound: float | None = None

    def value(self, x):
        x = np.asarray(x)
        return 0.5 * self.l2_weight * float(x @ x) + self.l1_weight * float(np.abs(x).sum())

    def prox(self, v, t):
        return soft_threshold(v, t * self.l1_weight) / (1.0 + t * self.l2_weight)


@dataclass(frozen=True)
class L2(Regularizer):
    """``R(x) = ½‖x‖²``."""

    name = "l2"
    smooth = True
    l2_weight = 1.0
    l1_weight = 0.0
    curvature_bound = 1.0

    def grad(self, x):
        return np.asarray(x)


@dataclass(frozen=True)
class L1(Regularizer):
    """``R(x) = ‖x‖₁`` (not differentiable: no DP guarantee under [Hu])."""

    name = "l1"
    smooth = False
    l2_weight = 0.0
    l1_weight = 1.0


@dataclass(frozen=True)
class ElasticNet(Regularizer):
    """``R(x) = α‖x‖₁ + (1 − α)/2 ‖x‖²`` with ``alpha = l1_ratio`` in [0, 1]."""

    l1_ratio: float = 0.5
    name = "elasticnet"
    smooth = False

    @property
    def l1_weight(self):  # type: ignore[override]
        return self.l1_ratio

    @property
    def l2_weight(self):  # type: ignore[override]
        return 1.0 - self.l1_ratio


REGULARIZERS = {"l2": L2, "l1": L1, "elasticnet": ElasticNet}


def get_regularizer(penalty, l1_ratio: float = 0.5) -> Regularizer:
    """Return a Regularizer from a name (``l2``, ``l1``, ``elasticnet``) or an instance."""
    if isinstance(penalty, Regularizer):
        return penalty
    if penalty not in REGULARIZERS:
        raise InvalidParameterError(f"penalty must be one of {sorted(REGULARIZERS)}, got penalty={penalty!r}.")
    if penalty == "elasticnet":
        r = check_positive("l1_ratio", l1_ratio, allow_zero=True)
        if r > 1:
            raise InvalidParameterError(f"l1_ratio must be in [0, 1], got l1_ratio={l1_ratio!r}.")
        return ElasticNet(l1_ratio=r)
    return REGULARIZERS[penalty]()
